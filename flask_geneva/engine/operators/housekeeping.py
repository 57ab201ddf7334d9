"""Housekeeping: delete old workflows, recover stuck executions, emit gauges (SPEC §11).

A run (:func:`run_housekeeping`) does, in order (R-HK-01):

1. **cleanup** (R-HK-10..13): finished/canceled workflows older than
   ``GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER`` are deleted in batches, executions
   first. Each batch is one bounded ``DELETE … WHERE id IN (SELECT id FROM (SELECT …
   LIMIT n) AS batch)``; MySQL refuses ``LIMIT`` directly inside ``IN (…)``, hence
   the derived table, and the limit is a literal integer. A database advisory lock
   lets one run at a time clean up (:mod:`flask_geneva.db.cleanup_lock`, R-HK-13).
2. **stuck in-progress recovery** and 3. **stuck scheduled recovery**
   (R-HK-20..27), in :mod:`flask_geneva.engine.operators.stuck_recovery` (its functions
   are
   re-exported here): every row is recovered in its own transaction under the
   workflow and execution locks; per-row errors are logged, passed to
   ``GENEVA_ERROR_REPORTER`` and never abort the run (R-HK-22).
4. **gauges** (R-MET-01..06): one grouped query, emitted through ``GENEVA_METRICS``.

The statements (the batched DELETEs, the candidate reads, the grouped count) are
built in :mod:`flask_geneva.db.queries.maintenance`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import schedule_cleanup
from flask_geneva.db.cleanup_lock import cleanup_lock
from flask_geneva.db.context import EngineContext
from flask_geneva.db.context import models_of
from flask_geneva.db.queries import maintenance as maintenance_queries
from flask_geneva.db.states import CHILD_COUNTS_TABLE
from flask_geneva.engine.limits import overview as limit_overview
from flask_geneva.engine.operators import maintenance_runs
from flask_geneva.engine.operators import outcome_rollup
from flask_geneva.engine.operators.stuck_recovery import recover_abandoned_executions
from flask_geneva.engine.operators.stuck_recovery import recover_locked_execution
from flask_geneva.engine.operators.stuck_recovery import recover_stuck_in_progress
from flask_geneva.engine.operators.stuck_recovery import recover_stuck_scheduled
from flask_geneva.engine.operators.stuck_recovery import stuck_in_progress_criteria
from flask_geneva.engine.operators.stuck_recovery import stuck_scheduled_criteria
from flask_geneva.engine.workers import health as worker_health
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.engine.workflow_signals import waits as workflow_signal_waits
from flask_geneva.models import WorkflowState
from flask_geneva.telemetry import metric_hooks

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

_log = module_logger("flask_geneva.housekeeping")

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
    Then the schedule fires that ended before the same cutoff, the newest fire
    of each schedule kept (when the ``add_schedules`` unit is installed,
    R-SCHED-26).

    One cleanup runs at a time per database (R-HK-13): it holds an advisory lock
    (:func:`flask_geneva.db.cleanup_lock.cleanup_lock`; none on SQLite, whose single
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
    if column_detection.optional_columns(session).child_workflows:
        # A parent's child counts go with it (R-CHD-32), but not while the
        # dispatcher still has its children to cancel (R-CHD-31).
        counts_table = workflow_cls.metadata.tables[CHILD_COUNTS_TABLE]
        counts = maintenance_queries.delete_ended_child_counts(
            session,
            workflow_cls,
            counts_table,
            clock.now() - retention,
            batch_size=config.housekeeping_batch_size,
        )
        counts += maintenance_queries.delete_orphaned_child_counts(
            session,
            workflow_cls,
            counts_table,
            batch_size=config.housekeeping_batch_size,
        )
        if counts:
            _log.info("cleanup deleted the child counts of %d workflows", counts)
    workflows, executions, signals = maintenance_queries.delete_ended_workflows(
        session,
        workflow_cls,
        execution_cls,
        clock.now() - retention,
        batch_size=config.housekeeping_batch_size,
        signal_cls=signal_cls,
    )
    if signals:
        _log.info("cleanup deleted %d workflow signals", signals)
    if column_detection.optional_columns(session).schedules:
        # Ended fires, the newest of each schedule kept (R-SCHED-26).
        fires = schedule_cleanup.delete_ended_fires(
            session,
            clock.now() - retention,
            batch_size=config.housekeeping_batch_size,
        )
        if fires:
            _log.info("cleanup deleted %d ended schedule fires", fires)
    return workflows, executions


# -- gauges (R-MET-01..06) ---------------------------------------------------------


def count_workflows_by_type_and_state(
    session: orm.Session,
) -> dict[str, dict[str, int]]:
    """Count workflows per type and state with one grouped query (R-MET-01).

    Returns:
        ``{type: {state: count}}`` for every type present, with all five workflow
        states, zero-filled (R-MET-05). Also ends the read transaction.
    """
    rows = maintenance_queries.count_workflows_by_type_and_state(
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
    :func:`~flask_geneva.engine.workflow_signals.waits.signal_gauges`), and the
    limit gauges per limit name (R-LIM-44,
    :func:`~flask_geneva.engine.limits.overview.limit_gauges`). States without
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
    for name, value, signal_tags in workflow_signal_waits.signal_gauges(
        session, config=config
    ):
        _gauge(metrics, name, value, signal_tags)  # R-WSIG-65, R-OMET-20
    for name, value, limit_tags in limit_overview.limit_gauges(session):
        _gauge(metrics, name, value, limit_tags)  # R-LIM-44


#: Send one gauge, logging and swallowing the hook's error (R-MET-06).
_gauge = metric_hooks.send_gauge
