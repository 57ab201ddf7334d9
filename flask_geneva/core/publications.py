"""What a publication is: fixed task names and the request to run one execution.

The vocabulary shared by the publishers (:mod:`flask_geneva.engine.publishing`) and the
outbox that takes back what could not be published (:mod:`flask_geneva.engine.outbox`);
it imports nothing else of flask_geneva (SPEC §6.2).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any
from typing import Protocol

__all__ = [
    "DEFERRED_JOB_ID",
    "DISPATCH_DUE_TASK",
    "HOUSEKEEPING_TASK",
    "LIMITED_JOB_ID",
    "PERFORM_STEP_TASK",
    "RELEASED_JOB_ID_PREFIX",
    "Publication",
    "TaskBackend",
]

#: Fixed task names, so moving a module never orphans queued messages.
PERFORM_STEP_TASK = "flask_geneva.perform_step"
DISPATCH_DUE_TASK = "flask_geneva.dispatch_due"
HOUSEKEEPING_TASK = "flask_geneva.housekeeping"

#: ``job_id`` of an execution whose publication waits for the dispatcher (R-DSP-01).
DEFERRED_JOB_ID = "geneva:deferred"

#: ``job_id`` of an execution waiting for a slot of a limit (R-LIM-11): no broker
#: message holds it; the transaction that frees a slot publishes it (R-LIM-13).
LIMITED_JOB_ID = "geneva:limited"

#: ``job_id`` prefix of an ``in_progress`` execution that its live worker
#: released, its run having ended without its outcome (R-WRK-18, R-FLT-11);
#: the releasing worker's id follows. The next dispatcher run recovers it.
RELEASED_JOB_ID_PREFIX = "geneva:released:"


@dataclasses.dataclass(frozen=True)
class Publication:
    """One request to run a step execution.

    Attributes:
        task_name: Celery task name, e.g. ``"flask_geneva.perform_step"``.
        step_execution_id: The execution to run (the only task argument).
        task_id: Pre-generated broker task id, also stored as ``job_id``.
        queue: Celery queue name, or None for the default queue.
        priority: Broker priority (already mapped, R-JOB-08), or None.
        eta: Aware UTC datetime before which the task must not run, or None.
        soft_time_limit: Seconds the task may run before Celery raises its
            soft time limit in it (the step's ``timeout``, R-STO-03), or None.
        time_limit: Seconds after which Celery kills the process running the
            task (``soft_time_limit`` plus ``GENEVA_STEP_TIMEOUT_GRACE``), or
            None.
    """

    task_name: str
    step_execution_id: Any
    task_id: str
    queue: str | None = None
    priority: int | None = None
    eta: datetime | None = None
    soft_time_limit: float | None = None
    time_limit: float | None = None


class TaskBackend(Protocol):
    """Sends publications somewhere (a broker, a list)."""

    def publish(self, publication: Publication) -> None:
        """Send one publication. Called after commit unless deferral is off."""
