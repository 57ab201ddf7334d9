"""Exception policies: what a step's error leads to, and how long to wait.

- :mod:`~flask_geneva.policies.exception_policy`: ``ExceptionPolicy``,
  ``on_exception`` and the actions (R-POL-01..);
- :mod:`~flask_geneva.policies.matchers`: which exceptions a policy captures;
- :mod:`~flask_geneva.policies.resolution`: picking the policy for an error and
  deciding the action;
- :mod:`~flask_geneva.policies.backoff` and
  :mod:`~flask_geneva.policies.release_spread`: reattempt waits and jitter;
- :mod:`~flask_geneva.policies.task_failures`: which handled errors fail the
  Celery task, and how they are logged.

Pure code: no database, no framework. Before 0.2 ``flask_geneva.policies`` was
the module that is now ``exception_policy``; its names still resolve here, with a
``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    """Resolve a name of the pre-0.2 ``flask_geneva.policies`` module (warns)."""
    module = importlib.import_module(f"{__name__}.exception_policy")
    if name not in module.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"flask_geneva.policies.{name} moved to "
        f"flask_geneva.policies.exception_policy.{name} (the old path is removed "
        "in flask_geneva 1.0; the public names are also exported by flask_geneva)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(module, name)
