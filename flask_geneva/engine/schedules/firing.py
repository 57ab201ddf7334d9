"""Which fire times fire, decided once per schedule and time (R-SCHED-20, R-SCHED-23).

Each dispatcher run (:func:`fire_schedules`, called by
:func:`flask_geneva.engine.operators.dispatcher.run_dispatcher`) reads the
schedule rows (one plain select), inserts the rows of schedules seen for the
first time (``fire_after`` = now: a new schedule fires no past time), and for
each schedule that has a fire time in ``(fire_after, now]`` runs one short
transaction: lock the schedule row (``SKIP LOCKED``: a dispatcher that finds it
taken leaves it to the one holding it), decide the fires by the ``missed``
policy, insert their rows (the primary key ``(schedule_name, fire_at)`` lets
exactly one insert of a time succeed) and move ``fire_after`` past every time
decided. The fan-out then runs batch by batch (:mod:`.fan_out`).
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime
from datetime import timedelta

from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import schedules as rows
from flask_geneva.db.context import EngineContext
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.dsl.schedules import MAX_CATCH_UP
from flask_geneva.dsl.schedules import Schedule
from flask_geneva.dsl.schedules import late_tolerance
from flask_geneva.engine.schedules.fan_out import BATCHES_PER_PASS
from flask_geneva.engine.schedules.fan_out import resume_unfinished_fires

__all__ = ["FiringPass", "choose_fires", "fire_schedule", "fire_schedules"]

_log = module_logger("flask_geneva")
_warned_without_unit: set[int] = set()
_warn_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class FiringPass:
    """What one dispatcher run did for the schedules (R-SCHED-20).

    Attributes:
        fired: Fires inserted (fire times taken by this run).
        started: Workflows created by the fan-out batches this run worked.
    """

    fired: int = 0
    started: int = 0


def fire_schedules(
    context: EngineContext,
    session: orm.Session,
    *,
    now: datetime | None = None,
    max_batches: int = BATCHES_PER_PASS,
) -> FiringPass:
    """Fire the due times of the declared schedules and work unfinished fires.

    Part of every dispatcher run (R-SCHED-20). Without the ``add_schedules``
    install unit nothing is read and a warning says so once per process
    (R-SCHED-50). A database error on one schedule is logged and that
    schedule is tried again by the next run; the others go on.

    Args:
        context: The engine context (bound to ``session``).
        session: The dispatcher's session; left without a transaction.
        now: The current time (default :func:`flask_geneva.core.clock.now`).
        max_batches: The most fan-out batches this call runs.

    Returns:
        The counts of the pass.
    """
    schedules = dict(context.models.schedules)
    context.bind(session)
    if not schedules or not _installed(session):
        return FiringPass()
    now = now if now is not None else clock.now()
    stored = rows.schedule_rows(session)
    missing = [name for name in schedules if name not in stored]
    if missing:
        rows.insert_missing_schedule_rows(session, missing, now)
        session.commit()
        stored = rows.schedule_rows(session)
    session.rollback()
    tolerance = late_tolerance(context.settings.dispatch_interval)
    fired = 0
    for name, schedule in schedules.items():
        row = stored.get(name)
        if row is None or row.paused:
            continue
        due, _ = schedule.due_times(_fired_until(row), now, 1)
        if not due:
            continue
        try:
            fired += fire_schedule(session, schedule, now, tolerance)
        except sa_exc.SQLAlchemyError as error:
            session.rollback()
            _log.warning(
                "schedule %r could not fire; the next dispatcher run tries "
                "again: %s: %s",
                name,
                type(error).__name__,
                error,
            )
    started = resume_unfinished_fires(
        context, session, schedules, max_batches=max_batches
    )
    return FiringPass(fired=fired, started=started)


def fire_schedule(
    session: orm.Session, schedule: Schedule, now: datetime, tolerance: timedelta
) -> int:
    """Decide and insert one schedule's fires in one transaction (R-SCHED-20).

    Returns:
        The number of fire rows this call inserted (0 when another dispatcher
        holds the schedule row or already fired the times).
    """
    row = rows.lock_schedule(session, schedule.name, skip_locked=True)
    if row is None or row.paused:
        session.rollback()
        return 0
    due, more = schedule.due_times(_fired_until(row), now, MAX_CATCH_UP)
    if not due:
        session.rollback()
        return 0
    chosen = choose_fires(schedule.missed, due, now, tolerance)
    inserted = 0
    for fire_at, kind in chosen:
        if rows.insert_fire(session, schedule.name, fire_at, kind, now):
            inserted += 1
    if inserted:
        rows.record_last_fire(session, schedule.name, chosen[-1][0], now)
    rows.advance_fire_after(session, schedule.name, due[0], now)
    session.commit()
    fired_times = {fire_at for fire_at, _kind in chosen}
    passed = [moment for moment in due if moment not in fired_times]
    if passed or more:
        # ``due`` is newest first: ``passed[0]`` is the latest time not fired.
        _log.info(
            "schedule %r (missed=%r): %s%d missed fire times not fired%s",
            schedule.name,
            schedule.missed,
            "more than " if more else "",
            len(passed),
            f", the latest {passed[0].isoformat()}" if passed else "",
        )
    return inserted


def choose_fires(
    missed: str, due: list[datetime], now: datetime, tolerance: timedelta
) -> list[tuple[datetime, str]]:
    """The fires to insert from the due times (newest first), oldest first.

    The newest due time is on time when it is at most ``tolerance`` old
    (:func:`flask_geneva.dsl.schedules.late_tolerance`); every other due time
    was missed. ``"skip"`` fires only an on-time time; ``"latest"`` fires the
    newest time (a ``catch_up`` fire when it was missed); ``"all"`` fires
    every due time given (at most :data:`MAX_CATCH_UP`), oldest first
    (R-SCHED-23).

    Returns:
        ``(fire_at, kind)`` pairs, kind ``"cron"`` or ``"catch_up"``.
    """
    newest = due[0]
    on_time = now - newest <= tolerance
    newest_kind = "cron" if on_time else "catch_up"
    if missed == "skip":
        return [(newest, "cron")] if on_time else []
    if missed == "latest":
        return [(newest, newest_kind)]
    older = [(moment, "catch_up") for moment in reversed(due[1:])]
    return [*older, (newest, newest_kind)]


def _fired_until(row: rows.ScheduleRow) -> datetime:
    """Fire times at or before this are decided (fired, skipped or passed);
    an operator's run now decides none (R-SCHED-32)."""
    return row.fire_after


def _installed(session: orm.Session) -> bool:
    """Whether the ``add_schedules`` unit is installed; warns once if not."""
    try:
        present = optional_columns(session).schedules
    except sa_exc.SQLAlchemyError as error:
        session.rollback()
        _log.warning("could not detect the schedules tables: %s", error)
        return False
    if not present:
        engine_id = id(session.get_bind())
        with _warn_lock:
            first = engine_id not in _warned_without_unit
            _warned_without_unit.add(engine_id)
        if first:
            _log.warning(
                "schedules are declared but not fired: the database has no "
                "schedules tables (install unit add_schedules: run `flask "
                "geneva install`, then `flask db upgrade`)"
            )
    return present
