"""Table names, state and outcome enums, terminal and active sets (SPEC §3-§4).

Stored values are exactly the enum values; the engine and the models compare against
these members.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "ACTIVE_EXECUTION_STATES",
    "CHILD_COUNTS_TABLE",
    "DEADLINE_INDEX",
    "DEADLINE_INDEX_WHERE",
    "LIMIT_KEYS_TABLE",
    "LIMIT_STARTS_TABLE",
    "LIMIT_WAITERS_TABLE",
    "MAINTENANCE_RUNS_TABLE",
    "OUTCOME_HOURS_TABLE",
    "SCHEDULES_TABLE",
    "SCHEDULE_FIRES_TABLE",
    "SIGNALS_TABLE",
    "SIGNAL_KEY_INDEX",
    "STEP_EXECUTIONS_TABLE",
    "TERMINAL_WORKFLOW_STATES",
    "UNIQUE_CHILD_INDEX",
    "WORKERS_TABLE",
    "WORKFLOWS_TABLE",
    "ChildSettlement",
    "Outcome",
    "ParentClose",
    "StepExecutionState",
    "WorkflowSignalState",
    "WorkflowState",
    "parse_outcome",
    "parse_workflow_state",
]

WORKFLOWS_TABLE = "geneva_drive_workflows"
STEP_EXECUTIONS_TABLE = "geneva_drive_step_executions"
WORKERS_TABLE = "geneva_drive_workers"
SIGNALS_TABLE = "geneva_drive_signals"
MAINTENANCE_RUNS_TABLE = "geneva_drive_maintenance_runs"
OUTCOME_HOURS_TABLE = "geneva_drive_outcome_hours"
#: Flow control by limits (R-LIM-10): one counter row per (limit, key), and the
#: executions waiting for a slot.
LIMIT_KEYS_TABLE = "geneva_drive_limit_keys"
LIMIT_WAITERS_TABLE = "geneva_drive_limit_waiters"
#: The start times of rate-limited keys (R-LIM-23): a ring of ``rate`` rows.
LIMIT_STARTS_TABLE = "geneva_drive_limit_starts"
#: Child workflows (R-CHD-10): one counter row per parent, and the unique index
#: of a child on its parent, the starting step and its key.
CHILD_COUNTS_TABLE = "geneva_drive_child_counts"
UNIQUE_CHILD_INDEX = "index_geneva_drive_workflows_unique_child"
#: Schedules (R-SCHED-10): one state row per declared schedule, and one row per
#: fire, unique on (schedule name, fire time).
SCHEDULES_TABLE = "geneva_drive_schedules"
SCHEDULE_FIRES_TABLE = "geneva_drive_schedule_fires"
#: Workflow deadlines (R-DL-10): the index the dispatcher finds ongoing
#: workflows past their deadline by. Partial on PostgreSQL and SQLite (only the
#: ongoing rows with a deadline); ``(state, deadline_at)`` on MySQL/MariaDB.
DEADLINE_INDEX = "index_geneva_drive_workflows_deadline"
#: The partial index's predicate, also the dispatcher's filter word for word
#: (SQLite uses a partial index only for a query that repeats its terms).
DEADLINE_INDEX_WHERE = (
    "state IN ('ready','performing','paused') AND deadline_at IS NOT NULL"
)
#: The unique index of a workflow signal's idempotency key (R-WSIG-10).
SIGNAL_KEY_INDEX = "index_geneva_drive_signals_on_workflow_and_key"


class WorkflowState(enum.StrEnum):
    """Workflow states (SPEC §3.1), stored exactly as spelled."""

    READY = "ready"
    PERFORMING = "performing"
    PAUSED = "paused"
    FINISHED = "finished"
    CANCELED = "canceled"


TERMINAL_WORKFLOW_STATES = (WorkflowState.FINISHED, WorkflowState.CANCELED)


class ChildSettlement(enum.StrEnum):
    """How a child workflow settled for its parent (``child_settled``, R-CHD-20).

    ``failed`` is a child paused by an error (an exception policy's pause, a
    step that cannot run); it becomes ``finished`` or ``canceled`` when the
    child ends later. A child settles once for its parent's counts.
    """

    FINISHED = "finished"
    CANCELED = "canceled"
    FAILED = "failed"


class ParentClose(enum.StrEnum):
    """What canceling the parent does to an ongoing child (R-CHD-30)."""

    CANCEL = "cancel"
    ABANDON = "abandon"


class StepExecutionState(enum.StrEnum):
    """Step execution states (SPEC §4.1), stored exactly as spelled."""

    SCHEDULED = "scheduled"
    IN_PROGRESS = "in_progress"
    WAITING = "waiting"
    """Parked at a ``wait_for`` gate until a workflow signal arrives (R-WSIG-10);
    holds no broker message."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    SKIPPED = "skipped"


ACTIVE_EXECUTION_STATES = (
    StepExecutionState.SCHEDULED,
    StepExecutionState.IN_PROGRESS,
    StepExecutionState.WAITING,
)
"""A workflow's current execution is in one of these: at most one at a time
(R-DM-09..11 for scheduled/in_progress, R-WSIG-16 for waiting)."""


class WorkflowSignalState(enum.StrEnum):
    """States of a workflow signal row (R-WSIG-03), stored exactly as spelled.

    A workflow signal is an external event delivered to one workflow
    (``workflow.signal(...)``); not to be confused with the blinker
    instrumentation signals of :mod:`flask_geneva.signals`.
    """

    PENDING = "pending"
    CLAIMED = "claimed"
    CONSUMED = "consumed"
    EXPIRED = "expired"


class Outcome(enum.StrEnum):
    """Step execution outcomes (SPEC §4.2)."""

    SUCCESS = "success"
    CONTINUED = "continued"
    REATTEMPTED = "reattempted"
    SKIPPED = "skipped"
    CANCELED = "canceled"
    FAILED = "failed"
    RECOVERED = "recovered"
    WORKFLOW_PAUSED = "workflow_paused"


def parse_outcome(value: Any) -> Outcome:
    """Return the :class:`Outcome` named ``value`` (R-SE-04).

    Raises:
        ValueError: ``value`` is not an outcome of SPEC §4.2; the message lists
            the allowed ones.
    """
    try:
        return Outcome(value)
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in Outcome)
        raise ValueError(f"outcome must be one of {allowed}, got {value!r}") from None


def parse_workflow_state(state: Any) -> WorkflowState:
    """Return the :class:`WorkflowState` named ``state`` (R-WF-24).

    Args:
        state: A state name (``"ready"``, ...) or a :class:`WorkflowState`.

    Returns:
        The matching member.

    Raises:
        ValueError: ``state`` is not a workflow state; lists the allowed ones.
    """
    try:
        return WorkflowState(str(state))
    except ValueError:
        allowed = ", ".join(s.value for s in WorkflowState)
        raise ValueError(
            f"unknown workflow state {state!r}; allowed: {allowed}"
        ) from None
