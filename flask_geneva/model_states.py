"""Table names, state and outcome enums, terminal and active sets (SPEC §3-§4).

Stored values are exactly the enum values; the engine and the models compare against
these members.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "ACTIVE_EXECUTION_STATES",
    "MAINTENANCE_RUNS_TABLE",
    "STEP_EXECUTIONS_TABLE",
    "TERMINAL_WORKFLOW_STATES",
    "WORKERS_TABLE",
    "WORKFLOWS_TABLE",
    "Outcome",
    "StepExecutionState",
    "WorkflowState",
    "parse_workflow_state",
]

WORKFLOWS_TABLE = "geneva_drive_workflows"
STEP_EXECUTIONS_TABLE = "geneva_drive_step_executions"
WORKERS_TABLE = "geneva_drive_workers"
MAINTENANCE_RUNS_TABLE = "geneva_drive_maintenance_runs"


class WorkflowState(enum.StrEnum):
    """Workflow states (SPEC §3.1), stored exactly as spelled."""

    READY = "ready"
    PERFORMING = "performing"
    PAUSED = "paused"
    FINISHED = "finished"
    CANCELED = "canceled"


TERMINAL_WORKFLOW_STATES = (WorkflowState.FINISHED, WorkflowState.CANCELED)


class StepExecutionState(enum.StrEnum):
    """Step execution states (SPEC §4.1), stored exactly as spelled."""

    SCHEDULED = "scheduled"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    SKIPPED = "skipped"


ACTIVE_EXECUTION_STATES = (StepExecutionState.SCHEDULED, StepExecutionState.IN_PROGRESS)


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
