"""A startup warning when a worker's pool cannot enforce step timeouts (R-STO-05).

Celery enforces time limits in the ``prefork`` pool only: its parent process
raises the soft limit in the child (``SoftTimeLimitExceeded``) and kills the
child at the hard limit. The ``solo`` and ``threads`` pools (and
``eventlet``/``gevent``) accept the limits and ignore them. There a step with a
``timeout`` is not interrupted: it runs to its end, and a body that returns
after its timeout ends in ``StepTimeout`` all the same (R-STO-11). A worker of
such a pool logs one WARNING at its start naming the steps concerned.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.ext.broker_checks import first_names

__all__ = ["steps_with_timeouts", "warn_if_timeouts_unenforced"]

_log = module_logger("flask_geneva")


def steps_with_timeouts(workflow_classes: Iterable[type[Any]]) -> list[str]:
    """``"<type>.<step>"`` of every step with a ``timeout``, sorted.

    Args:
        workflow_classes: Workflow classes (``geneva.workflow_classes.values()``).
    """
    names = set()
    for cls in workflow_classes:
        definitions = getattr(cls, "__geneva_definitions__", None)
        if definitions is None:
            continue
        type_name = str(getattr(cls, "__geneva_type__", cls.__name__))
        for step in definitions.steps.registered:
            if step.timeout is not None:
                names.add(f"{type_name}.{step.name}")
    return sorted(names)


def warn_if_timeouts_unenforced(
    pool_name: str, workflow_classes: Iterable[type[Any]]
) -> bool:
    """Warn that ``pool_name`` cannot interrupt steps with a ``timeout`` (R-STO-05).

    Called on Celery's ``worker_init`` for a pool other than prefork.

    Args:
        pool_name: The pool's name (``"solo"``, ``"threads"``, ...).
        workflow_classes: The registered workflow classes.

    Returns:
        True if the warning was logged (some step has a timeout).
    """
    names = steps_with_timeouts(workflow_classes)
    if not names:
        return False
    shown = first_names(names)
    _log.warning(
        "Steps declare a timeout (%s) but this worker's %s pool cannot interrupt "
        "a running task: Celery enforces time limits in the prefork pool only. "
        "Such a step runs to its end here, and one that ran longer than its "
        "timeout ends in StepTimeout (R-STO-05, R-STO-11); run these steps on a "
        "prefork worker (--pool=prefork) to have them interrupted",
        shown,
        pool_name,
    )
    return True
