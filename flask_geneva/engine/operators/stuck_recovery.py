"""Recovery of stuck and abandoned step executions (SPEC §11, R-HK-20..28, R-WRK-06).

Housekeeping's steps 2 and 3
(:func:`flask_geneva.engine.operators.housekeeping.run_housekeeping`,
R-HK-01): **stuck in-progress recovery** (:func:`recover_stuck_in_progress`) and
**stuck scheduled recovery** (:func:`recover_stuck_scheduled`). Candidates are
read in batches ordered by the filter column and id, each batch continuing after
the last row of the previous one, so a row whose recovery raises is considered
once and the run always ends (R-HK-21). Every row is recovered in its own
transaction that locks the workflow, then the execution (SPEC §7 order), and
re-checks both states under the locks. Per-row errors are logged, passed to
``GENEVA_ERROR_REPORTER`` and never abort the run (R-HK-22).

Also here: the dispatcher's recovery of executions of dead workers
(:func:`recover_abandoned_executions`, R-WRK-06), the shared core of the
operator's ``workflow.recover()`` (:func:`recover_locked_execution`, R-HK-28), and
the stuck criteria that ``flask geneva status`` and the admin count with
(:func:`stuck_in_progress_criteria`, :func:`stuck_scheduled_criteria`). The
statements are built in :mod:`flask_geneva.db.queries.maintenance`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import error_reporting
from flask_geneva.core import log_fields
from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import locks as row_locks
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import session_transactions
from flask_geneva.db.context import EngineContext
from flask_geneva.db.context import context_of
from flask_geneva.db.context import models_of
from flask_geneva.db.queries import maintenance as maintenance_queries
from flask_geneva.engine import scheduling
from flask_geneva.engine import step_evolution
from flask_geneva.engine.children import settle as children_settle
from flask_geneva.engine.operators import timeout_recovery
from flask_geneva.engine.operators import worker_lost
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.models import TERMINAL_WORKFLOW_STATES
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.policies import release_spread

__all__ = [
    "recover_abandoned_executions",
    "recover_locked_execution",
    "recover_stuck_in_progress",
    "recover_stuck_scheduled",
    "stuck_in_progress_criteria",
    "stuck_scheduled_criteria",
]

# Housekeeping's logger: recovery is logged as part of its run (R-HK-22).
_log = module_logger("flask_geneva.housekeeping")

#: The workflow states in which a timed-out step's policy applies (R-STO-20);
#: a paused or ended workflow keeps R-HK-27 (the operator's state wins).
_RUNNABLE_WORKFLOW_STATES = frozenset({WorkflowState.READY, WorkflowState.PERFORMING})


def stuck_in_progress_criteria(
    execution: Any,
    config: GenevaConfig,
    now: datetime,
    workers: sa.Table | None = None,
) -> list[Any]:
    """WHERE criteria of a stuck (abandoned) ``in_progress`` execution (R-HK-20).

    Without the worker registry: ``started_at`` earlier than ``now`` minus
    ``GENEVA_STUCK_IN_PROGRESS_THRESHOLD``. With it (``workers`` given): an
    execution claimed by a registered worker is stuck when that worker missed
    its heartbeats for ``GENEVA_WORKER_DEAD_AFTER``, whatever its age; one
    without a worker keeps the age rule (R-WRK-06). Shared by recovery,
    ``flask geneva status`` and the admin, so they count the same rows.

    Args:
        execution: The ``StepExecution`` model or its table's columns (``.c``).
        config: The validated settings.
        now: The reference time (aware UTC).
        workers: The workers table when the registry exists
            (:func:`flask_geneva.engine.workers.registry.registry_table`), else None.
    """
    return maintenance_queries.stuck_in_progress_criteria(
        execution,
        config.stuck_in_progress_threshold,
        now,
        workers=workers,
        dead_after=config.worker_dead_after,
    )


def stuck_scheduled_criteria(
    execution: Any, config: GenevaConfig, now: datetime
) -> list[Any]:
    """WHERE criteria of a ``scheduled`` execution overdue beyond the threshold.

    ``scheduled_for`` earlier than ``now`` minus ``GENEVA_STUCK_SCHEDULED_THRESHOLD``
    (R-HK-20). Recovery adds that the workflow is not paused (R-HK-27); the counts
    of ``flask geneva status`` and the admin overview do not.

    Args:
        execution: The ``StepExecution`` model or its table's columns (``.c``).
        config: The validated settings.
        now: The reference time (aware UTC).
    """
    return maintenance_queries.stuck_scheduled_criteria(
        execution, config.stuck_scheduled_threshold, now
    )


def recover_abandoned_executions(
    context: EngineContext, session: orm.Session | None = None
) -> int:
    """Recover the executions of dead workers now, not waiting for housekeeping.

    Part of every dispatcher run
    (:func:`flask_geneva.engine.operators.dispatcher.run_dispatcher`,
    every ``GENEVA_DISPATCH_INTERVAL``), so a killed worker's execution is
    recovered at most ``GENEVA_WORKER_DEAD_AFTER`` + ``GENEVA_DISPATCH_INTERVAL``
    after its last heartbeat (R-WRK-06, R-WRK-12). Only executions that name a
    dead worker are considered; the age rule stays with housekeeping. Nothing
    happens without the worker registry.

    Args:
        context: The settings, publisher and models to run with.
        session: Session to use; default the context's session.

    Returns:
        The number of executions recovered.
    """
    session = context.bind(session) if session is not None else context.session
    if session.in_transaction():
        session.commit()
    return recover_stuck_in_progress(
        session, config=context.settings, dead_workers_only=True
    )


def recover_stuck_in_progress(
    session: orm.Session,
    *,
    config: GenevaConfig,
    action: str | None = None,
    dead_workers_only: bool = False,
) -> int:
    """Recover ``in_progress`` executions started before the threshold (R-HK-20).

    Candidates have ``started_at`` earlier than now minus
    ``GENEVA_STUCK_IN_PROGRESS_THRESHOLD`` (computed once); they are read oldest
    first through the partial index of R-DM-12. See :func:`_recover_row` for what
    happens to each.

    Args:
        session: The session to use.
        config: The validated settings.
        action: Overrides ``GENEVA_STUCK_RECOVERY_ACTION`` (``"reattempt"`` or
            ``"cancel"``); any other value fails every row (R-HK-26).
        dead_workers_only: Consider only executions naming a dead worker
            (R-WRK-06), not the age rule; 0 without the worker registry.

    Returns:
        The number of executions recovered.
    """
    execution_cls = models_of(session).StepExecution
    workers = worker_registry.registry_table(session)
    if dead_workers_only and workers is None:
        session.rollback()
        return 0
    candidates = maintenance_queries.stuck_in_progress_candidates(
        session,
        execution_cls,
        threshold=config.stuck_in_progress_threshold,
        now=clock.now(),
        workers=workers,
        dead_after=config.worker_dead_after,
        dead_workers_only=dead_workers_only,
        batch_size=config.housekeeping_batch_size,
    )
    return _recover_all(
        session,
        candidates,
        config,
        expected=StepExecutionState.IN_PROGRESS,
        action=action,
        recovered_by=worker_lost.RecoveredBy(
            "dispatcher" if dead_workers_only else "housekeeping"
        ),
    )


def recover_stuck_scheduled(
    session: orm.Session, *, config: GenevaConfig, action: str | None = None
) -> int:
    """Recover ``scheduled`` executions overdue by more than the threshold (R-HK-20).

    Candidates have ``scheduled_for`` earlier than now minus
    ``GENEVA_STUCK_SCHEDULED_THRESHOLD`` (computed once), oldest first. Executions
    of paused workflows are excluded: they are preserved for ``resume()``
    (R-HK-27, R-EXT-01). Executions due in the future or within the threshold are
    never touched.

    Args:
        session: The session to use.
        config: The validated settings.
        action: Overrides ``GENEVA_STUCK_RECOVERY_ACTION``.

    Returns:
        The number of executions recovered.
    """
    geneva = models_of(session)
    candidates = maintenance_queries.stuck_scheduled_candidates(
        session,
        geneva.Workflow,
        geneva.StepExecution,
        threshold=config.stuck_scheduled_threshold,
        now=clock.now(),
        batch_size=config.housekeeping_batch_size,
    )
    return _recover_all(
        session,
        candidates,
        config,
        expected=StepExecutionState.SCHEDULED,
        action=action,
        recovered_by=worker_lost.RecoveredBy(),
    )


def _recover_all(
    session: orm.Session,
    candidates: Iterator[tuple[Any, Any]],
    config: GenevaConfig,
    *,
    expected: StepExecutionState,
    action: str | None,
    recovered_by: worker_lost.RecoveredBy,
) -> int:
    """Recover each candidate in its own transaction; one failure never stops the run.

    ``action`` overrides ``GENEVA_STUCK_RECOVERY_ACTION``; a row's error is logged
    and sent to ``GENEVA_ERROR_REPORTER`` (R-HK-22). Only an ``in_progress``
    execution can still have a live worker, so only those rows are checked
    against the worker registry. ``recovered_by`` names the run in what an
    ``in_progress`` execution records (R-HK-29).
    """
    action = action or config.stuck_recovery_action
    live_check = config if expected == StepExecutionState.IN_PROGRESS else None
    recovered = 0
    # R-SCH-20: the reattempts of one recovery run are spread over a window.
    with release_spread.spread_releases(context_of(session).settings.release_spread):
        for execution_id, workflow_id in candidates:
            # The records of this row (its recovery, commit, publication and
            # error) name its workflow (R-OLOG-02).
            fields = log_fields.id_fields(workflow_id, execution_id=execution_id)
            token = log_fields.set_fields(fields)
            try:
                if _recover_row(
                    session,
                    execution_id,
                    workflow_id,
                    expected=expected,
                    action=action,
                    config=live_check,
                    recovered_by=recovered_by,
                ):
                    recovered += 1
                session.commit()
            except Exception as error:  # noqa: BLE001 - R-HK-22: one row never stops the run
                session_transactions.rollback_after_error(session, error)
                error_reporting.report_row_error(
                    _log,
                    config.error_reporter,
                    error,
                    doing="Failed to recover",
                    workflow_id=workflow_id,
                    execution_id=execution_id,
                    housekeeping=f"stuck_{expected.value}",
                )
            finally:
                log_fields.reset_fields(token)
    return recovered


def _recover_row(
    session: orm.Session,
    execution_id: Any,
    workflow_id: Any,
    *,
    expected: StepExecutionState,
    action: str,
    config: GenevaConfig | None = None,
    recovered_by: worker_lost.RecoveredBy,
) -> bool:
    """Recover one execution under the workflow and execution locks (R-HK-23..27).

    With ``config`` (in-progress recovery), an execution whose worker is alive
    once the locks are held is left alone: the candidates were read before the
    locks, and a worker that heartbeat in between (after a freeze or a database
    outage) still runs the step (R-WRK-06).

    Returns:
        True if the execution was recovered (counted), False if it was left alone:
        gone, no longer in ``expected`` state, its worker alive again, or a
        scheduled execution of a paused workflow (R-HK-27).

    Raises:
        ValueError: ``action`` is neither ``"reattempt"`` nor ``"cancel"`` (R-HK-26).
        StepNotDefinedError: Reattempt of a step no longer defined in the class.
    """
    if action not in ("reattempt", "cancel"):
        raise ValueError(
            f"Unknown stuck_recovery_action {action!r}; allowed: 'reattempt', 'cancel'"
        )
    workflow = row_locks.lock_workflow(session, workflow_id)
    execution = row_locks.lock_execution(session, execution_id)
    if workflow is None or execution is None or execution.state != expected:
        return False
    if (
        config is not None
        and worker_registry.live_worker_of(session, execution, config=config)
        is not None
    ):
        return False
    return recover_locked_execution(
        session, workflow, execution, action=action, recovered_by=recovered_by
    )


def recover_locked_execution(
    session: orm.Session,
    workflow: Any,
    execution: Any,
    *,
    action: str,
    ended_outcome: Outcome = Outcome.CANCELED,
    recovered_by: worker_lost.RecoveredBy | None = None,
) -> bool:
    """Recover one scheduled or in-progress execution whose rows are locked.

    The shared core of housekeeping's recovery (R-HK-24..27) and of the operator's
    ``workflow.recover()`` (R-HK-28). The caller holds the workflow lock, then the
    execution lock, has checked the execution's state, and commits.

    An ``in_progress`` execution of a ``ready`` or ``performing`` workflow whose
    step ran past its ``timeout`` (R-STO-21) is not recovered by ``action``: the
    step's exception policies decide on its ``StepTimeout``
    (:func:`~flask_geneva.engine.operators.timeout_recovery.apply_step_policy`,
    R-STO-20).

    Args:
        session: The session holding both locks.
        workflow: The locked workflow.
        execution: The locked execution, ``scheduled`` or ``in_progress``.
        action: ``"reattempt"`` or ``"cancel"`` (R-HK-24/25).
        ended_outcome: The outcome given to the execution of a finished or
            canceled workflow: ``canceled`` for housekeeping (R-HK-27),
            ``recovered`` for the operator (R-HK-28).
        recovered_by: Who recovers, as an ``in_progress`` execution records it
            with its lost worker (R-HK-29); default housekeeping.

    Returns:
        True if the execution was recovered, False if it was left alone (a
        scheduled execution of a paused workflow, R-HK-27).

    Raises:
        ValueError: ``action`` is neither ``"reattempt"`` nor ``"cancel"`` (R-HK-26).
        StepNotDefinedError: Reattempt of a step no longer defined in the class;
            nothing was changed.
    """
    if action not in ("reattempt", "cancel"):
        raise ValueError(
            f"Unknown stuck_recovery_action {action!r}; allowed: 'reattempt', 'cancel'"
        )
    expected = StepExecutionState(execution.state)
    now = clock.now()
    paused = workflow.state == WorkflowState.PAUSED
    if paused and expected == StepExecutionState.SCHEDULED:
        return False  # preserved for resume(), R-HK-27
    if expected == StepExecutionState.IN_PROGRESS:
        # Never a bare "recovered": the worker was lost, and the step may have
        # run (R-HK-29). An error below rolls the record back with the rest.
        defined = workflow.steps.named(execution.step_name)
        lost = worker_lost.lost_worker(
            session,
            execution,
            recovered_by or worker_lost.RecoveredBy(),
            # A step that ran past its timeout records StepTimeout (R-STO-20).
            step_timeout=None if defined is None else defined.timeout,
            now=now,
        )
        if (
            lost.timed_out
            and defined is not None
            and workflow.state in _RUNNABLE_WORKFLOW_STATES
        ):
            # Its policies decide, not the recovery action: a step that hangs
            # is not run again forever (R-STO-20).
            timeout_recovery.apply_step_policy(
                session, workflow, execution, defined, lost
            )
            return True
        lost.record(execution)
    if paused:
        transitions.apply(
            transitions.RECOVER_PAUSED, now, workflow=workflow, execution=execution
        )
        workflow.logger.warning(
            "recovered stuck execution %s of a paused workflow; nothing scheduled",
            execution.id,
        )
        return True
    if workflow.state in TERMINAL_WORKFLOW_STATES:
        transitions.apply(
            transitions.RECOVER_ENDED,
            now,
            workflow=workflow,
            execution=execution,
            outcome=ended_outcome,
        )
        if workflow.state == WorkflowState.CANCELED:
            # Its step may have started children after the cancel committed
            # and died before its finalize marked them (R-CHD-31).
            children_settle.note_canceled_during_step(session, workflow)
        workflow.logger.warning(
            "canceled stuck execution %s of a %s workflow", execution.id, workflow.state
        )
        return True
    if action == "cancel":
        transitions.apply(
            transitions.RECOVER_CANCEL, now, workflow=workflow, execution=execution
        )
        workflow.logger.warning(
            "stuck %s execution %s recovered: workflow canceled",
            expected.value,
            execution.id,
        )
        return True
    if workflow.steps.is_removed(execution.step_name):  # R-EVO-03
        return step_evolution.recover_removed(session, workflow, execution)
    step = workflow.steps.named(execution.step_name)
    if step is None:  # checked before any change: the row stays as it was (R-HK-22)
        raise scheduling.step_not_defined(workflow, execution.step_name)
    transitions.apply(
        transitions.RECOVER_REATTEMPT, now, workflow=workflow, execution=execution
    )
    # The recovered row must leave the one-active index before the new one enters.
    session.flush()
    if step.is_resumable and column_detection.optional_columns(session).resumable:
        created = scheduling.create_successor_execution(session, workflow, execution)
    else:
        created = scheduling.create_step_execution(session, workflow, step, wait=None)
    workflow.logger.warning(
        "stuck %s execution %s recovered: step %r rescheduled as execution %s",
        expected.value,
        execution.id,
        step.name,
        created.id,
    )
    return True
