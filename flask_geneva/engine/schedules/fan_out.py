"""A fire's fan-out over its heroes, one batch per transaction (R-SCHED-22).

Each batch locks the fire row (``FOR UPDATE SKIP LOCKED`` where the database
has it: a second dispatcher moves on instead of waiting), reads the next
heroes after the stored cursor (:mod:`.heroes`), creates one workflow per hero
as ``create()`` would (R-WF-10..15), skipping a hero with an ongoing workflow
of the class (``DuplicateWorkflowError``, R-UNQ-01), stores the new cursor and
counts and commits. A process that dies mid-batch leaves the previous batch's
cursor; any later dispatcher run resumes from it.

A ``heroes`` callable (or its query) that raises, or a hero that is no hero,
ends the fire ``failed`` with the error recorded; the batches committed
before stay, and the schedule's next fire happens as usual (R-SCHED-25). A
database error in a batch (a deadlock, a lost connection, but also a
``heroes`` query the database refuses) rolls the batch back and is counted
on the fire: a later run tries the batch again, and the
:data:`BATCH_ATTEMPTS`-th failure in a row ends the fire ``failed``, so a
query that can never run does not stay ``running`` and take the other fires'
batch budget for ever (R-SCHED-27).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import error_reporting
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import schedules as rows
from flask_geneva.db.context import EngineContext
from flask_geneva.dsl.schedules import Schedule
from flask_geneva.engine import workflow_creation
from flask_geneva.engine.schedules.heroes import next_batch
from flask_geneva.exceptions import DuplicateWorkflowError

__all__ = [
    "BATCHES_PER_PASS",
    "BATCH_ATTEMPTS",
    "resume_unfinished_fires",
    "run_batch",
    "run_fire",
]

_log = module_logger("flask_geneva")

#: The most batches one dispatcher run works (over all fires): the rest waits
#: for the next run, so a huge fan-out never holds the dispatcher up for long.
BATCHES_PER_PASS = 50

#: How many times in a row a batch may fail with a database error before its
#: fire ends ``failed`` (R-SCHED-27).
BATCH_ATTEMPTS = 3

#: ``run_batch`` results.
FINISHED = "finished"
MORE = "more"
NOT_RUN = "not_run"


def resume_unfinished_fires(
    context: EngineContext,
    session: orm.Session,
    schedules: dict[str, Schedule],
    *,
    max_batches: int = BATCHES_PER_PASS,
) -> int:
    """Work the ``running`` fires of the declared schedules, oldest first.

    Args:
        context: The engine context (bound to ``session``).
        session: The dispatcher's session; left without a transaction.
        schedules: The declared schedules by name.
        max_batches: The most batches this call runs.

    Returns:
        The number of workflows created.
    """
    pending = rows.unfinished_fires(session, sorted(schedules), limit=max_batches)
    session.rollback()
    created = 0
    budget = max_batches
    for name, fire_at in pending:
        while budget > 0:
            budget -= 1
            outcome, started = run_batch(context, session, schedules[name], fire_at)
            created += started
            if outcome != MORE:
                break
    return created


def run_fire(
    context: EngineContext, session: orm.Session, schedule: Schedule, fire_at: datetime
) -> int:
    """Run every batch of one fire to its end (an operator's run now).

    Returns:
        The number of workflows created.
    """
    created = 0
    while True:
        outcome, started = run_batch(context, session, schedule, fire_at)
        created += started
        if outcome != MORE:
            return created


def run_batch(
    context: EngineContext, session: orm.Session, schedule: Schedule, fire_at: datetime
) -> tuple[str, int]:
    """Run the next batch of one fire in its own transaction (R-SCHED-22).

    Returns:
        ``(outcome, created)``: ``"more"`` when batches remain, ``"finished"``
        when the fire ended (done or failed), ``"not_run"`` when the fire is
        not running, another transaction holds it, or the database failed
        (rolled back and logged; a later run tries again); and the number of
        workflows created.
    """
    try:
        fire = rows.lock_fire(session, schedule.name, fire_at)
        if fire is None:
            session.rollback()
            return NOT_RUN, 0
        try:
            batch = next_batch(session, schedule, fire.hero_cursor)
            started, skipped = _create_workflows(session, schedule, batch.heroes)
        except sa_exc.SQLAlchemyError:
            raise
        except Exception as error:  # noqa: BLE001 - the user's heroes: recorded
            session.rollback()
            _fail_fire(context, session, schedule, fire_at, error)
            return FINISHED, 0
        now = clock.now()
        state = rows.FIRE_DONE if batch.last else rows.FIRE_RUNNING
        rows.record_fire_progress(
            session,
            schedule.name,
            fire_at,
            hero_cursor=batch.cursor,
            started=started,
            skipped=skipped,
            state=state,
            error=None,
            now=now,
        )
        if batch.last:
            rows.record_last_outcome(
                session, schedule.name, fire_at, rows.FIRE_DONE, None, now
            )
        session.commit()
    except sa_exc.SQLAlchemyError as error:
        session.rollback()
        return _count_failed_attempt(context, session, schedule, fire_at, error), 0
    except BaseException:
        # A worker's shutdown (SystemExit), an interrupt or a flow-control
        # signal out of ``heroes``: the batch's transaction (and on SQLite
        # its write lock) ends here; the fire stays running and resumes.
        session.rollback()
        raise
    context.run_queued_tasks()
    if batch.last:
        _log.info("schedule %r fired (%s): the fan-out is done", schedule.name, fire_at)
    return (FINISHED if batch.last else MORE), started


def _create_workflows(
    session: orm.Session, schedule: Schedule, heroes: list[Any]
) -> tuple[int, int]:
    """Create a workflow per hero in the batch's transaction; ``(started, skipped)``."""
    started = skipped = 0
    for hero in heroes:
        try:
            workflow_creation.create_workflow(
                session,
                schedule.workflow_class,
                hero=hero,
                allow_multiple=False,
                step_job_options=None,
                commit=False,
            )
        except DuplicateWorkflowError:
            skipped += 1
        else:
            started += 1
    return started, skipped


def _count_failed_attempt(
    context: EngineContext,
    session: orm.Session,
    schedule: Schedule,
    fire_at: datetime,
    error: sa_exc.SQLAlchemyError,
) -> str:
    """Count a batch's database error on its fire, in a transaction of its own.

    The count is kept in the fire's cursor (``"failures"``; a batch that
    commits writes a cursor without it) and the error in its ``error``
    column; the :data:`BATCH_ATTEMPTS`-th failure in a row ends the fire
    ``failed`` (R-SCHED-27). Returns ``"finished"`` then, else ``"not_run"``
    (also when the count itself cannot be written: the next run tries again).
    """
    text = f"{type(error).__name__}: {error}"
    try:
        fire = rows.lock_fire(session, schedule.name, fire_at)
        if fire is None:
            session.rollback()
            return NOT_RUN
        state = _cursor_state(fire.hero_cursor)
        failures = _failures(state) + 1
        if failures >= BATCH_ATTEMPTS:
            session.rollback()
            _fail_fire(context, session, schedule, fire_at, error)
            return FINISHED
        state["failures"] = failures
        rows.record_fire_progress(
            session,
            schedule.name,
            fire_at,
            hero_cursor=json.dumps(state),
            started=0,
            skipped=0,
            state=rows.FIRE_RUNNING,
            error=text,
            now=clock.now(),
        )
        session.commit()
    except sa_exc.SQLAlchemyError as again:
        session.rollback()
        _log.warning(
            "schedule %r: could not record the failed batch of the fire at %s: %s: %s",
            schedule.name,
            fire_at.isoformat(),
            type(again).__name__,
            again,
        )
        return NOT_RUN
    _log.warning(
        "schedule %r: a batch of the fire at %s failed (%d of %d attempts) and "
        "is tried again at the next dispatcher run: %s",
        schedule.name,
        fire_at.isoformat(),
        failures,
        BATCH_ATTEMPTS,
        text,
    )
    return NOT_RUN


def _cursor_state(cursor: str | None) -> dict[str, Any]:
    try:
        state = json.loads(cursor) if cursor else {}
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def _failures(state: dict[str, Any]) -> int:
    value = state.get("failures", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _fail_fire(
    context: EngineContext,
    session: orm.Session,
    schedule: Schedule,
    fire_at: datetime,
    error: Exception,
) -> None:
    """Record ``error`` on the fire and the schedule; the fire ends ``failed``."""
    text = f"{type(error).__name__}: {error}"
    _log_error(schedule, fire_at, error)
    error_reporting.report(
        context.settings.error_reporter,
        error,
        extra={"schedule": schedule.name, "fire_at": fire_at.isoformat()},
    )
    now = clock.now()
    if rows.lock_fire(session, schedule.name, fire_at) is None:
        session.rollback()
        return
    rows.record_fire_progress(
        session,
        schedule.name,
        fire_at,
        hero_cursor=None,
        started=0,
        skipped=0,
        state=rows.FIRE_FAILED,
        error=text,
        now=now,
    )
    rows.record_last_outcome(
        session, schedule.name, fire_at, rows.FIRE_FAILED, text, now
    )
    session.commit()


def _log_error(schedule: Schedule, fire_at: datetime, error: Exception) -> None:
    _log.error(
        "schedule %r: the fire at %s failed: %s: %s",
        schedule.name,
        fire_at.isoformat(),
        type(error).__name__,
        error,
        exc_info=error,
    )
