"""Whether a recovered execution ran past its step's timeout (R-STO-20).

Recovery (housekeeping's, the dispatcher's and the operator's ``recover()``)
ends an ``in_progress`` execution whose worker was lost
(:mod:`flask_geneva.engine.operators.worker_lost`). When the step has a
``timeout`` and the execution was still running after it, the worker most
likely died of it (Celery's hard time limit kills the process
``GENEVA_STEP_TIMEOUT_GRACE`` after the soft one), so the record names
:class:`~flask_geneva.exceptions.StepTimeout` instead of
:class:`~flask_geneva.exceptions.WorkerLostError`, and the step's exception
policies decide what follows
(:mod:`flask_geneva.engine.operators.timeout_recovery`). Heartbeats are the
evidence, never an excuse: a worker that heartbeat past the timeout shows the
step ran past it (R-STO-21).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

__all__ = ["ran_past_timeout"]


def _utc(value: datetime) -> datetime:
    # Stored times are naive UTC (R-DM-23); aware ones are converted.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def ran_past_timeout(
    timeout: timedelta | None,
    started_at: datetime | None,
    *,
    last_heartbeat_at: datetime | None,
    now: datetime,
) -> bool:
    """Whether an ``in_progress`` execution was still running after its timeout.

    Args:
        timeout: The step's ``timeout``, or None (never a timeout then).
        started_at: The execution's ``started_at`` (its claim), or None.
        last_heartbeat_at: The last heartbeat of the worker that claimed it,
            when its registry row is known; None otherwise.
        now: The recovering process's time.

    Returns:
        With a known heartbeat: whether the worker heartbeat after
        ``started_at + timeout`` (it was alive, running the step, past the
        timeout). Without one (no worker recorded, or its row is gone):
        whether ``started_at + timeout`` is before ``now``. False without a
        timeout or a start.
    """
    if timeout is None or started_at is None:
        return False
    deadline = _utc(started_at) + timeout
    if last_heartbeat_at is not None:
        return _utc(last_heartbeat_at) > deadline
    return _utc(now) > deadline
