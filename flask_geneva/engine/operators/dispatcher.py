"""Database-driven dispatch of long waits (SPEC §6.4, R-DSP-01..06, BTR-01).

A publication whose eta is more than ``GENEVA_MAX_BROKER_DELAY`` ahead is not sent:
the execution keeps ``job_id = "geneva:deferred"`` and :func:`dispatch_due` sends
it once it comes within that horizon. Why: Celery holds ETA messages
unacknowledged in worker memory. Redis and SQS redeliver them after the
visibility timeout (one hour by default on Redis), which duplicates them and
grows worker memory; RabbitMQ closes consumers that hold unacknowledged messages
past ``consumer_timeout`` (30 minutes by default). Workflow waits of days must
therefore live in the database; the row is the outbox.

``GENEVA_MAX_BROKER_DELAY`` must stay well below the broker's visibility or
consumer timeout (R-DSP-06).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import error_reporting
from flask_geneva.core import publications
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db.context import EngineContext
from flask_geneva.db.context import models_of
from flask_geneva.db.queries import maintenance as maintenance_queries
from flask_geneva.db.queries import stranded as stranded_queries
from flask_geneva.dsl.job_options import DEFAULT_PRIORITY
from flask_geneva.dsl.job_options import priority_of
from flask_geneva.engine import limits as flow_limits
from flask_geneva.engine import publishing
from flask_geneva.engine import scheduling
from flask_geneva.engine.children import dispatch as child_dispatch
from flask_geneva.engine.deadlines import enforce as deadline_enforcement
from flask_geneva.engine.operators import maintenance_runs
from flask_geneva.engine.operators import stuck_recovery
from flask_geneva.engine.schedules import firing as schedule_firing
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.engine.workflow_signals import waits as workflow_signal_waits

__all__ = [
    "DispatcherRun",
    "dispatch_due",
    "publish_deferred",
    "republish_stranded",
    "run_dispatcher",
]

_log = module_logger("flask_geneva")


@dataclasses.dataclass(frozen=True)
class DispatcherRun:
    """What one dispatcher run did (R-DSP-02, R-WRK-06, R-WRK-13).

    Attributes:
        published: Deferred executions published.
        recovered: In-progress executions of dead workers recovered.
        fired: Schedule fire times fired (R-SCHED-20).
        scheduled_started: Workflows the schedules' fan-out batches created.
        deadlines: Workflows canceled or paused by their deadline (R-DL-20).
        republished: Stranded scheduled executions published again (R-FLT-20).
    """

    published: int
    recovered: int
    fired: int = 0
    scheduled_started: int = 0
    deadlines: int = 0
    republished: int = 0


def run_dispatcher(
    context: EngineContext,
    session: orm.Session | None = None,
    *,
    node_name: str | None = None,
) -> DispatcherRun:
    """One dispatcher run: publish what came due, recover dead workers' steps.

    The one definition of "a dispatcher run" (R-WRK-13): the Celery beat task,
    :meth:`flask_geneva.Geneva.dispatch_due`, :func:`flask_geneva.ext.operations.
    dispatch_due` and ``flask geneva dispatch`` all call it. In order:

    1. ongoing workflows past their deadline are canceled or paused, each in
       its own transaction (:func:`flask_geneva.engine.deadlines.enforce.
       enforce_deadlines`, R-DL-20), before anything of theirs is published;
    2. :func:`publish_deferred`: deferred executions due within the broker
       horizon are published (R-DSP-02), then :func:`republish_stranded`:
       scheduled executions whose message was lost are published again
       (R-FLT-20);
    3. the ``in_progress`` executions of workers that missed their heartbeats
       for ``GENEVA_WORKER_DEAD_AFTER`` while another worker heartbeat are
       recovered (R-WRK-06, R-WRK-14; the age rule stays with housekeeping),
       so a killed worker's step runs again within
       ``GENEVA_WORKER_DEAD_AFTER`` + ``GENEVA_DISPATCH_INTERVAL`` (R-WRK-12);
    4. the declared schedules' due fire times are fired and unfinished fires
       worked, batch by batch (:func:`flask_geneva.engine.schedules.firing.
       fire_schedules`, R-SCHED-20..25);
    5. the run is recorded in ``geneva_drive_maintenance_runs`` when the table
       exists (start, end, counts, process; R-HK-40/41).

    Args:
        context: The settings, publisher and models to run with (R-CFG-02).
        session: Session to use; default the models' session (``db.session``).
        node_name: The Celery node name when a task runs it (recorded).

    Returns:
        The counts of the run.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: The database failed outside a per-row
            step (recorded as a failed run, then raised).
    """
    session = context.bind(session) if session is not None else context.session
    with maintenance_runs.recorded_run(
        session,
        maintenance_runs.DISPATCHER,
        config=context.settings,
        node_name=node_name,
    ) as record:
        deadlines = deadline_enforcement.enforce_deadlines(context, session)
        published, broker_failed = _publish_deferred(context, session)
        # A failed publication ends the run's publishing (R-DSP-08): the
        # stranded pass would only wait on the same broker again.
        republished = 0 if broker_failed else republish_stranded(context, session)
        recovered = stuck_recovery.recover_abandoned_executions(context, session)
        schedules = schedule_firing.fire_schedules(context, session)
        record.summary.update(published=published, recovered=recovered)
        if republished:
            record.summary.update(republished=republished)
        if schedules.fired or schedules.started:
            record.summary.update(
                fired=schedules.fired, scheduled_started=schedules.started
            )
        if deadlines:
            record.summary.update(deadlines=deadlines)
    if recovered:
        _log.info("recovered %d step executions of dead workers", recovered)
    # Under allowed eager mode the tasks were queued until now (R-TH-21).
    context.run_queued_tasks()
    return DispatcherRun(
        published=published,
        recovered=recovered,
        fired=schedules.fired,
        scheduled_started=schedules.started,
        deadlines=deadlines,
        republished=republished,
    )


def dispatch_due(context: EngineContext, session: orm.Session | None = None) -> int:
    """Run the dispatcher once (:func:`run_dispatcher`); return how many were published.

    Kept for callers that want the published count only; the run also recovers
    the executions of dead workers and is recorded (R-WRK-13).

    Args:
        context: The settings, publisher and models to run with (R-CFG-02).
        session: Session to use; default the models' session (``db.session``).

    Returns:
        The number of executions published (rows that failed not counted).
    """
    return run_dispatcher(context, session).published


def publish_deferred(context: EngineContext, session: orm.Session) -> int:
    """Publish deferred executions that are due within the broker horizon (R-DSP-02).

    Selects ``scheduled`` executions with ``job_id = "geneva:deferred"`` and
    ``scheduled_for <= now + GENEVA_MAX_BROKER_DELAY`` whose workflow is ready or
    performing (paused workflows are left for ``resume()``, R-DSP-03), oldest
    first, in batches of ``GENEVA_HOUSEKEEPING_BATCH_SIZE``. Rows are locked with
    ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and MariaDB/MySQL, so two dispatchers
    never send the same row in one pass; SQLite serialises them with
    ``BEGIN IMMEDIATE``. Each row gets a real task id as ``job_id`` and its task is
    published after the batch commits, with eta ``max(scheduled_for, now)``. The
    execution state is never changed (R-DSP-04). A publication that fails never
    raises: its row gets ``"geneva:deferred"`` back, the rest of that batch is
    not attempted and is deferred too, and the pass ends; the next run retries
    them (the row is the outbox, issue 14). Then it wakes parked steps whose
    signal wait timed out and re-publishes wakes that may have been lost
    (:func:`flask_geneva.engine.workflow_signals.waits.dispatch_signal_waits`,
    R-WSIG-31,
    R-WSIG-40), and re-publishes, returns or makes limit grants
    (:func:`flask_geneva.engine.limits.dispatch_limit_grants`, R-LIM-16),
    counted in the result. A row whose publication cannot be
    prepared (a raising ``GENEVA_PRIORITY_MAPPER``, say) is logged, reported and
    left deferred; the others go on. Each pass considers a row at most once
    (keyset order by ``scheduled_for``, id); within a batch the rows are
    published by their step's merged ``priority`` job option, higher first
    (unset is 0), then in that order (R-PRI-02). Part of :func:`run_dispatcher`.

    Args:
        context: The settings, publisher and models to run with (R-CFG-02).
        session: The session, bound to ``context``.

    Returns:
        The number of executions published (rows that failed not counted).
    """
    return _publish_deferred(context, session)[0]


def _publish_deferred(context: EngineContext, session: orm.Session) -> tuple[int, bool]:
    """:func:`publish_deferred`, and whether a publication of its own pass failed."""
    config = context.settings
    geneva = context.models
    workflow_cls, execution_cls = geneva.Workflow, geneva.StepExecution
    if session.in_transaction():
        session.commit()
    # Under Celery eager mode a task runs when sent, so only due rows are sent.
    ahead = config.max_broker_delay if publishing.holds_eta(context.publisher) else None
    with publishing.trying_the_broker():
        total, broker_failed = _dispatch_passes(
            session, config, workflow_cls, execution_cls, ahead
        )
        # Timed-out signal waits and lost wakes (R-WSIG-31, R-WSIG-40).
        total += workflow_signal_waits.dispatch_signal_waits(context, session)
        # Lost, stalled and missing limit grants (R-LIM-16).
        total += flow_limits.dispatch_limit_grants(context, session)
        # Lost child-wait wakes and canceled parents' children (R-CHD-24/31).
        total += child_dispatch.dispatch_child_work(context, session)
    if total:
        _log.info("dispatched %d deferred step executions", total)
    return total, broker_failed


def republish_stranded(context: EngineContext, session: orm.Session) -> int:
    """Publish again the scheduled executions whose message was lost (R-FLT-20).

    A delivery whose claim met a database outage longer than its retries
    (R-FLT-02) ends without running the step and leaves its execution
    ``scheduled`` with no message in the broker. This pass finds such rows
    (:func:`flask_geneva.db.queries.stranded.stranded_executions`: due more
    than ``GENEVA_DISPATCH_INTERVAL`` ago and at most
    ``GENEVA_STUCK_SCHEDULED_THRESHOLD`` ago, not written for as long, and not
    published again by this pass since they came due), at most
    ``GENEVA_HOUSEKEEPING_BATCH_SIZE`` per run, oldest first, and publishes
    each again for now with a new task id, as :func:`publish_deferred`
    publishes (R-SCH-09, the step's job options and priority; a row that
    raises is reported and left; a failed publication hands it to the
    outbox, R-DSP-07). A duplicate delivery of a row that was not lost is
    dropped at its claim (R-EXE-11). With the worker registry it publishes
    nothing while no worker has heartbeat for ``GENEVA_WORKER_DEAD_AFTER``:
    a message nobody consumes is not lost, and would only be doubled.

    Args:
        context: The settings, publisher and models to run with (R-CFG-02).
        session: The session, bound to ``context``.

    Returns:
        How many executions were published again.
    """
    config = context.settings
    geneva = context.models
    if session.in_transaction():
        session.commit()
    alive = worker_registry.some_worker_alive(session, config=config)
    session.rollback()
    if not alive:
        return 0
    executions = stranded_queries.stranded_executions(
        session,
        geneva.Workflow,
        geneva.StepExecution,
        now=clock.now(),
        grace=config.dispatch_interval,
        oldest=config.stuck_scheduled_threshold,
        batch_size=config.housekeeping_batch_size,
    )
    if not executions:
        session.rollback()
        return 0
    executions = sorted(executions, key=_priority, reverse=True)
    publishing.take_failed_count(session)
    broken = 0
    with publishing.trying_the_broker():
        for execution in executions:
            if not _enqueue_one(session, execution, config):
                broken += 1
        ids = [execution.id for execution in executions]
        session.commit()
    failed = publishing.take_failed_count(session)
    republished = len(executions) - broken - failed
    if republished:
        _log.warning(
            "published again %d scheduled step execution(s) overdue by more "
            "than %g s whose message was lost (R-FLT-20): %s",
            republished,
            config.dispatch_interval.total_seconds(),
            ", ".join(str(i) for i in ids[:20]) + (" ..." if len(ids) > 20 else ""),
        )
    return republished


def _dispatch_passes(
    session: orm.Session,
    config: Any,
    workflow_cls: Any,
    execution_cls: Any,
    ahead: timedelta | None,
) -> tuple[int, bool]:
    """The batches of one dispatch pass: how many were published, and whether a
    publication failed (which ended the pass, R-DSP-08).

    ``ahead`` is how far beyond now a row may be due and still be sent (None: only
    rows already due, as under eager mode).
    """
    total = 0
    # Keyset: each pass considers a row once, so rows that failed stay for the
    # next run instead of being selected again and again (issue 14).
    last: tuple[Any, Any] | None = None
    while True:
        horizon = clock.now() + ahead if ahead is not None else clock.now()
        executions = maintenance_queries.due_deferred_executions(
            session,
            workflow_cls,
            execution_cls,
            deferred_job_id=publications.DEFERRED_JOB_ID,
            horizon=horizon,
            after=last,
            batch_size=config.housekeeping_batch_size,
        )
        if not executions:
            session.rollback()
            break
        last = (executions[-1].scheduled_for, executions[-1].id)
        # Higher merged priority first, then the keyset order (R-DSP-02, R-PRI-02).
        executions = sorted(executions, key=_priority, reverse=True)
        publishing.take_failed_count(session)
        tried = broken = 0
        for execution in executions:
            if publishing.failed_count(session):
                # Publishing inline (GENEVA_ENQUEUE_AFTER_COMMIT off) failed: the
                # rest of the batch stays deferred untried (R-DSP-08).
                break
            tried += 1
            if not _enqueue_one(session, execution, config):
                broken += 1
        session.commit()
        failed = publishing.take_failed_count(session)
        total += tried - broken - failed
        if failed:
            # The broker is unreachable: the failed rows are deferred again and
            # the next run, one dispatch interval later, sends them (issue 14).
            _log.warning(
                "%d of %d step executions could not be published; the next "
                "dispatch run retries them",
                failed,
                len(executions),
            )
            return total, True
        if len(executions) < config.housekeeping_batch_size:
            break
    return total, False


def _priority(execution: Any) -> int:
    """The merged ``priority`` job option of ``execution``'s step (R-PRI-02).

    0 when unset, and for a row whose options cannot be read (a step the code
    no longer defines, unreadable instance options): :func:`_enqueue_one`
    reports such a row; the sort never raises.
    """
    try:
        workflow = execution.workflow
        step = workflow.steps.named(execution.step_name)
        options = workflow.job_options_for(step) if step is not None else {}
        return priority_of(options)
    except Exception:  # noqa: BLE001 - the row is reported when it is published
        return DEFAULT_PRIORITY


def _enqueue_one(session: orm.Session, execution: Any, config: Any) -> bool:
    """Request one row's publication; a row that raises stays deferred (issue 14).

    Returns:
        False when preparing the publication raised (logged and reported); the
        row keeps ``"geneva:deferred"`` and the rest of the batch goes on.
    """
    try:
        scheduling.enqueue_scheduled_execution(session, execution.workflow, execution)
    except Exception as error:  # noqa: BLE001 - one row never stops the dispatcher
        execution.job_id = publications.DEFERRED_JOB_ID
        error_reporting.report_row_error(
            _log,
            config.error_reporter,
            error,
            doing="could not dispatch",
            workflow_id=execution.workflow_id,
            execution_id=execution.id,
            dispatcher="dispatch_due",
        )
        return False
    return True


def deferred_count(session: orm.Session) -> Any:
    """How many executions wait for the dispatcher (for gauges and the admin)."""
    execution_cls = models_of(session).StepExecution
    return maintenance_queries.count_deferred(
        session, execution_cls, deferred_job_id=publications.DEFERRED_JOB_ID
    )
