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

_MOVED_NAMES = frozenset(
    {
        "DEFAULT_MAX_REATTEMPTS",
        "DEFAULT_POLICY",
        "HANDLER_MARK",
        "REPORT_MODES",
        "Action",
        "ExceptionHandlerDecorator",
        "ExceptionPolicy",
        "PolicyList",
        "coerce_action",
        "describe_matcher",
        "on_exception",
    }
)


def __getattr__(name: str) -> Any:
    """Resolve a name of the pre-0.2 ``flask_geneva.policies`` module (warns)."""
    if name not in _MOVED_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"flask_geneva.policies.{name} moved to "
        f"flask_geneva.policies.exception_policy.{name} (the old path is removed "
        "in flask_geneva 1.0; the public names are also exported by flask_geneva)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(f"{__name__}.exception_policy"), name)
