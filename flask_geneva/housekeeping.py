"""Housekeeping: delete old workflows, recover stuck executions, emit gauges (SPEC §11).

A run (:func:`run_housekeeping`) does, in order (R-HK-01):

1. **cleanup** (R-HK-10..13): finished/canceled workflows older than
   ``GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER`` are deleted in batches, executions
   first. Each batch is one bounded ``DELETE … WHERE id IN (SELECT id FROM (SELECT …
   LIMIT n) AS batch)``; MySQL refuses ``LIMIT`` directly inside ``IN (…)``, hence
   the derived table, and the limit is a literal integer. A database advisory lock
   lets one run at a time clean up (:mod:`flask_geneva.cleanup_lock`, R-HK-13).
2. **stuck in-progress recovery** and 3. **stuck scheduled recovery**
   (R-HK-20..27): candidates are read in batches ordered by the filter column and
   id, each batch continuing after the last row of the previous one, so a row whose
   recovery raises is considered once and the run always ends (R-HK-21). Every row
   is recovered in its own transaction that locks the workflow, then the execution
   (SPEC §7 order), and re-checks both states under the locks.
4. **gauges** (R-MET-01..06): one grouped query, emitted through ``GENEVA_METRICS``.

Per-row errors are logged, passed to ``GENEVA_ERROR_REPORTER`` and never abort the
run (R-HK-22). The statements (the batched DELETEs, the candidate reads, the
grouped count) are built in :mod:`flask_geneva.store_maintenance`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva import clock
from flask_geneva import column_detection
from flask_geneva import error_reporting
from flask_geneva import maintenance_runs
from flask_geneva import outcome_rollup
from flask_geneva import release_spread
from flask_geneva import scheduling
from flask_geneva import session_transactions
from flask_geneva import step_evolution
from flask_geneva import store
from flask_geneva import store_maintenance
from flask_geneva import transitions
from flask_geneva import worker_health
from flask_geneva import worker_registry
from flask_geneva import workflow_signal_waits
from flask_geneva.cleanup_lock import cleanup_lock
from flask_geneva.config import GenevaConfig
from flask_geneva.engine_context import EngineContext
from flask_geneva.engine_context import context_of
from flask_geneva.engine_context import models_of
from flask_geneva.models import TERMINAL_WORKFLOW_STATES
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = [
    "SUMMARY_KEYS",
    "cleanup",
    "count_workflows_by_type_and_state",
    "emit_gauges",
    "recover_abandoned_executions",
    "recover_locked_execution",
    "recover_stuck_in_progress",
    "recover_stuck_scheduled",
    "run_housekeeping",
    "stuck_in_progress_criteria",
    "stuck_scheduled_criteria",
]

_log = logging.getLogger("flask_geneva.housekeeping")

#: Keys of the dict :func:`run_housekeeping` returns (R-HK-01), always all present.
SUMMARY_KEYS = (
    "workflows_cleaned_up",
    "step_executions_cleaned_up",
    "stuck_in_progress_recovered",
    "stuck_scheduled_recovered",
)


def run_housekeeping(
    context: EngineContext,
    session: orm.Session | None = None,
    *,
    node_name: str | None = None,
) -> dict[str, int]:
    """Run one housekeeping pass: cleanup, recovery, gauges (R-HK-01).

    Commits the session's open transaction first, then works in short transactions
    of its own (one per deleted batch and one per recovered row), so concurrent
    workers are blocked only briefly. Safe to run concurrently with workers; two
    concurrent runs do not recover the same row twice (states are re-checked under
    the row locks), and only one of them cleans up at a time: the other skips its
    cleanup, the one cleaning up deletes every eligible row (R-HK-13). The
    public :func:`flask_geneva.run_housekeeping` calls it with the app's context.

    The run is recorded in ``geneva_drive_maintenance_runs`` when the table
    exists (start, end, the summary, the process; R-HK-40/41).

    Args:
        context: The settings, publisher and models to run with (R-CFG-02).
        session: Session to use; default the models' session (``db.session``).
        node_name: The Celery node name when a task runs it (recorded).

    Returns:
        ``{"workflows_cleaned_up", "step_executions_cleaned_up",
        "stuck_in_progress_recovered", "stuck_scheduled_recovered"}``: row counts
        (ints), every key always present.

    Raises:
        GenevaConfigurationError: A ``GENEVA_*`` setting is invalid.

    .. versionadded:: 0.1
    """
    config = context.settings
    session = context.bind(session) if session is not None else context.session
    with maintenance_runs.recorded_run(
        session, maintenance_runs.HOUSEKEEPING, config=config, node_name=node_name
    ) as record:
        summary = _housekeeping_pass(session, config)
        record.summary.update(summary)
    _log.info(
        "Completed: %s", ", ".join(f"{key}={value}" for key, value in summary.items())
    )
    return summary


def _housekeeping_pass(session: orm.Session, config: GenevaConfig) -> dict[str, int]:
    summary = dict.fromkeys(SUMMARY_KEYS, 0)
    workflows, executions = cleanup(session, config=config)
    summary["workflows_cleaned_up"] = workflows
    summary["step_executions_cleaned_up"] = executions
    summary["stuck_in_progress_recovered"] = recover_stuck_in_progress(
        session, config=config
    )
    summary["stuck_scheduled_recovered"] = recover_stuck_scheduled(
        session, config=config
    )
    worker_registry.prune_dead_workers(session, config=config)
    emit_gauges(session, config=config)
    outcome_rollup.roll_up_outcome_hours(session)  # the admin's chart (R-ADM-58)
    return summary


# -- cleanup (R-HK-10..13) ------------------------------------------------------------


def cleanup(session: orm.Session, *, config: GenevaConfig) -> tuple[int, int]:
    """Delete finished/canceled workflows older than the retention (R-HK-10..13).

    Eligible: state ``finished`` or ``canceled`` and ``transitioned_at`` before now
    minus ``GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER`` (computed once, R-HK-02).
    Ongoing workflows (paused ones too) and rows with NULL ``transitioned_at`` are
    kept. Pass 1 deletes their workflow signals (when the unit is installed,
    R-WSIG-63), pass 2 their executions, pass 3 the workflows, each in batches of
    ``GENEVA_HOUSEKEEPING_BATCH_SIZE`` rows, one committed ``DELETE`` per batch.

    One cleanup runs at a time per database (R-HK-13): it holds an advisory lock
    (:func:`flask_geneva.cleanup_lock.cleanup_lock`; none on SQLite, whose single
    writer already serialises the batches). A run that finds the lock taken skips
    its cleanup and logs it: the holder deletes every eligible row, so neither run
    ends early on a batch the other emptied, and no two DELETEs deadlock.

    Returns:
        ``(workflows deleted, step executions deleted)``; ``(0, 0)`` when the
        retention is None (cleanup disabled) or another run is cleaning up.
    """
    retention = config.delete_completed_workflows_after
    if retention is None:
        _log.info("cleanup disabled (GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER is None)")
        return 0, 0
    geneva = models_of(session)
    workflow_cls, execution_cls = geneva.Workflow, geneva.StepExecution
    with cleanup_lock(session, workflow_cls) as holding:
        if not holding:
            return 0, 0  # the run holding the lock deletes every eligible row
        return _cleanup_eligible(
            session, workflow_cls, execution_cls, retention, config=config
        )


def _cleanup_eligible(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    retention: timedelta,
    *,
    config: GenevaConfig,
) -> tuple[int, int]:
    signal_cls = None  # its signals go first (R-WSIG-63): no foreign key removes them
    if column_detection.optional_columns(session).workflow_signals:
        signal_cls = getattr(models_of(session), "WorkflowSignal", None)
    workflows, executions, signals = store_maintenance.delete_ended_workflows(
        session,
        workflow_cls,
        execution_cls,
        clock.now() - retention,
        batch_size=config.housekeeping_batch_size,
        signal_cls=signal_cls,
    )
    if signals:
        _log.info("cleanup deleted %d workflow signals", signals)
    return workflows, executions


# -- stuck execution recovery (R-HK-20..27) ------------------------------------------


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
            (:func:`flask_geneva.worker_registry.registry_table`), else None.
    """
    return store_maintenance.stuck_in_progress_criteria(
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
    return store_maintenance.stuck_scheduled_criteria(
        execution, config.stuck_scheduled_threshold, now
    )


def recover_abandoned_executions(
    context: EngineContext, session: orm.Session | None = None
) -> int:
    """Recover the executions of dead workers now, not waiting for housekeeping.

    Part of every dispatcher run (:func:`flask_geneva.dispatcher.run_dispatcher`,
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
    candidates = store_maintenance.stuck_in_progress_candidates(
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
        expected=StepExecutionState.IN_PROGRESS,
        action=action or config.stuck_recovery_action,
        reporter=config.error_reporter,
        config=config,
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
    candidates = store_maintenance.stuck_scheduled_candidates(
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
        expected=StepExecutionState.SCHEDULED,
        action=action or config.stuck_recovery_action,
        reporter=config.error_reporter,
    )


def _recover_all(
    session: orm.Session,
    candidates: Iterator[tuple[Any, Any]],
    *,
    expected: StepExecutionState,
    action: str,
    reporter: Any,
    config: GenevaConfig | None = None,
) -> int:
    recovered = 0
    # R-SCH-20: the reattempts of one recovery run are spread over a window.
    with release_spread.spread_releases(context_of(session).settings.release_spread):
        for execution_id, workflow_id in candidates:
            try:
                if _recover_row(
                    session,
                    execution_id,
                    workflow_id,
                    expected=expected,
                    action=action,
                    config=config,
                ):
                    recovered += 1
                session.commit()
            except Exception as error:  # noqa: BLE001 - R-HK-22: one row never stops the run
                session_transactions.rollback_after_error(session, error)
                _log.error(
                    "Failed to recover step execution %s: %s: %s",
                    execution_id,
                    type(error).__name__,
                    error,
                    exc_info=error,
                )
                error_reporting.report(
                    reporter,
                    error,
                    extra={
                        "geneva_drive": {
                            "workflow_id": _jsonable(workflow_id),
                            "step_execution_id": _jsonable(execution_id),
                            "housekeeping": f"stuck_{expected.value}",
                        }
                    },
                )
    return recovered


def _recover_row(
    session: orm.Session,
    execution_id: Any,
    workflow_id: Any,
    *,
    expected: StepExecutionState,
    action: str,
    config: GenevaConfig | None = None,
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
    workflow = store.lock_workflow(session, workflow_id)
    execution = store.lock_execution(session, execution_id)
    if workflow is None or execution is None or execution.state != expected:
        return False
    if (
        config is not None
        and worker_registry.live_worker_of(session, execution, config=config)
        is not None
    ):
        return False
    return recover_locked_execution(session, workflow, execution, action=action)


def recover_locked_execution(
    session: orm.Session,
    workflow: Any,
    execution: Any,
    *,
    action: str,
    ended_outcome: Outcome = Outcome.CANCELED,
) -> bool:
    """Recover one scheduled or in-progress execution whose rows are locked.

    The shared core of housekeeping's recovery (R-HK-24..27) and of the operator's
    ``workflow.recover()`` (R-HK-28). The caller holds the workflow lock, then the
    execution lock, has checked the execution's state, and commits.

    Args:
        session: The session holding both locks.
        workflow: The locked workflow.
        execution: The locked execution, ``scheduled`` or ``in_progress``.
        action: ``"reattempt"`` or ``"cancel"`` (R-HK-24/25).
        ended_outcome: The outcome given to the execution of a finished or
            canceled workflow: ``canceled`` for housekeeping (R-HK-27),
            ``recovered`` for the operator (R-HK-28).

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
    if workflow.state == WorkflowState.PAUSED:
        if expected == StepExecutionState.SCHEDULED:
            return False  # preserved for resume(), R-HK-27
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


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, int | str) else str(value)


# -- gauges (R-MET-01..06) ---------------------------------------------------------


def count_workflows_by_type_and_state(
    session: orm.Session,
) -> dict[str, dict[str, int]]:
    """Count workflows per type and state with one grouped query (R-MET-01).

    Returns:
        ``{type: {state: count}}`` for every type present, with all five workflow
        states, zero-filled (R-MET-05). Also ends the read transaction.
    """
    rows = store_maintenance.count_workflows_by_type_and_state(
        session, models_of(session).Workflow
    )
    counts: dict[str, dict[str, int]] = {}
    for workflow_type, state, count in rows:
        per_state = counts.setdefault(
            str(workflow_type), {s.value: 0 for s in WorkflowState}
        )
        per_state[str(state)] = per_state.get(str(state), 0) + int(count)
    return counts


def emit_gauges(session: orm.Session, *, config: GenevaConfig) -> None:
    """Emit the workflow gauges through ``GENEVA_METRICS`` (R-MET-01..06).

    For every state ``s``: ``geneva_drive.<s>`` without tags (total) and with
    ``{"workflow": <type>}`` per type present; per type also
    ``geneva_drive.paused_ratio`` (paused / all states of that type, 0.0..1.0).
    With the worker registry also ``geneva_drive.workers_alive``,
    ``geneva_drive.workers_dead`` and ``geneva_drive.executions_abandoned``
    (R-WRK-09), and the workflow signal gauges (R-WSIG-65,
    :func:`~flask_geneva.workflow_signal_waits.signal_gauges`). States without
    rows are 0 (R-MET-05). Nothing is queried when
    ``GENEVA_METRICS`` is None. A hook that raises is logged and the remaining
    gauges are still sent (R-MET-06).
    """
    metrics = config.metrics
    if metrics is None:
        return
    counts = count_workflows_by_type_and_state(session)
    totals = {s.value: 0 for s in WorkflowState}
    for per_state in counts.values():
        for state, count in per_state.items():
            totals[state] = totals.get(state, 0) + count
    for state, count in totals.items():
        _gauge(metrics, f"geneva_drive.{state}", count, None)
    for workflow_type, per_state in sorted(counts.items()):
        tags = {"workflow": workflow_type}
        for state, count in per_state.items():
            _gauge(metrics, f"geneva_drive.{state}", count, tags)
        total = sum(per_state.values())
        ratio = per_state.get(WorkflowState.PAUSED.value, 0) / total if total else 0.0
        _gauge(metrics, "geneva_drive.paused_ratio", ratio, tags)
    workers = worker_health.worker_overview(session, config=config)
    if workers is not None:  # R-WRK-09
        _gauge(metrics, "geneva_drive.workers_alive", workers["alive"], None)
        _gauge(metrics, "geneva_drive.workers_dead", workers["dead"], None)
        abandoned = workers["abandoned_executions"]
        _gauge(metrics, "geneva_drive.executions_abandoned", abandoned, None)
    for name, value in workflow_signal_waits.signal_gauges(session, config=config):
        _gauge(metrics, name, value, None)  # R-WSIG-65


def _gauge(metrics: Any, name: str, value: float, tags: dict[str, str] | None) -> None:
    try:
        metrics.gauge(name, value, tags)
    except Exception as error:  # noqa: BLE001 - R-MET-06: a metrics hook never breaks housekeeping
        _log.warning("metrics hook raised %r for gauge %s; ignored", error, name)
