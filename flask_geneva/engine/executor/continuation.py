"""Inline continuation: finish a step and claim the next one in one transaction.

When a step's body returns and the next step is due now on the same queue and
priority, the executor's finalize may claim the next step's execution in the
same locked transaction (the ``claim`` transition applied before its INSERT)
instead of publishing it, and the same task runs it next (R-EXE-70..77), up to
``GENEVA_INLINE_CONTINUATION_BUDGET`` seconds and
``GENEVA_INLINE_CONTINUATION_MAX_STEPS`` steps per task. Each continued step is
a run of its own: its own execution row, hooks, signals, policies and the
finalize checks (a paused or canceled workflow ends the chain, R-EXE-42).
Temporal's eager activity dispatch is the analogue.

The hero check before an inline claim (R-EXE-73) rides on finalize's locking
statement where the store can do that (:func:`~flask_geneva.db.locks.
lock_workflow_and_execution_probing_hero`): a continued step then sends no
statement of its own for the hero (R-EXE-78).

The functions take the run (:class:`~flask_geneva.engine.executor.run.StepRun`):
the driver notes the hero after the claim (:func:`note_hero`) and adopts a
claimed step (:func:`adopt_claim`); finalize asks for the optimistic guards
(:func:`optimistic_guards`, R-EXE-81), locks (:func:`lock_for_finalize`) and
claims the next step (:func:`continue_inline`), which leaves the
:class:`ClaimedStep` on the run.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import sqlalchemy as sa

from flask_geneva import signals
from flask_geneva.core import clock
from flask_geneva.core import transactions
from flask_geneva.core.config import GenevaConfig
from flask_geneva.db import locks as row_locks
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import row_updates
from flask_geneva.db import session_sync
from flask_geneva.db.optional_columns import absent_workflow_columns
from flask_geneva.dsl.conditions import evaluate_cancel_conditions
from flask_geneva.engine import limits as flow_limits
from flask_geneva.engine import scheduling
from flask_geneva.engine.children import settle as children_settle
from flask_geneva.engine.executor import events as executor_events
from flask_geneva.engine.executor import hero_probes
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.flow_control import step_context
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = [
    "ClaimedStep",
    "InlineBudget",
    "InlineCheckFailed",
    "adopt_claim",
    "continue_inline",
    "lock_for_finalize",
    "note_hero",
    "optimistic_guards",
]


class InlineCheckFailed(Exception):
    """The next step's preconditions failed in the database during finalize.

    Raised by :func:`continue_inline` when an evaluation for an inline claim
    (R-EXE-73) raised a database error: the transaction it ran in may be
    unusable (PostgreSQL aborts it; a MySQL/MariaDB deadlock rolls it back and
    releases its locks). Finalize rolls back and
    starts over without continuing inline, so the finished step's outcome is
    still recorded and the next step is published (R-EXE-80 semantics: a fresh
    transaction locks, re-reads and re-checks the rows).
    """


@dataclasses.dataclass
class InlineBudget:
    """What one task may still continue inline (R-EXE-72).

    Attributes:
        max_seconds: ``GENEVA_INLINE_CONTINUATION_BUDGET`` in seconds: no step is
            claimed inline once this much time has passed since the task's
            first step began (a step already claimed runs to its end).
        max_steps: ``GENEVA_INLINE_CONTINUATION_MAX_STEPS``: most steps one task
            runs, the delivered one included.
        started: ``time.monotonic()`` when the task's first step began.
        steps_run: Steps run so far by the task, the current one included.
    """

    max_seconds: float
    max_steps: int
    started: float = dataclasses.field(default_factory=time.monotonic)
    steps_run: int = 1

    @classmethod
    def from_settings(cls, settings: GenevaConfig) -> InlineBudget | None:
        """The budget of a task under ``settings``, or None when continuation is off.

        Args:
            settings: The settings the task runs with.

        Returns:
            None when the budget or the step count is 0 (or the count is 1).
        """
        seconds = settings.inline_continuation_budget.total_seconds()
        steps = settings.inline_continuation_max_steps
        if seconds <= 0 or steps <= 1:
            return None
        return cls(max_seconds=seconds, max_steps=steps)

    def allows_another(self) -> bool:
        """Whether one more step may be claimed inline now (R-EXE-72)."""
        return (
            self.steps_run < self.max_steps
            and time.monotonic() - self.started < self.max_seconds
        )


@dataclasses.dataclass(frozen=True)
class ClaimedStep:
    """A step execution the previous step's finalize claimed inline (R-EXE-70).

    Attributes:
        workflow: The workflow (still loaded; the lock ended with the commit).
        execution: The claimed execution, ``in_progress``.
        step: Its step definition.
        precondition_timing: Timing of its passed preconditions (R-SIG-02).
    """

    workflow: Any
    execution: Any
    step: Any
    precondition_timing: dict[str, Any]


def note_hero(run: StepRun, workflow: Any) -> None:
    """Remember the claimed workflow's hero for finalize's probe (R-EXE-78).

    Only when this run may continue inline and the workflow needs its hero
    (R-HERO-05), the hero class resolves and has a one-column primary key
    of the stored id's type, its table is on the workflows' database (not
    another bind's), and the session has no ``do_orm_execute`` listener but
    geneva's own (whose criteria an ORM load of the hero would apply;
    geneva's only notes writes, R-EXE-80).

    Args:
        run: The run; gets ``hero_probe``.
        workflow: The claimed workflow.
    """
    if run.inline_budget is None or type(workflow).may_proceed_without_hero:
        return
    run.hero_probe = hero_probes.probeable_hero(run.session, workflow)


def optimistic_guards(
    run: StepRun, workflow: Any, execution: Any, step: Any
) -> row_updates.OptimisticGuards | None:
    """What an optimistic finalize of ``step`` checks, if it may skip the lock.

    R-EXE-81: on PostgreSQL, when ``step`` is no ``wait_for`` step (its
    signals are settled in finalize), a step follows it, and, in a run that
    may continue inline, that step's inline claim evaluates no condition (no
    cancel condition, no ``skip_if``/``run_if``: user code runs under the
    lock) and the hero, if the workflow needs one, can be probed as
    :func:`note_hero` allows (a run that may not continue inline only
    publishes the next step, whose delivery checks both), and the claimed rows are still
    held as the claim committed them (persistent, unchanged, nothing
    expired since: a body that committed expired them) in the states
    ``performing`` and ``in_progress``, with nothing else pending in the
    session.

    Args:
        run: The run that claimed the rows.
        workflow: The workflow as the claim committed it.
        execution: The execution as the claim committed it.
        step: Its step definition.

    Returns:
        The guards (the hero's set whatever the claim: the caller drops
        it when nothing is claimed inline), or None for the locked path.
    """
    if run.inline_refused:
        return None
    # Without an inline claim the following step's conditions and the hero
    # are its own delivery's to check (R-EXE-13, R-EXE-20..24).
    inline = run.inline_budget is not None
    session = run.session
    if (
        session_sync.bind_of(session).dialect.name != "postgresql"
        or step.wait_for is not None
        # A held slot is given back by the write path's listener (R-LIM-20).
        or step.limits
        # A child settles for its parent in the locked path (R-CHD-20).
        or children_settle.is_child(session, workflow)
        or session.new
        or session.dirty
        or session.deleted
    ):
        return None
    workflow_type = type(workflow)
    following = workflow.steps.next_after(step.name)
    if following is None or following.limits:
        return None
    if inline and (
        following.skip_if is not None
        or following.run_if is not None
        or workflow_type.__geneva_definitions__.cancel_conditions
    ):
        return None
    workflow_state, execution_state = sa.inspect(workflow), sa.inspect(execution)
    # The columns the claim's read leaves out (the result, absent optional
    # columns) count as expired on older SQLAlchemy versions: they were never
    # read, so nothing about them went stale.
    unread = absent_workflow_columns(column_detection.optional_columns(session))
    if (
        not workflow_state.persistent
        or not execution_state.persistent
        or workflow_state.modified
        or execution_state.modified
        or workflow_state.expired_attributes - unread
        or execution_state.expired_attributes
    ):
        return None
    workflow_values, execution_values = workflow_state.dict, execution_state.dict
    workflow_version = workflow_values.get("updated_at")
    execution_version = execution_values.get("updated_at")
    if (
        workflow_values.get("state") != WorkflowState.PERFORMING
        or execution_values.get("state") != StepExecutionState.IN_PROGRESS
        or workflow_version is None
        or execution_version is None
    ):
        return None
    hero: tuple[Any, Any] | None = None
    if inline and not workflow_type.may_proceed_without_hero:
        probe = run.hero_probe
        if (
            probe is None
            or workflow_values.get("hero_type") != probe[1]
            or workflow_values.get("hero_id") != probe[2]
        ):
            return None
        hero = (probe[0], probe[2])
    return row_updates.OptimisticGuards(
        workflow_id=workflow_state.key[1][0],
        workflow_state=workflow_values["state"],
        workflow_version=workflow_version,
        execution_id=execution_state.key[1][0],
        execution_state=execution_values["state"],
        execution_version=execution_version,
        hero=hero,
    )


def lock_for_finalize(run: StepRun, completed: bool = False) -> tuple[Any, Any]:
    """Lock the workflow and execution for finalize, probing the hero if noted.

    Args:
        run: The run; its ``hero_probe`` (:func:`note_hero`) is probed.
        completed: The body returned normally: the execution's lock reads
            only :data:`~flask_geneva.db.locks.FINALIZE_EXECUTION_KEYS`
            (R-EXE-48).

    Returns:
        ``(workflow, execution)`` as :func:`~flask_geneva.db.locks.
        lock_workflow_and_execution` does; sets ``run.hero_present`` when the
        probe answered for the locked row's hero.
    """
    keys = row_locks.FINALIZE_EXECUTION_KEYS if completed else None
    probe = run.hero_probe
    if probe is None:
        return row_locks.lock_workflow_and_execution(
            run.session, run.execution_id, execution_keys=keys
        )
    hero_cls, hero_type, hero_id = probe
    workflow, execution, present = row_locks.lock_workflow_and_execution_probing_hero(
        run.session, run.execution_id, hero_cls, hero_id, execution_keys=keys
    )
    if (
        present is not None
        and workflow is not None
        # The body may have set another hero: then the probe does not answer.
        and workflow.hero_type == hero_type
        and workflow.hero_id == hero_id
    ):
        run.hero_present = present
    return workflow, execution


def _hero_exists(run: StepRun, workflow: Any) -> bool:
    """Whether the locked workflow's hero exists: the probe's answer or a load."""
    if run.hero_present is not None:
        return run.hero_present
    return workflow.hero is not None


def continue_inline(run: StepRun, workflow: Any, step: Any, finished: Any) -> bool:
    """Claim the step after ``step`` inline, if allowed; True if claimed.

    Called by finalize after ``complete`` was applied to the locked rows
    (the workflow is ``ready``), before anything is scheduled. On False the
    caller schedules and publishes the next step as usual (R-EXE-71/73).

    Args:
        run: The run; its budget is charged and its ``continuation`` set
            when the next step is claimed (R-EXE-70/72).
        workflow: The locked workflow.
        step: The step just completed.
        finished: Its execution, locked (a limited next step may keep its
            slot, R-LIM-15).

    Raises:
        InlineCheckFailed: A precondition of the next step raised a database
            error; finalize rolls back and starts over without continuing
            inline (R-EXE-73).
    """
    budget = run.inline_budget
    if budget is None or run.inline_refused or not budget.allows_another():
        return False
    following = workflow.steps.next_after(step.name)
    if (
        following is None
        # Celery's time limits cover a whole task: a step with a timeout runs
        # in a task of its own, and its task runs no other step (R-STO-04).
        or step.timeout is not None
        or following.timeout is not None
        or following.is_resumable
        # A wait_for step passes its gate in its own delivery (R-WSIG-10).
        or following.wait_for is not None
        # So does a wait for children (R-CHD-21).
        or following.wait_for_children is not None
        or not scheduling.due_now_on_same_route(workflow, step, following, run.context)
    ):
        return False
    timing = _preconditions_pass_inline(run, workflow, following)
    if timing is None:
        return False
    limit_holds = None
    if following.limits:
        # Its slots, as Phase 1's fast path takes them and only when nobody
        # waits for them; else it is published and queues (R-LIM-15).
        limit_holds = flow_limits.claim_inline(
            run.session, workflow, finished, following, clock.now()
        )
        if limit_holds is None:
            return False
    execution = scheduling.create_step_execution(
        run.session,
        workflow,
        following,
        wait=None,
        cancel_stray=False,
        claim_inline=True,
        limit_holds=limit_holds,
    )
    run.mark_running(execution.id)  # before finalize commits the claim
    budget.steps_run += 1
    run.continuation = ClaimedStep(workflow, execution, following, timing)
    return True


def _preconditions_pass_inline(
    run: StepRun, workflow: Any, following: Any
) -> dict[str, Any] | None:
    """Check the hero and evaluate ``following``'s preconditions (R-EXE-73).

    Returns:
        The evaluation's timing when all pass; None when the hero is gone, a
        condition holds or one raised: the step is then published, and its
        own delivery evaluates them again and applies the outcome (R-EXE-13,
        R-EXE-20..24), as it would without continuation.

    Raises:
        InlineCheckFailed: An evaluation raised a database error; finalize
            rolls back and starts over without continuing inline.
    """
    started_at, started = clock.now(), time.monotonic()
    workflow_type = type(workflow)
    needs_hero = not workflow_type.may_proceed_without_hero
    if (
        not workflow_type.__geneva_definitions__.cancel_conditions
        and following.skip_if is None
        and following.run_if is None
        and (not needs_hero or run.hero_present is not None)
    ):
        # No condition to evaluate and the hero answered by finalize's lock
        # (R-EXE-78): no user code and no statement runs, so the checks
        # below need neither a step context nor a no-autoflush block.
        if needs_hero and not run.hero_present:
            return None
        return executor_events.timing(started_at, started)
    try:
        # Without autoflush, the outcome just applied and the claim go out in
        # one flush: one UPDATE for both rows, then the INSERT (R-DM-40).
        with run.session.no_autoflush:
            if not type(workflow).may_proceed_without_hero and not _hero_exists(
                run, workflow
            ):
                return None
            with step_context(workflow.id, "conditions"):
                definitions = type(workflow).__geneva_definitions__
                if evaluate_cancel_conditions(workflow, definitions.cancel_conditions):
                    return None
                if following.should_skip(workflow):
                    return None
    except Exception as error:  # R-EXE-73: its delivery handles it
        if transactions.database_error(error) is not None:
            # The transaction may be aborted (PostgreSQL) or rolled back (a
            # MySQL/MariaDB deadlock): finalize starts over without a claim.
            run.inline_refused = True
            raise InlineCheckFailed(
                f"preconditions of {following.name!r} raised "
                f"{type(error).__name__} in the database"
            ) from error
        run.logger.debug(
            "preconditions of %r raised %s; publishing it instead of continuing inline",
            following.name,
            type(error).__name__,
        )
        return None
    return executor_events.timing(started_at, started)


def adopt_claim(run: StepRun, claimed: ClaimedStep) -> tuple[Any, Any, Any]:
    """Start a run on an execution claimed inline: the claim is already done.

    Installs the loggers and the error context, and emits the
    ``precondition`` signal with outcome ``passed`` (R-EXE-74, R-SIG-02).

    Args:
        run: The new run of the claimed execution; adopts its running-set
            entry (R-WRK-18).
        claimed: What the previous run's finalize claimed (R-EXE-70).

    Returns:
        ``(workflow, execution, step)``, as :func:`~flask_geneva.engine.
        executor.prepare.prepare` returns a claim.
    """
    workflow, execution, step = claimed.workflow, claimed.execution, claimed.step
    run.mark_running(execution.id, adopted=True)
    # Its span starts here; its conditions ran in the previous step's finalize,
    # under that step's span (R-OTEL-12). A count read here is committed
    # with the body stage's first commit.
    run.start_trace(workflow, execution)
    run.install_loggers(workflow, execution)
    run.enter_error_context(workflow, execution)
    run.logger.info("continuing inline with step %r", step.name)
    run.events.set_payload_base(workflow, execution, step)
    run.events.emit(signals.precondition, claimed.precondition_timing, outcome="passed")
    return workflow, execution, step
