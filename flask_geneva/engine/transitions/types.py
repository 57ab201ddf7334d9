"""The data shapes of the transition table
(:mod:`flask_geneva.engine.transitions.table`).

A :class:`Transition` is one state change: who applies it, from which states, what
it writes to the step execution (:class:`ExecutionWrite`) and to the workflow
(:class:`WorkflowWrite`), and what is scheduled afterwards (:class:`Schedules`).
Pure values: no database, no Flask.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = ["Actor", "ExecutionWrite", "Schedules", "Transition", "WorkflowWrite"]


class Actor(enum.StrEnum):
    """Who applies a transition."""

    ENGINE = "engine"
    """The executor, an in-step signal or an exception policy."""
    OPERATOR = "operator"
    """A call from outside a step: the Python API, the CLI or the admin."""
    HOUSEKEEPING = "housekeeping"
    """Stuck-execution recovery, by housekeeping or an operator (R-HK-24..28)."""
    ROW_API = "row API"
    """The public row helpers that perform no validation (R-WF-05, R-SE-47)."""


class Schedules(enum.StrEnum):
    """What the caller schedules once the rows are written."""

    NOTHING = "nothing"
    NEXT_STEP = "the next step, or finishes the workflow after the last (R-SCH-06)"
    SAME_STEP = (
        "the same step again after the wait; a resumable step continues "
        "from its cursor (R-EXE-45, R-FC-13)"
    )
    SUCCESSOR = (
        "a successor execution of the resumable step after the wait "
        "(R-SCH-08, R-RES-04)"
    )
    PRESERVED_NEXT_STEP = (
        "on a paused workflow, the next step as an unpublished execution kept for "
        "resume(); none after the last step (R-EXE-42)"
    )
    PRESERVED_SAME_STEP = (
        "on a paused workflow, the same step (or its resumable successor) as an "
        "unpublished execution kept for resume() (R-EXE-42)"
    )
    RESUMED_EXECUTION = (
        "re-publishes the preserved execution, else continues a resumable chain, "
        "else creates next_step_name due now, else finishes (R-EXT-21..24)"
    )
    NAMED_STEP = "the step the operator named, due now (R-EVO-06)"
    WAITING_STEP_NOW = (
        "the waiting step again, due now, continuing its cursor (R-ADM-51)"
    )


@dataclass(frozen=True)
class ExecutionWrite:
    """What a transition does to the step execution.

    Attributes:
        from_states: The states the execution may be in (read under the lock).
        to: The state written; its timestamp and ``finished_at`` follow (R-SE-02).
        outcomes: The outcomes it may record, the first being the default;
            empty for ``in_progress`` (no outcome).
        optional: The workflow may have no such execution (e.g. an operator cancel
            of a workflow without a scheduled execution).
    """

    from_states: frozenset[StepExecutionState]
    to: StepExecutionState
    outcomes: tuple[Outcome, ...] = ()
    optional: bool = False


@dataclass(frozen=True)
class WorkflowWrite:
    """What a transition does to the workflow.

    Attributes:
        from_states: The states the workflow may be in (read under the lock);
            empty for a brand-new row.
        to: The states it may write, the first being the default; empty when the
            workflow's state is left as it is.
        clears: Attributes set to None (``transitioned_at`` for resume, R-WF-04).
        unchanged_is_noop: Writing the current state again is a no-op (R-WF-02):
            ``transitioned_at`` keeps its value. False for the unvalidated
            ``transition_to`` (R-WF-05), which stamps it again.
    """

    from_states: frozenset[WorkflowState]
    to: tuple[WorkflowState, ...] = ()
    clears: tuple[str, ...] = ()
    unchanged_is_noop: bool = True


@dataclass(frozen=True)
class Transition:
    """One state change, defined once.

    Attributes:
        name: Identifier, as used in logs and the reference docs.
        actor: Who applies it.
        summary: One sentence: when it happens.
        rules: The SPEC rules it implements.
        execution: The write to the step execution, or None.
        workflow: The write to the workflow, or None.
        schedules: What the caller schedules afterwards.
    """

    name: str
    actor: Actor
    summary: str
    rules: tuple[str, ...]
    execution: ExecutionWrite | None
    workflow: WorkflowWrite | None
    schedules: Schedules = Schedules.NOTHING
