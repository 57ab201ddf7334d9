"""The transition table: every state change of a workflow or step execution, once.

Each :class:`Transition` says from which states it may start, what it writes to
the step execution (state, outcome; the timestamps follow R-SE-02/03) and to the
workflow (state, ``transitioned_at`` per R-WF-03, cleared step fields), and what
the caller schedules afterwards. :func:`apply` (defined in
:mod:`flask_geneva.engine.transitions.apply`, re-exported here) is the only code that
assigns a ``state`` or ``outcome``: it checks the rows' current states (read under
the caller's row locks) against the entry and refuses otherwise, so a lost race is
a refusal rather than a silent overwrite.

"What does pause do?" is answered by one entry: :data:`OPERATOR_PAUSE` (from
outside a step), :data:`PAUSE_SIGNAL` (inside a step).
"""

from __future__ import annotations

from flask_geneva.engine.transitions.apply import Refusal
from flask_geneva.engine.transitions.apply import apply
from flask_geneva.engine.transitions.apply import can_apply
from flask_geneva.engine.transitions.types import Actor
from flask_geneva.engine.transitions.types import ExecutionWrite
from flask_geneva.engine.transitions.types import Schedules
from flask_geneva.engine.transitions.types import Transition
from flask_geneva.engine.transitions.types import WorkflowWrite
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = [
    "TABLE",
    "Actor",
    "ExecutionWrite",
    "Refusal",
    "Schedules",
    "Transition",
    "WorkflowWrite",
    "apply",
    "can_apply",
]

_S = StepExecutionState
_W = WorkflowState
_O = Outcome

_ACTIVE = frozenset({_S.SCHEDULED, _S.IN_PROGRESS})
_SCHEDULED = frozenset({_S.SCHEDULED})
_RUNNING = frozenset({_S.IN_PROGRESS})
_WAITING = frozenset({_S.WAITING})
# A parked execution is the workflow's pending step as much as a scheduled one:
# operator cancel and skip end either (R-WSIG-12).
_PENDING = frozenset({_S.SCHEDULED, _S.WAITING})
_ANY_EXECUTION = frozenset(_S)
_RUNNABLE = frozenset({_W.READY, _W.PERFORMING})
_STOPPED = frozenset({_W.PAUSED, _W.FINISHED, _W.CANCELED})
_ENDED = frozenset({_W.FINISHED, _W.CANCELED})
_ANY_WORKFLOW = frozenset(_W)
# R-EXE-42 "no longer performing": paused, canceled or finished by an operator, or
# ready through the unvalidated transition_to (R-WF-05), settled as if it ended.
_NOT_PERFORMING = _STOPPED | {_W.READY}


def _engine(to: WorkflowState, *clears: str) -> WorkflowWrite:
    """An executor-driven workflow write: from ready/performing only (R-WF-02)."""
    return WorkflowWrite(_RUNNABLE, (to,), clears)


# -- the engine: claim, preconditions, prepare failures (§6 Phase 1) -----------------

CREATE = Transition(
    "create",
    Actor.ENGINE,
    "A new workflow row starts ready; its first step is scheduled.",
    ("R-WF-10", "R-WF-13"),
    None,
    WorkflowWrite(frozenset(), (_W.READY,)),
)
FINISH_EMPTY = Transition(
    "finish_empty",
    Actor.ENGINE,
    "A workflow class without steps is finished at creation.",
    ("R-WF-12", "R-WF-02"),
    None,
    _engine(_W.FINISHED, "current_step_name", "next_step_name"),
)
CLAIM = Transition(
    "claim",
    Actor.ENGINE,
    "The executor claims a due execution whose preconditions passed; the "
    "workflow becomes performing (current_step_name is set by the caller).",
    ("R-EXE-17", "R-SE-01", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.IN_PROGRESS),
    _engine(_W.PERFORMING),
)
DROP_FOR_STOPPED_WORKFLOW = Transition(
    "drop_for_stopped_workflow",
    Actor.ENGINE,
    "A delivered execution of a paused, finished or canceled workflow is canceled; "
    "the workflow is left as it is.",
    ("R-EXE-12",),
    ExecutionWrite(_SCHEDULED, _S.CANCELED, (_O.CANCELED,)),
    WorkflowWrite(_STOPPED),
)
CANCEL_BEFORE_STEP = Transition(
    "cancel_before_step",
    Actor.ENGINE,
    "A cancel condition holds: execution and workflow are canceled.",
    ("R-EXE-20", "R-CND-01", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.CANCELED, (_O.CANCELED,)),
    _engine(_W.CANCELED),
)
CANCEL_FOR_MISSING_HERO = Transition(
    "cancel_for_missing_hero",
    Actor.ENGINE,
    "The hero is gone: execution and workflow are canceled, error_message says why.",
    ("R-EXE-13", "R-HERO-07", "R-WF-02"),
    ExecutionWrite(_ACTIVE, _S.CANCELED, (_O.CANCELED,)),
    _engine(_W.CANCELED),
)
SKIP_BEFORE_STEP = Transition(
    "skip_before_step",
    Actor.ENGINE,
    "The step's skip_if condition holds: the execution is skipped and the next "
    "step scheduled.",
    ("R-EXE-21", "R-CND-02", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.SKIPPED, (_O.SKIPPED,)),
    _engine(_W.READY),
    Schedules.NEXT_STEP,
)
SKIP_REMOVED_STEP = Transition(
    "skip_removed_step",
    Actor.ENGINE,
    "The execution's step was removed by a deploy (a step.removed gravestone): "
    "the execution is skipped and the next step after the gravestone scheduled.",
    ("R-EVO-02", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.SKIPPED, (_O.SKIPPED,)),
    _engine(_W.READY),
    Schedules.NEXT_STEP,
)
FAIL_UNRUNNABLE = Transition(
    "fail_unrunnable",
    Actor.ENGINE,
    "The step is not defined any more, or a resumable step lacks its columns: the "
    "execution fails and the workflow pauses.",
    ("R-EXE-14", "R-EXE-15", "R-STI-03", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.FAILED, (_O.FAILED,)),
    _engine(_W.PAUSED),
)


PREPARE_FAILED = Transition(
    "prepare_failed",
    Actor.ENGINE,
    "The prepare phase raised (hero lookup, conditions, claim): the error is "
    "recorded and the execution fails before the policy is resolved; one of the "
    "prepare_policy_* entries then moves the workflow.",
    ("R-EXE-30", "R-EXE-31"),
    ExecutionWrite(_ACTIVE, _S.FAILED, (_O.FAILED,)),
    None,
)


def _prepare_policy(action: str, to: WorkflowState, schedules: Schedules) -> Transition:
    return Transition(
        f"prepare_policy_{action}",
        Actor.ENGINE,
        f"After prepare_failed, the exception policy's {action} moves the workflow.",
        ("R-EXE-30", "R-EXE-32", "R-WF-02"),
        None,
        _engine(to),
        schedules,
    )


PREPARE_POLICY_REATTEMPT = _prepare_policy("reattempt", _W.READY, Schedules.SAME_STEP)
PREPARE_POLICY_CANCEL = _prepare_policy("cancel", _W.CANCELED, Schedules.NOTHING)
PREPARE_POLICY_SKIP = _prepare_policy("skip", _W.READY, Schedules.NEXT_STEP)
PREPARE_POLICY_PAUSE = _prepare_policy("pause", _W.PAUSED, Schedules.NOTHING)

# -- the engine: finalizing a step (§6 Phase 3, flow control §8.1, policies §9) ------

COMPLETE = Transition(
    "complete",
    Actor.ENGINE,
    "The body returned: the execution succeeds and the next step is scheduled "
    "(or the workflow finishes).",
    ("R-EXE-44", "R-EXE-46", "R-SCH-06", "R-RES-05", "R-WF-02"),
    ExecutionWrite(_RUNNING, _S.COMPLETED, (_O.SUCCESS,)),
    _engine(_W.READY),
    Schedules.NEXT_STEP,
)
FINISH_AFTER_LAST_STEP = Transition(
    "finish_after_last_step",
    Actor.ENGINE,
    "Scheduling found no step after the current one: the workflow finishes. "
    "From any state: the public schedule_next_step() validates no state, as in "
    "the gem; the engine reaches it from ready (after complete/skip) and "
    "resume() after the last step completed while paused.",
    ("R-SCH-06", "R-EXT-05", "R-EXE-42"),
    None,
    WorkflowWrite(
        _ANY_WORKFLOW,
        (_W.FINISHED,),
        ("current_step_name", "next_step_name"),
        unchanged_is_noop=False,
    ),
)
CONTINUE = Transition(
    "continue",
    Actor.ENGINE,
    "A resumable step was interrupted or suspended: the chunk ends as continued "
    "and a successor continues from the cursor.",
    ("R-RES-04", "R-FC-15", "R-SE-10", "R-WF-02"),
    ExecutionWrite(_RUNNING, _S.COMPLETED, (_O.CONTINUED,)),
    _engine(_W.READY),
    Schedules.SUCCESSOR,
)
REATTEMPT = Transition(
    "reattempt",
    Actor.ENGINE,
    "reattempt! in a step, or an exception policy reattempts: the execution "
    "ends as reattempted and the step is scheduled again.",
    ("R-FC-13", "R-EXE-45", "R-SE-21", "R-CNT-03", "R-WF-02"),
    ExecutionWrite(_ACTIVE, _S.COMPLETED, (_O.REATTEMPTED,)),
    _engine(_W.READY),
    Schedules.SAME_STEP,
)
SKIP = Transition(
    "skip",
    Actor.ENGINE,
    "skip! in a step, or an exception policy skips: the execution is skipped and "
    "the next step scheduled.",
    ("R-FC-12", "R-EXE-45", "R-WF-02"),
    ExecutionWrite(_ACTIVE, _S.SKIPPED, (_O.SKIPPED,)),
    _engine(_W.READY),
    Schedules.NEXT_STEP,
)
CANCEL_SIGNAL = Transition(
    "cancel_signal",
    Actor.ENGINE,
    "cancel! in a step: execution and workflow are canceled.",
    ("R-FC-10", "R-WF-02"),
    ExecutionWrite(_RUNNING, _S.CANCELED, (_O.CANCELED,)),
    _engine(_W.CANCELED),
)
PAUSE_SIGNAL = Transition(
    "pause_signal",
    Actor.ENGINE,
    "pause! in a step: the execution is canceled and the workflow paused; "
    "resume() schedules the step again.",
    ("R-FC-11", "R-WF-02"),
    ExecutionWrite(_RUNNING, _S.CANCELED, (_O.CANCELED,)),
    _engine(_W.PAUSED),
)
PAUSE_RESUMABLE_SIGNAL = Transition(
    "pause_resumable_signal",
    Actor.ENGINE,
    "pause! in a resumable step: the chunk is kept with its cursor "
    "(workflow_paused) and the workflow paused; resume() continues it.",
    ("R-FC-11", "R-SE-10", "R-WF-02"),
    ExecutionWrite(_RUNNING, _S.COMPLETED, (_O.WORKFLOW_PAUSED,)),
    _engine(_W.PAUSED),
)
FINISH = Transition(
    "finish",
    Actor.ENGINE,
    "finish! in a step, or an exception policy finishes: the execution succeeds "
    "and the workflow finishes.",
    ("R-FC-14", "R-EXE-45", "R-WF-02"),
    ExecutionWrite(_ACTIVE, _S.COMPLETED, (_O.SUCCESS,)),
    _engine(_W.FINISHED, "current_step_name", "next_step_name"),
)
FAIL_AND_CANCEL = Transition(
    "fail_and_cancel",
    Actor.ENGINE,
    "An exception policy cancels: the execution fails (outcome canceled) and "
    "the workflow is canceled.",
    ("R-EXE-45", "R-SE-11", "R-WF-02"),
    ExecutionWrite(_ACTIVE, _S.FAILED, (_O.CANCELED,)),
    _engine(_W.CANCELED),
)
FAIL_AND_PAUSE = Transition(
    "fail_and_pause",
    Actor.ENGINE,
    "An exception policy pauses (the default): the execution fails and the "
    "workflow pauses.",
    ("R-EXE-45", "R-WF-02"),
    ExecutionWrite(_ACTIVE, _S.FAILED, (_O.FAILED,)),
    _engine(_W.PAUSED),
)

# -- the engine: finalizing under an operator's pause/cancel (R-EXE-42) --------------


def _settle(
    name: str,
    summary: str,
    to: StepExecutionState,
    outcome: Outcome,
    workflow_from: frozenset[WorkflowState] = _NOT_PERFORMING,
    schedules: Schedules = Schedules.NOTHING,
) -> Transition:
    return Transition(
        name,
        Actor.ENGINE,
        "The step ran while an operator paused, canceled or finished the "
        "workflow: " + summary + " The workflow keeps the operator's state.",
        ("R-EXE-42",),
        ExecutionWrite(_RUNNING, to, (outcome,)),
        WorkflowWrite(workflow_from),
        schedules,
    )


SETTLE_COMPLETED = _settle(
    "settle_completed",
    "the body returned (or finish! on an ended workflow).",
    _S.COMPLETED,
    _O.SUCCESS,
    schedules=Schedules.PRESERVED_NEXT_STEP,
)
SETTLE_FAILED = _settle(
    "settle_failed", "the body raised; resume() retries it.", _S.FAILED, _O.FAILED
)
SETTLE_CANCELED = _settle(
    "settle_canceled",
    "an interrupt, pause! or cancel! ends the execution as canceled.",
    _S.CANCELED,
    _O.CANCELED,
)
SETTLE_KEPT_FOR_RESUME = _settle(
    "settle_kept_for_resume",
    "an interrupted resumable step of a paused workflow (or pause! in a "
    "resumable step) keeps its cursor for resume().",
    _S.COMPLETED,
    _O.WORKFLOW_PAUSED,
)
SETTLE_SKIPPED = _settle(
    "settle_skipped",
    "skip! is recorded.",
    _S.SKIPPED,
    _O.SKIPPED,
    schedules=Schedules.PRESERVED_NEXT_STEP,
)
SETTLE_REATTEMPTED = _settle(
    "settle_reattempted",
    "reattempt! is recorded.",
    _S.COMPLETED,
    _O.REATTEMPTED,
    schedules=Schedules.PRESERVED_SAME_STEP,
)
SETTLE_CONTINUED = _settle(
    "settle_continued",
    "suspend! on a paused workflow is recorded as continued.",
    _S.COMPLETED,
    _O.CONTINUED,
    workflow_from=frozenset({_W.PAUSED}),
    schedules=Schedules.PRESERVED_SAME_STEP,
)
SETTLE_CANCEL_SIGNAL_WHILE_PAUSED = Transition(
    "settle_cancel_signal_while_paused",
    Actor.ENGINE,
    "cancel! in a step of a workflow an operator paused meanwhile: both end canceled.",
    ("R-EXE-42", "R-FC-10"),
    ExecutionWrite(_RUNNING, _S.CANCELED, (_O.CANCELED,)),
    WorkflowWrite(frozenset({_W.PAUSED}), (_W.CANCELED,)),
)
SETTLE_FINISH_SIGNAL_WHILE_PAUSED = Transition(
    "settle_finish_signal_while_paused",
    Actor.ENGINE,
    "finish! in a step of a workflow an operator paused meanwhile: the workflow "
    "finishes.",
    ("R-EXE-42", "R-FC-14"),
    ExecutionWrite(_RUNNING, _S.COMPLETED, (_O.SUCCESS,)),
    WorkflowWrite(frozenset({_W.PAUSED}), (_W.FINISHED,), ("next_step_name",)),
)

# -- operators: the Python API, the CLI and the admin (§8.2) -------------------------

OPERATOR_PAUSE = Transition(
    "operator_pause",
    Actor.OPERATOR,
    "pause() from outside a step: the workflow pauses; a scheduled execution is "
    "kept for resume() and a running one is left to the executor.",
    ("R-EXT-01", "R-EXT-02", "R-WF-03"),
    None,
    WorkflowWrite(_RUNNABLE, (_W.PAUSED,)),
)
OPERATOR_CANCEL = Transition(
    "operator_cancel",
    Actor.OPERATOR,
    "cancel() from outside a step: the scheduled execution (if any) and the "
    "workflow are canceled; a running one is left to the executor.",
    ("R-EXT-03", "R-SE-03", "R-WSIG-12"),
    ExecutionWrite(_PENDING, _S.CANCELED, (_O.CANCELED,), optional=True),
    WorkflowWrite(frozenset({_W.READY, _W.PAUSED, _W.PERFORMING}), (_W.CANCELED,)),
)
OPERATOR_SKIP = Transition(
    "operator_skip",
    Actor.OPERATOR,
    "skip() from outside a step: the scheduled execution (if any) is skipped, a "
    "paused workflow becomes ready, and the next step is scheduled.",
    ("R-EXT-04", "R-EXT-05", "R-WSIG-12"),
    ExecutionWrite(_PENDING, _S.SKIPPED, (_O.SKIPPED,), optional=True),
    WorkflowWrite(
        frozenset({_W.READY, _W.PAUSED}), (_W.READY,), clears=("transitioned_at",)
    ),
    Schedules.NEXT_STEP,
)
OPERATOR_RESUME = Transition(
    "operator_resume",
    Actor.OPERATOR,
    "resume() of a paused workflow with nothing running: it becomes ready and its "
    "step runs again.",
    ("R-WF-04", "R-EXT-20", "R-EXT-21", "R-EXT-22", "R-EXT-23"),
    None,
    WorkflowWrite(frozenset({_W.PAUSED}), (_W.READY,), clears=("transitioned_at",)),
    Schedules.RESUMED_EXECUTION,
)
OPERATOR_RESUME_AT = Transition(
    "operator_resume_at",
    Actor.OPERATOR,
    "resume_at(step) of a paused workflow with nothing running: it becomes ready, "
    "a preserved scheduled execution is canceled and the named step runs.",
    ("R-EVO-06",),
    None,
    WorkflowWrite(
        frozenset({_W.PAUSED}),
        (_W.READY,),
        clears=("transitioned_at", "current_step_name"),
    ),
    Schedules.NAMED_STEP,
)
OPERATOR_RUN_NOW = Transition(
    "operator_run_now",
    Actor.OPERATOR,
    "run_now() of a ready workflow whose step waits: the waiting execution is "
    "canceled and the same step is scheduled again, due now.",
    ("R-ADM-51",),
    ExecutionWrite(_SCHEDULED, _S.CANCELED, (_O.CANCELED,)),
    WorkflowWrite(frozenset({_W.READY})),
    Schedules.WAITING_STEP_NOW,
)
OPERATOR_RESUME_RUNNING = Transition(
    "operator_resume_running",
    Actor.OPERATOR,
    "resume() while the paused workflow's step still runs: the pause is "
    "withdrawn and the executor finalizes the step normally.",
    ("R-EXT-26", "R-WF-04"),
    None,
    WorkflowWrite(
        frozenset({_W.PAUSED}), (_W.PERFORMING,), clears=("transitioned_at",)
    ),
)

# -- housekeeping and operator recovery of stuck executions (§10) --------------------

RECOVER_REATTEMPT = Transition(
    "recover_reattempt",
    Actor.HOUSEKEEPING,
    "A stuck execution of a ready/performing workflow is recovered and its step "
    "scheduled again (stuck_recovery_action 'reattempt').",
    ("R-HK-22", "R-HK-24"),
    ExecutionWrite(_ACTIVE, _S.COMPLETED, (_O.RECOVERED,)),
    WorkflowWrite(_RUNNABLE, (_W.READY,), ("current_step_name",)),
    Schedules.SAME_STEP,
)
RECOVER_REMOVED_STEP = Transition(
    "recover_removed_step",
    Actor.HOUSEKEEPING,
    "A stuck execution of a step a deploy removed (a step.removed gravestone) is "
    "recovered instead of reattempted: the step after the gravestone is "
    "scheduled (or the workflow finishes).",
    ("R-EVO-03", "R-HK-24"),
    ExecutionWrite(_ACTIVE, _S.COMPLETED, (_O.RECOVERED,)),
    WorkflowWrite(_RUNNABLE, (_W.READY,), ("current_step_name",)),
    Schedules.NEXT_STEP,
)
RECOVER_CANCEL = Transition(
    "recover_cancel",
    Actor.HOUSEKEEPING,
    "A stuck execution of a ready/performing workflow is recovered and the "
    "workflow canceled (stuck_recovery_action 'cancel').",
    ("R-HK-25",),
    ExecutionWrite(_ACTIVE, _S.CANCELED, (_O.RECOVERED,)),
    WorkflowWrite(_RUNNABLE, (_W.CANCELED,), ("current_step_name",)),
)
RECOVER_PAUSED = Transition(
    "recover_paused",
    Actor.HOUSEKEEPING,
    "A stuck running execution of a paused workflow is recovered; nothing is "
    "scheduled (a scheduled one is preserved for resume() and not touched).",
    ("R-HK-27",),
    ExecutionWrite(_RUNNING, _S.COMPLETED, (_O.RECOVERED,)),
    WorkflowWrite(frozenset({_W.PAUSED}), clears=("current_step_name",)),
)
RECOVER_ENDED = Transition(
    "recover_ended",
    Actor.HOUSEKEEPING,
    "A stuck execution of a finished or canceled workflow is canceled: outcome "
    "canceled for housekeeping, recovered for the operator.",
    ("R-HK-27", "R-HK-28"),
    ExecutionWrite(_ACTIVE, _S.CANCELED, (_O.CANCELED, _O.RECOVERED)),
    WorkflowWrite(_ENDED),
)

# -- workflow signals: parking at a wait_for gate and waking (R-WSIG-10..41) ---------

PARK = Transition(
    "park",
    Actor.ENGINE,
    "A wait_for step found no matching workflow signal at its gate: the "
    "execution parks in waiting, holding no broker message; the workflow is ready.",
    ("R-WSIG-10", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.WAITING),
    _engine(_W.READY),
)
WAKE = Transition(
    "wake",
    Actor.ENGINE,
    "A matching workflow signal arrived (claimed for the step), its wait timed "
    "out, or resume() delivers what arrived while paused: the parked execution "
    "is scheduled again, due now, and published after the commit.",
    ("R-WSIG-11", "R-WSIG-13", "R-WSIG-40"),
    ExecutionWrite(_WAITING, _S.SCHEDULED),
    WorkflowWrite(frozenset({_W.READY})),
)
WAIT_TIMEOUT_SKIP = Transition(
    "wait_timeout_skip",
    Actor.ENGINE,
    "The wait timed out with on_wait_timeout='skip': the execution is skipped "
    "and the next step scheduled.",
    ("R-WSIG-41", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.SKIPPED, (_O.SKIPPED,)),
    _engine(_W.READY),
    Schedules.NEXT_STEP,
)
WAIT_TIMEOUT_CANCEL = Transition(
    "wait_timeout_cancel",
    Actor.ENGINE,
    "The wait timed out with on_wait_timeout='cancel': execution and workflow "
    "are canceled.",
    ("R-WSIG-41", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.CANCELED, (_O.CANCELED,)),
    _engine(_W.CANCELED),
)
WAIT_TIMEOUT_PAUSE = Transition(
    "wait_timeout_pause",
    Actor.ENGINE,
    "The wait timed out with on_wait_timeout='pause': the execution is canceled "
    "and the workflow paused; resume() waits again.",
    ("R-WSIG-41", "R-WF-02"),
    ExecutionWrite(_SCHEDULED, _S.CANCELED, (_O.CANCELED,)),
    _engine(_W.PAUSED),
)

# -- the public row API without validation (R-WF-05, R-SE-47) ------------------------

TRANSITION_TO = Transition(
    "transition_to",
    Actor.ROW_API,
    "Workflow.transition_to(state, **attrs): any state to any state, no "
    "validation; entering paused/finished/canceled stamps transitioned_at.",
    ("R-WF-05", "R-WF-03"),
    None,
    WorkflowWrite(_ANY_WORKFLOW, tuple(_W), unchanged_is_noop=False),
)
START = Transition(
    "start",
    Actor.ROW_API,
    "StepExecution.start(): a scheduled execution becomes in_progress (False, "
    "and nothing changes, in any other state).",
    ("R-SE-47",),
    ExecutionWrite(_SCHEDULED, _S.IN_PROGRESS),
    None,
)


def _mark(to: StepExecutionState, default: Outcome) -> Transition:
    outcomes = (default, *(outcome for outcome in _O if outcome != default))
    return Transition(
        f"mark_{to.value}",
        Actor.ROW_API,
        f"StepExecution.mark_{to.value}(outcome): any state, no validation.",
        ("R-SE-47", "R-SE-02"),
        ExecutionWrite(_ANY_EXECUTION, to, outcomes),
        None,
    )


MARK_COMPLETED = _mark(_S.COMPLETED, _O.SUCCESS)
MARK_FAILED = _mark(_S.FAILED, _O.FAILED)
MARK_SKIPPED = _mark(_S.SKIPPED, _O.SKIPPED)
MARK_CANCELED = _mark(_S.CANCELED, _O.CANCELED)

TABLE: tuple[Transition, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, Transition)
)
"""Every transition, in the order defined above."""
