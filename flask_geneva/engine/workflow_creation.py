"""Creating a workflow: its checks, its insert under the one-ongoing rule, its
first step and its commit (SPEC §3, R-WF-10..15, R-UNQ-01..06).

:func:`create_workflow` is what ``Workflow.create()`` runs; children
(``engine/children/start.py``) and signal-started heroes build on
:func:`new_workflow` and :func:`schedule_first_step`. The first step's
execution and its publication are :mod:`flask_geneva.engine.scheduling`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import log_fields
from flask_geneva.core import transactions
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.core.tagged_logging import workflow_log_fields
from flask_geneva.db import connection_timeouts
from flask_geneva.db import deadlines as deadline_rows
from flask_geneva.db.context import context_of
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.dsl import deadlines as deadline_values
from flask_geneva.engine import metric_events
from flask_geneva.engine import scheduling
from flask_geneva.engine import traces
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import DatabaseUnavailableError
from flask_geneva.exceptions import DuplicateWorkflowError
from flask_geneva.exceptions import GenevaError
from flask_geneva.telemetry import tracing
from flask_geneva.telemetry.tracing import CreateTrace

__all__ = [
    "CREATE_ATTEMPTS",
    "DUPLICATE_MESSAGE",
    "create_workflow",
    "database_unavailable",
    "duplicate_error",
    "is_unique_ongoing_violation",
    "new_workflow",
    "schedule_first_step",
]

_log = module_logger("flask_geneva")

DUPLICATE_MESSAGE = "An ongoing workflow of this type already exists for this hero"


#: Attempts of a ``create()`` whose own transaction the database aborted with a
#: deadlock or serialization failure (issue 13).
CREATE_ATTEMPTS = 3


def create_workflow(
    session: orm.Session,
    workflow_cls: Any,
    *,
    hero: Any,
    allow_multiple: bool,
    step_job_options: Mapping[str, Any] | None,
    commit: bool,
    deadline: datetime | timedelta | None = None,
) -> Any:
    """Insert a workflow and schedule its first step (R-WF-10..15, R-UNQ-01..06).

    ``deadline`` (an aware datetime or a positive timedelta from now, R-DL-02)
    is stored in ``deadline_at``; None takes the class's
    ``__geneva_deadline__`` (R-DL-01), if any.

    Inside a transaction the caller began explicitly (``with session.begin():``
    or a savepoint) the insert joins it and nothing is committed, whatever
    ``commit`` says: the publication waits for the caller's commit (R-TXN-02).

    Raises:
        DuplicateWorkflowError: From the model-level check or the unique index; the
            insert is rolled back (to a savepoint) and nothing is published.
        sqlalchemy.exc.DBAPIError: The database aborted the transaction with a
            deadlock or serialization failure, raised as itself: after
            :data:`CREATE_ATTEMPTS` tries when the transaction was this call's
            own, at once when it held the caller's work too.
        TypeError: ``allow_multiple`` is not a bool; ``hero`` is None and the
            class does not set ``may_proceed_without_hero`` (R-HERO-06); or
            ``hero`` is not a saved mapped instance (R-HERO-01); ``deadline``
            is neither a datetime nor a duration.
        ValueError: ``deadline`` is naive, not in the future or not positive
            (R-DL-02).
        GenevaError: A deadline applies and the ``add_workflow_deadlines``
            unit is missing (R-DL-50); nothing is written.
        DatabaseUnavailableError: The connection failed: the server refused
            it, or it gave no answer within the connection's timeouts
            (``GENEVA_CONNECTION_TIMEOUT``, a network cut). Nothing was written,
            unless ``outcome_unknown`` (the COMMIT itself failed). The session
            was rolled back when this call owned its commit (R-FLT-50..53).
    """
    if "__geneva_type__" not in workflow_cls.__dict__:
        raise TypeError(
            f"create() must be called on a workflow class declared with "
            f"`class MyWorkflow(geneva.Workflow)`, not on {workflow_cls.__name__}"
        )
    if not isinstance(allow_multiple, bool):
        raise TypeError(f"allow_multiple must be True or False, got {allow_multiple!r}")
    if hero is None and not workflow_cls.may_proceed_without_hero:
        # Created, it would be canceled by its first step (R-EXE-13).
        raise TypeError(
            f"a {workflow_cls.__name__} workflow needs a hero: pass hero=<a saved "
            "model instance>, or set may_proceed_without_hero = True on "
            f"{workflow_cls.__name__} for a workflow without one (R-HERO-06)"
        )
    owns_commit = commit and not transactions.caller_began_transaction(session)
    try:
        deadline_at = _deadline_at(session, workflow_cls, deadline)
        with tracing.ending(traces.start_create(workflow_cls)) as traced:  # R-OTEL-10
            return _create_workflow(
                session,
                workflow_cls,
                hero,
                allow_multiple,
                step_job_options,
                commit,
                deadline_at,
                traced,
            )
    except sa_exc.DBAPIError as error:
        if not connection_timeouts.connection_failure(error):
            raise
        raise database_unavailable(
            session, workflow_cls, error, owns_commit=owns_commit
        ) from error


def _create_workflow(
    session: orm.Session,
    workflow_cls: Any,
    hero: Any,
    allow_multiple: bool,
    step_job_options: Mapping[str, Any] | None,
    commit: bool,
    deadline_at: datetime | None,
    traced: CreateTrace | None,
) -> Any:
    """:func:`create_workflow`'s insert, retries and commit, its checks done;
    ``traced`` is its create span (R-OTEL-10), named on the row."""
    trace_context = traces.trace_context_to_store(session, traced)
    joined = transactions.caller_began_transaction(session)
    # A retry is safe only when the aborted transaction held nothing but this
    # call's rows: none was open and nothing of the caller's waited to be flushed.
    retry_safe = (
        commit
        and not session.in_transaction()
        and not (session.new or session.deleted or session.dirty)
    )
    attempt = 1
    while True:
        workflow = new_workflow(
            workflow_cls,
            hero,
            allow_multiple,
            step_job_options,
            deadline_at,
            trace_context=trace_context,
        )
        try:
            _insert_workflow(session, workflow)
        except sa_exc.SQLAlchemyError as error:
            conflict = transactions.transaction_conflict(error)
            if conflict is None:
                raise
            if conflict is not error or retry_safe:
                # MySQL/MariaDB aborted the whole transaction and the savepoint
                # with it: the session starts over, as the database did.
                session.rollback()
            if retry_safe and attempt < CREATE_ATTEMPTS:
                attempt += 1
                workflow.logger.info(
                    "retrying create after %s (attempt %d of %d)",
                    conflict.orig,
                    attempt,
                    CREATE_ATTEMPTS,
                )
                continue
            if conflict is error:
                raise
            # Never reported as the failed ROLLBACK TO SAVEPOINT that hid it.
            raise conflict from None
        break
    traces.created(traced, workflow)
    if commit and not joined:
        # The records of its commit and first publication name it (R-OLOG-02).
        with log_fields.logging_about(workflow_log_fields(workflow)):
            try:
                session.commit()
            except sa_exc.DBAPIError as error:
                if not connection_timeouts.connection_failure(error):
                    raise
                raise database_unavailable(
                    session, workflow_cls, error, owns_commit=True, in_commit=True
                ) from error
            context_of(session).run_queued_tasks()
    return workflow


def database_unavailable(
    session: orm.Session,
    workflow_cls: Any,
    error: sa_exc.DBAPIError,
    *,
    owns_commit: bool,
    in_commit: bool = False,
) -> DatabaseUnavailableError:
    """The error of a ``create()`` whose connection failed (R-FLT-50..53).

    Rolls ``session`` back first when the call owned its commit (the
    transaction it would have committed died with its connection), so the
    session can be used again; otherwise the caller's transaction is left to
    the caller, and the message says to roll it back.

    Args:
        session: The session ``create()`` ran in.
        workflow_cls: The workflow class being created.
        error: SQLAlchemy's error (see
            :func:`~flask_geneva.db.connection_timeouts.connection_failure`).
        owns_commit: ``create()`` was to commit the session itself.
        in_commit: The COMMIT failed: the outcome is unknown.
    """
    if owns_commit:
        try:
            session.rollback()
        except sa_exc.SQLAlchemyError as rollback_error:  # never hide the cause
            _log.debug("rollback after a failed connection failed: %s", rollback_error)
    timeout = context_of(session).settings.connection_timeout
    bound = (
        f"GENEVA_CONNECTION_TIMEOUT is {timeout.total_seconds():g} s"
        if timeout is not None
        else "GENEVA_CONNECTION_TIMEOUT is None: the engine's own timeouts apply"
    )
    if in_commit:
        outcome = (
            "the COMMIT got no answer, so the workflow may or may not be stored: "
            "look it up before creating it again"
        )
    elif owns_commit:
        outcome = "nothing was written and the session was rolled back"
    else:
        outcome = (
            "nothing was written; the session's transaction lost its connection: "
            "roll it back"
        )
    return DatabaseUnavailableError(
        f"could not create a {workflow_cls.__name__} workflow: the database "
        f"refused the connection or stopped answering "
        f"({connection_timeouts.describe_failure(error)}); {outcome} ({bound}; "
        "R-FLT-50)",
        outcome_unknown=in_commit,
    )


def _deadline_at(
    session: orm.Session, workflow_cls: Any, deadline: datetime | timedelta | None
) -> datetime | None:
    """The new workflow's ``deadline_at`` (R-DL-01/02), refused without the unit."""
    now = clock.now()
    if deadline is not None:
        moment: datetime | None = deadline_values.deadline_at(deadline, now=now)
    else:
        declared = workflow_cls.__geneva_definitions__.deadline
        moment = now + declared if declared is not None else None
    if moment is not None and not deadline_rows.installed(session):
        raise GenevaError(
            f"{workflow_cls.__name__} has a deadline, but "
            f"{deadline_rows.NOT_INSTALLED_MESSAGE}"
        )
    return moment


def new_workflow(
    workflow_cls: Any,
    hero: Any,
    allow_multiple: bool,
    step_job_options: Mapping[str, Any] | None,
    deadline_at: datetime | None = None,
    *,
    trace_context: str | None = None,
) -> Any:
    """A new ``ready`` workflow of ``workflow_cls`` for ``hero``, not added to a
    session (R-WF-01, R-WF-15); :func:`schedule_first_step` follows its insert.
    ``deadline_at`` and ``trace_context`` (the creating span's, R-OTEL-20) are
    stored when not None (the caller checked their units)."""
    workflow = workflow_cls()
    workflow.hero = hero
    workflow.allow_multiple = allow_multiple
    if deadline_at is not None:
        workflow.deadline_at = deadline_at
    if trace_context is not None:
        workflow.trace_context = trace_context
    transitions.apply(transitions.CREATE, clock.now(), workflow=workflow)
    if step_job_options:
        # Validated and stored before the first step is scheduled (R-WF-15).
        workflow.step_job_options = step_job_options
    return workflow


def _insert_workflow(session: orm.Session, workflow: Any) -> None:
    if not workflow.allow_multiple:
        existing_id = _ongoing_duplicate(session, workflow)
        if existing_id is not None:
            raise duplicate_error(workflow, existing_id)
    try:
        with session.begin_nested():
            session.add(workflow)
            session.flush()
            schedule_first_step(session, workflow)
            session.flush()
    except sa_exc.IntegrityError as error:
        if is_unique_ongoing_violation(error):
            raise duplicate_error(workflow, None) from error
        raise


def schedule_first_step(session: orm.Session, workflow: Any) -> None:
    """Schedule the first step of a just-inserted workflow, or finish it
    without steps (R-WF-11..13)."""
    steps = workflow.steps
    workflow.logger.info("created with %d steps", len(steps))
    metric_events.workflow_created(workflow)  # R-OMET-12
    first = steps.next_after(None)
    if first is None:
        # A workflow without steps is finished at once (R-WF-12).
        transitions.apply(transitions.FINISH_EMPTY, clock.now(), workflow=workflow)
        return
    # A brand-new workflow has no executions to cancel (R-SCH-03). Skipping that
    # UPDATE matters on MySQL/MariaDB: it found no row and so locked the gap at the
    # end of the workflow_id index, where two concurrent creates then both waited
    # to insert their first execution (an InnoDB deadlock, issue 13).
    scheduling.create_step_execution(
        session, workflow, first, wait=first.wait, cancel_stray=False
    )


def _ongoing_duplicate(session: orm.Session, workflow: Any) -> Any:
    # Mirrors the unique index; NULL heroes compare equal here (R-UNQ-06).
    return engine_queries.ongoing_duplicate_id(
        session,
        workflow.__geneva__.Workflow,
        workflow.__geneva_type__,
        workflow.hero_type,
        workflow.hero_id,
    )


def duplicate_error(workflow: Any, existing_id: Any) -> DuplicateWorkflowError:
    """The error of a workflow that breaks the one-ongoing rule (R-UNQ-02)."""
    # The spec's sentence first (R-UNQ-02), then what clashed with what.
    found = f" (workflow {existing_id})" if existing_id is not None else ""
    return DuplicateWorkflowError(
        f"{DUPLICATE_MESSAGE}: {workflow.__geneva_type__} for hero "
        f"{workflow.hero_type}#{workflow.hero_id}{found}"
    )


def is_unique_ongoing_violation(error: sa_exc.IntegrityError) -> bool:
    """Whether ``error`` is the unique-ongoing index refusing a row (R-UNQ-03)."""
    text = str(error.orig)
    return "unique_ongoing" in text or (
        "UNIQUE constraint failed" in text and "geneva_drive_workflows.type" in text
    )
