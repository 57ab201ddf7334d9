"""Creating step executions and arranging their publication (SPEC §6.1).

Every function here runs inside the caller's transaction, with the workflow row
locked (R-SCH-02); none commits. Creating a workflow is
:mod:`flask_geneva.engine.workflow_creation`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import log_fields
from flask_geneva.core import publications
from flask_geneva.core.durations import coerce_duration
from flask_geneva.core.tagged_logging import column_values
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import locks as row_locks
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import write_path
from flask_geneva.db.context import EngineContext
from flask_geneva.db.context import context_of
from flask_geneva.engine import publishing
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.exceptions import StepNotDefinedError
from flask_geneva.models import StepExecutionState
from flask_geneva.policies import release_spread

__all__ = [
    "create_step_execution",
    "create_successor_execution",
    "due_now_on_same_route",
    "enqueue_scheduled_execution",
    "new_scheduled_execution",
    "reschedule_current_step",
    "schedule_next_step",
]

logger = module_logger("flask_geneva")


def _job_option_time(options: Mapping[str, Any], now: datetime) -> datetime | None:
    wait_until = options.get("wait_until")
    if isinstance(wait_until, datetime):
        return wait_until
    if isinstance(wait_until, int | float) and not isinstance(wait_until, bool):
        return datetime.fromtimestamp(wait_until, tz=UTC)
    wait = options.get("wait")
    if wait is not None:
        delta = coerce_duration(wait, name="job option 'wait'")
        assert delta is not None  # noqa: S101 - None was excluded above
        return now + delta
    return None


def new_scheduled_execution(
    workflow: Any, step_name: str, scheduled_for: datetime
) -> Any:
    """A new ``scheduled`` execution of ``step_name``, added to no session (R-SCH-04).

    Args:
        workflow: Its workflow (persistent: its id is set).
        step_name: The step's name.
        scheduled_for: When it is due.
    """
    return workflow.__geneva__.StepExecution(
        workflow_id=workflow.id,
        step_name=step_name,
        state=StepExecutionState.SCHEDULED.value,
        scheduled_for=scheduled_for,
    )


def create_step_execution(
    session: orm.Session,
    workflow: Any,
    step: Any,
    *,
    wait: timedelta | int | float | None,
    continues_from: Any = None,
    cursor: Any = None,
    cancel_stray: bool = True,
    publish: bool = True,
    claim_inline: bool = False,
    limit_holds: Any = None,
) -> Any:
    """Insert a scheduled execution of ``step``; arrange its publication (R-SCH-01..05).

    Cancels the workflow's other ``scheduled`` executions first (R-SCH-03), sets
    ``next_step_name``, folds job-option waits into ``scheduled_for`` (R-JOB-09)
    and pre-generates the task id, stored as ``job_id`` in the same transaction
    (R-SCH-05). The caller holds the workflow lock and commits.

    Args:
        wait: Delay from now (``timedelta`` or seconds), or None for now.
        continues_from: Predecessor execution for resumable successors (R-SCH-08).
        cursor: Stored cursor to copy verbatim into the successor.
        limit_holds: The slots a resumable successor holds from its
            predecessor (``hold_across_chain``, R-LIM-26), written with the
            INSERT; None for none.
        cancel_stray: Cancel other ``scheduled`` executions first (R-SCH-03). The
            executor's finalize passes False: it holds the workflow's one active
            (``in_progress``) execution, so the unique index rules out any other.
            So does creation: a brand-new workflow has no executions, and the
            UPDATE would only take a gap lock on MySQL/MariaDB.
        publish: False preserves the execution for ``resume()`` without
            publishing it: ``job_id`` is the dispatcher's deferred marker, which the
            dispatcher leaves alone while the workflow is paused (R-DSP-03), and
            ``resume()`` publishes it (R-EXT-21). The executor passes False when an
            operator paused the workflow while the step ran (R-EXE-42).
        claim_inline: The executor continues with this execution in the same
            task (R-EXE-70): the ``claim`` transition is applied to it before its
            INSERT (so it is inserted ``in_progress``, the workflow
            ``performing`` with ``current_step_name`` set, R-EXE-17) and nothing
            is published; ``job_id`` is still a fresh task id (R-SCH-05).

    Returns:
        The new (flushed) execution.
    """
    now = clock.now()
    delay = coerce_duration(wait, name="wait")
    scheduled_for = now + delay if delay is not None else now
    options = workflow.job_options_for(step)
    option_time = _job_option_time(options, now)
    if option_time is not None and option_time > scheduled_for:
        scheduled_for = option_time
    spread_to = _spread_time(workflow, now)
    if spread_to is not None and spread_to > scheduled_for:
        scheduled_for = spread_to  # R-SCH-20: bulk releases are spread

    if cancel_stray:
        row_locks.cancel_scheduled_executions(session, workflow.id, now)
    execution = new_scheduled_execution(workflow, step.name, scheduled_for)
    if continues_from is not None:
        execution.continues_from_id = continues_from.id
        execution.cursor = cursor
    if limit_holds is not None:
        execution.limit_holds = limit_holds
    workflow.next_step_name = step.name
    # The task id is chosen before the INSERT so job_id needs no second UPDATE.
    context = context_of(session)
    if claim_inline:
        execution.job_id, publication = str(uuid.uuid4()), None
        transitions.apply(
            transitions.CLAIM,
            now,
            workflow=workflow,
            execution=execution,
            current_step_name=step.name,
            # The worker holding the chain holds this step too (R-WRK-05).
            execution_attributes=worker_registry.claim_attributes(session),
        )
    elif publish:
        publication = _prepare_publication(execution, options, now, context, step)
    else:
        execution.job_id, publication = publications.DEFERRED_JOB_ID, None
    write_path.insert_step_execution(
        session,
        workflow.__geneva__,
        execution,
        column_detection.absent_execution_columns(
            column_detection.optional_columns(session)
        ),
    )
    _request(session, execution, publication, context)
    logger = workflow.logger
    if logger.isEnabledFor(logging.DEBUG):  # isoformat() only for a record
        logger.debug(
            "scheduled step %r (execution %s) for %s",
            step.name,
            execution.id,
            scheduled_for.isoformat(),
        )
    return execution


def _prepare_publication(
    execution: Any,
    options: Mapping[str, Any],
    now: datetime,
    context: EngineContext,
    step: Any,
) -> publications.Publication | None:
    """Set ``job_id`` and return the publication to request, or None (R-DSP-01).

    ``step`` (the execution's definition, or None) gives the task Celery's
    time limits when it has a ``timeout`` (R-STO-03).

    A future time is left to the dispatcher when it is more than
    ``GENEVA_MAX_BROKER_DELAY`` ahead, or when the backend cannot hold a task
    until its eta (Celery eager mode would run a waiting step at once, R-EXE-18).
    """
    config = context.settings
    eta = execution.scheduled_for if execution.scheduled_for > now else None
    if publishing.left_to_dispatcher(
        eta, now, config=config, backend=context.publisher
    ):
        # Long waits never live in the broker (R-DSP-01): the dispatcher sends it.
        execution.job_id = publications.DEFERRED_JOB_ID
        return None
    task_id = str(uuid.uuid4())
    execution.job_id = task_id
    return publishing.step_publication(
        config,
        step_execution_id=None,
        task_id=task_id,
        queue=options.get("queue"),
        priority=options.get("priority"),
        eta=eta,
        timeout=None if step is None else step.timeout,
    )


def due_now_on_same_route(
    workflow: Any, done_step: Any, following: Any, context: EngineContext
) -> bool:
    """Tell whether ``following`` would be published now, where ``done_step`` was.

    True when the execution :func:`create_step_execution` would create for
    ``following`` is due at once (no step ``wait``, no job-option ``wait`` or
    future ``wait_until``, no release-spread block, R-SCH-20) and its task would
    go to the same queue with the same priority as ``done_step``'s (R-JOB-02,
    R-JOB-08). The executor continues inline only then (R-EXE-71).

    Args:
        workflow: The workflow, locked by the caller.
        done_step: The step definition that just completed.
        following: The step definition scheduled next.
        context: The engine context (settings: default queue, priority mapper).
    """
    if following.wait or release_spread.active_window() is not None:
        return False
    options = workflow.job_options_for(following)
    now = clock.now()
    option_time = _job_option_time(options, now)
    if option_time is not None and option_time > now:
        return False
    if following.job_options == done_step.job_options:
        return True  # the same class and instance options under both: one route
    done_options = workflow.job_options_for(done_step)
    default_queue = context.settings.default_queue
    return (options.get("queue") or default_queue) == (
        done_options.get("queue") or default_queue
    ) and options.get("priority") == done_options.get("priority")


def _request(
    session: orm.Session,
    execution: Any,
    publication: publications.Publication | None,
    context: EngineContext,
) -> None:
    if publication is None:
        return
    publishing.request_publication(
        session,
        dataclasses.replace(publication, step_execution_id=execution.id),
        backend=context.publisher,
        defer=publishing.deferral_active(context.settings.enqueue_after_commit),
        fields=_publication_fields(execution),
    )


_PUBLICATION_KEYS = ("workflow_id", "id", "step_name")


def _publication_fields(execution: Any) -> log_fields.Fields:
    """The log fields of ``execution``'s publication (R-OLOG-02): the current
    ones when they are about its workflow, with its id and step."""
    workflow_id, execution_id, step_name = column_values(execution, _PUBLICATION_KEYS)
    current = log_fields.current_fields()
    if current is None or current["workflow_id"] != workflow_id:
        return log_fields.id_fields(
            workflow_id, execution_id=execution_id, step=step_name
        )
    return {**current, "execution_id": execution_id, "step": step_name}


def schedule_next_step(
    session: orm.Session,
    workflow: Any,
    *,
    wait: timedelta | int | float | None = None,
    lock: bool = False,
    after: str | None = None,
    cancel_stray: bool = True,
) -> Any:
    """Schedule the step after the current one, or finish the workflow (R-SCH-06).

    The reference is ``after`` if given, else ``current_step_name`` or else
    ``next_step_name``. With no next step the workflow becomes ``finished`` with
    both step names cleared, and (with ``cancel_stray``) its ``scheduled`` or
    ``waiting`` execution, if any, ends canceled as R-SCH-03 ends it.

    Args:
        wait: Overrides the next step's own ``wait``.
        lock: Lock the workflow row first (callers outside a locked transaction).
        after: Name of the step just done (the executor passes it explicitly).
        cancel_stray: See :func:`create_step_execution`.

    Returns:
        The new execution, or None when the workflow finished.
    """
    if lock:
        row_locks.lock_workflow(session, workflow.id)
    reference = after or workflow.current_step_name or workflow.next_step_name
    following = workflow.steps.next_after(reference)
    if following is None:
        workflow.logger.info("no more steps, finishing")
        now = clock.now()
        if cancel_stray:
            # A finished workflow keeps no pending execution (R-SCH-06 amended).
            row_locks.cancel_scheduled_executions(session, workflow.id, now)
        transitions.apply(transitions.FINISH_AFTER_LAST_STEP, now, workflow=workflow)
        return None
    return create_step_execution(
        session,
        workflow,
        following,
        wait=wait if wait is not None else following.wait,
        cancel_stray=cancel_stray,
    )


def reschedule_current_step(
    session: orm.Session,
    workflow: Any,
    *,
    wait: timedelta | int | float | None = None,
    lock: bool = False,
) -> Any:
    """Create a new execution of the current step with exactly ``wait`` (R-SCH-07).

    Raises:
        StepNotDefinedError: The current/next step name has no definition.
    """
    if lock:
        row_locks.lock_workflow(session, workflow.id)
    name = workflow.current_step_name or workflow.next_step_name
    step = workflow.steps.named(name) if name else None
    if step is None:
        raise step_not_defined(workflow, name)
    return create_step_execution(session, workflow, step, wait=wait)


def create_successor_execution(
    session: orm.Session,
    workflow: Any,
    predecessor: Any,
    *,
    wait: timedelta | int | float | None = None,
    clear_cursor: bool = False,
    cancel_stray: bool = True,
    publish: bool = True,
    limit_holds: Any = None,
) -> Any:
    """Create the execution that continues ``predecessor`` (R-SCH-08).

    The cursor is copied verbatim (no size check); ``clear_cursor`` starts the
    successor empty (rewind, R-EXT-26 / R-FC-13). ``cancel_stray``, ``publish``
    and ``limit_holds`` (the slots it holds from ``predecessor``, R-LIM-26) are
    passed to :func:`create_step_execution`.

    Raises:
        StepNotDefinedError: The predecessor's step has no definition any more.
    """
    step = workflow.steps.named(predecessor.step_name)
    if step is None:
        raise step_not_defined(workflow, predecessor.step_name)
    cursor = None if clear_cursor else predecessor.cursor
    return create_step_execution(
        session,
        workflow,
        step,
        wait=wait,
        continues_from=predecessor,
        cursor=cursor,
        cancel_stray=cancel_stray,
        publish=publish,
        limit_holds=limit_holds,
    )


def enqueue_scheduled_execution(
    session: orm.Session, workflow: Any, execution: Any
) -> None:
    """Publish an existing scheduled execution again (resume path, R-SCH-09).

    Future ``scheduled_for`` → eta at that time; past → immediately ("overdue").
    Creates no rows and keeps ``scheduled_for``, except inside
    :func:`~flask_geneva.policies.release_spread.spread_releases`, where a time earlier
    than the workflow's spread time moves to it (R-SCH-20).
    """
    step = workflow.steps.named(execution.step_name)
    options = workflow.job_options_for(step) if step is not None else {}
    context = context_of(session)
    now = clock.now()
    spread_to = _spread_time(workflow, now)
    if spread_to is not None and execution.scheduled_for < spread_to:
        execution.scheduled_for = spread_to
    publication = _prepare_publication(execution, options, now, context, step)
    _request(session, execution, publication, context)


def _spread_time(workflow: Any, now: datetime) -> datetime | None:
    """``now`` plus the workflow's release offset inside a spread block (R-SCH-20)."""
    window = release_spread.active_window()
    if window is None:
        return None
    return now + release_spread.release_offset(workflow.id, window)


def unregistered_type_hint(workflow: Any) -> str:
    """A hint when the row's ``type`` has no registered class, else ``""``."""
    if workflow.__geneva__.workflow_classes.get(workflow.type) is not None:
        return ""
    return (
        f" (no workflow class is registered for type {workflow.type!r}: it was "
        "renamed or removed; keep old rows working with a stable __geneva_type__)"
    )


def step_not_defined(workflow: Any, name: str | None) -> StepNotDefinedError:
    """Build the :class:`StepNotDefinedError` for a missing step ``name`` (R-EXE-24)."""
    defined = ", ".join(workflow.steps.names) or "(none)"
    error = StepNotDefinedError(
        f"Step '{name}' is not defined in {workflow.type}; defined steps: {defined}"
        + unregistered_type_hint(workflow),
        workflow_id=workflow.id,
        step_name=name,
    )
    error.workflow = workflow
    return error
