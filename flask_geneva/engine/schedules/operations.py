"""The operators' schedule actions and overview (R-SCHED-30..34).

Pause, resume and run now, for the CLI, the admin and code: each is one
transaction that locks the schedule row first (``FOR UPDATE``; on SQLite
``BEGIN IMMEDIATE``), checks the state it expects and refuses otherwise with
:class:`~flask_geneva.exceptions.InvalidStateError`; an undeclared name is a
:class:`~flask_geneva.exceptions.ScheduleNotFoundError` listing the declared
ones. Each action is recorded on the schedule's row in its own transaction
(who, when, via what: :data:`SCHEDULE_VIA`; R-SCHED-35) and logged.
:func:`schedule_overview` only reads.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import schedules as rows
from flask_geneva.db.context import EngineContext
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.dsl.schedules import Schedule
from flask_geneva.engine import traces
from flask_geneva.engine.operator_transaction import check_operator
from flask_geneva.engine.schedules.fan_out import run_fire
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import ScheduleNotFoundError
from flask_geneva.telemetry import tracing

__all__ = [
    "MAX_SCHEDULE_ACTIONS",
    "SCHEDULE_VIA",
    "RunNow",
    "ScheduleOverview",
    "pause_schedule",
    "recent_fires",
    "resume_schedule",
    "run_schedule_now",
    "schedule_overview",
]

_log = module_logger("flask_geneva")

#: The message of every action without the ``add_schedules`` unit (R-SCHED-50).
NO_UNIT_MESSAGE = (
    "the database has no schedules tables: install unit add_schedules "
    "(`flask geneva install`, then `flask db upgrade`)"
)
#: The operator actions a schedule's row keeps, the latest (R-SCHED-35).
MAX_SCHEDULE_ACTIONS = 100
#: Where an operator action on a schedule comes from (R-SCHED-35).
SCHEDULE_VIA = ("api", "admin", "cli")


@dataclasses.dataclass(frozen=True)
class ScheduleOverview:
    """One schedule as operators see it (R-SCHED-33).

    Attributes:
        schedule: The declaration.
        paused: Whether an operator paused it.
        next_fire_times: The next fire times (aware UTC), after now and after
            every time already decided; computed also while paused.
        last_fire_at: The latest fire's time, or None.
        last_outcome: ``running``, ``done`` or ``failed``, or None.
        last_error: The latest fire's error, or None.
        stored: Whether the schedule has a row yet (a dispatcher saw it).
        paused_at: Since when it is paused, or None.
        operator_actions: The latest operator actions, newest first, each
            ``{"action", "at", "actor", "via", "fire_at"}`` as stored
            (R-SCHED-35).
    """

    schedule: Schedule
    paused: bool
    next_fire_times: list[datetime]
    last_fire_at: datetime | None
    last_outcome: str | None
    last_error: str | None
    stored: bool
    paused_at: datetime | None = None
    operator_actions: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class RunNow:
    """What a run now did (R-SCHED-32).

    Attributes:
        fire_at: The fire's time (its key with the schedule's name).
        state: The fire's state after the call: ``running`` (left to the
            dispatcher), ``done`` or ``failed``.
        started: Workflows created.
        skipped: Heroes skipped (an ongoing workflow of the class).
        error: The recorded error of a failed fire, or None.
    """

    fire_at: datetime
    state: str
    started: int
    skipped: int
    error: str | None


def _declared(context: EngineContext, name: str) -> Schedule:
    schedules = context.models.schedules
    schedule: Schedule | None = schedules.get(name)
    if schedule is None:
        known = ", ".join(map(repr, schedules)) or "none"
        raise ScheduleNotFoundError(
            f"no schedule named {name!r} is declared (declared: {known})"
        )
    return schedule


def _record_action(
    session: orm.Session,
    row: rows.ScheduleRow,
    action: str,
    *,
    actor: str | None,
    via: str,
    now: datetime,
    fire_at: datetime | None = None,
) -> None:
    """Append the action to the row's list read under its lock (R-SCHED-35)."""
    entry = {
        "action": action,
        "at": now.isoformat(),
        "actor": actor,
        "via": via,
        "fire_at": None if fire_at is None else fire_at.isoformat(),
    }
    actions = [*row.operator_actions, entry][-MAX_SCHEDULE_ACTIONS:]
    rows.record_operator_actions(session, row.name, actions)


def _require_unit(session: orm.Session) -> None:
    if not optional_columns(session).schedules:
        session.rollback()
        raise GenevaError(NO_UNIT_MESSAGE)


def _locked_row(session: orm.Session, name: str, now: datetime) -> rows.ScheduleRow:
    """Lock the schedule's row, inserting it first when none exists yet."""
    row = rows.lock_schedule(session, name)
    if row is None:
        rows.insert_missing_schedule_rows(session, [name], now)
        row = rows.lock_schedule(session, name)
    assert row is not None  # noqa: S101 - just inserted under our transaction
    return row


def pause_schedule(
    context: EngineContext,
    session: orm.Session,
    name: str,
    *,
    actor: str | None = None,
    via: str = "api",
) -> None:
    """Pause a schedule: no fire time fires until it is resumed (R-SCHED-31).

    A fan-out already running goes on to its end.

    Args:
        context: The engine context.
        session: The session to work in (committed).
        name: The schedule's name.
        actor: Who asked (recorded, R-SCHED-35).
        via: ``"api"``, ``"cli"`` or ``"admin"`` (recorded).

    Raises:
        ValueError: ``via`` is none of those, or ``actor`` is neither None nor
            a str without NUL characters (nothing is written).
        ScheduleNotFoundError: No such schedule is declared.
        InvalidStateError: It is paused already.
        GenevaError: The ``add_schedules`` unit is not installed.
    """
    with _traced("pause", name, via):
        _set_paused(context, session, name, paused=True, actor=actor, via=via)


def resume_schedule(
    context: EngineContext,
    session: orm.Session,
    name: str,
    *,
    actor: str | None = None,
    via: str = "api",
) -> None:
    """Resume a paused schedule (R-SCHED-31).

    The fire times that passed while it was paused are not fired, whatever
    its ``missed`` policy: the next fire is its next time after now.

    Recorded with ``actor`` and ``via`` as :func:`pause_schedule` is.

    Raises:
        ValueError: A bad ``via`` or ``actor`` (nothing is written).
        ScheduleNotFoundError: No such schedule is declared.
        InvalidStateError: It is not paused.
        GenevaError: The ``add_schedules`` unit is not installed.
    """
    with _traced("resume", name, via):
        _set_paused(context, session, name, paused=False, actor=actor, via=via)


def _traced(action: str, name: str, via: str) -> Any:
    """The span of a schedule's operator action (R-OTEL-30)."""
    return traces.traced_action(
        f"geneva.operator schedule.{action}",
        attributes={
            tracing.ATTRIBUTES["action"]: f"schedule.{action}",
            tracing.ATTRIBUTES["via"]: via,
            tracing.ATTRIBUTES["schedule_name"]: name,
        },
    )


def _set_paused(
    context: EngineContext,
    session: orm.Session,
    name: str,
    *,
    paused: bool,
    actor: str | None,
    via: str,
) -> None:
    check_operator(via, actor, allowed=SCHEDULE_VIA)
    _declared(context, name)
    context.bind(session)
    _require_unit(session)
    now = clock.now()
    row = _locked_row(session, name, now)
    action, state = ("pause", "paused") if paused else ("resume", "not paused")
    if row.paused == paused or not rows.set_paused(
        session, name, paused=paused, now=now
    ):
        session.rollback()
        raise InvalidStateError(f"cannot {action} schedule {name!r}: it is {state}")
    _record_action(session, row, action, actor=actor, via=via, now=now)
    session.commit()
    _log.info(
        "schedule %r %s by %s via %s",
        name,
        "paused" if paused else "resumed",
        actor or "unknown",
        via,
    )


def run_schedule_now(
    context: EngineContext,
    session: orm.Session,
    name: str,
    *,
    process: bool = True,
    actor: str | None = None,
    via: str = "api",
) -> RunNow:
    """Fire a schedule now, outside its cron times (R-SCHED-32).

    Inserts a ``run_now`` fire at the current time (its own key: a cron time
    is still fired when it comes, and a paused schedule may be run now too).
    With ``process`` the fan-out runs here, batch by batch, to its end;
    without, the next dispatcher run does it (the admin's choice: a request
    never holds a long fan-out).

    Args:
        context: The engine context.
        session: The session to work in (committed).
        name: The schedule's name.
        process: Run the fan-out in this call.
        actor: Who asked (recorded with the fire's time, R-SCHED-35).
        via: ``"api"``, ``"cli"`` or ``"admin"`` (recorded).

    Raises:
        ValueError: A bad ``via`` or ``actor`` (nothing is written).
        ScheduleNotFoundError: No such schedule is declared.
        GenevaError: The ``add_schedules`` unit is not installed.
    """
    with _traced("run_now", name, via):
        return _run_now(context, session, name, process=process, actor=actor, via=via)


def _run_now(
    context: EngineContext,
    session: orm.Session,
    name: str,
    *,
    process: bool,
    actor: str | None,
    via: str,
) -> RunNow:
    check_operator(via, actor, allowed=SCHEDULE_VIA)
    schedule = _declared(context, name)
    context.bind(session)
    _require_unit(session)
    now = clock.now()
    row = _locked_row(session, name, now)
    fire_at = now
    while not rows.insert_fire(session, name, fire_at, "run_now", now):
        # Two runs now within one microsecond: the next free microsecond.
        fire_at += timedelta(microseconds=1)
    rows.record_last_fire(session, name, fire_at, now)
    _record_action(
        session, row, "run_now", actor=actor, via=via, now=now, fire_at=fire_at
    )
    session.commit()
    _log.info(
        "schedule %r run now (fire at %s) by %s via %s",
        name,
        fire_at.isoformat(),
        actor or "unknown",
        via,
    )
    if process:
        run_fire(context, session, schedule, fire_at)
    fire = _fire(session, name, fire_at)
    session.rollback()
    return RunNow(
        fire_at=fire_at,
        state=fire.state,
        started=fire.started,
        skipped=fire.skipped,
        error=fire.error,
    )


def _fire(session: orm.Session, name: str, fire_at: datetime) -> rows.FireRow:
    fire = rows.fire_row(session, name, fire_at)
    if fire is None:  # pragma: no cover - the fire was committed above
        raise GenevaError(f"the fire of {name!r} at {fire_at.isoformat()} is gone")
    return fire


def schedule_overview(
    context: EngineContext,
    session: orm.Session,
    *,
    count: int = 5,
    now: datetime | None = None,
) -> list[ScheduleOverview]:
    """Every declared schedule by name, with its next ``count`` fire times.

    Reads the schedule rows (one select, no lock) when the unit is installed;
    without it every schedule reads as never fired and not paused.

    Args:
        context: The engine context.
        session: The session to read with (left without a transaction).
        count: How many next fire times (0..100).
        now: The current time (default the clock).
    """
    context.bind(session)
    now = now if now is not None else clock.now()
    stored: dict[str, rows.ScheduleRow] = {}
    if optional_columns(session).schedules:
        stored = rows.schedule_rows(session)
    session.rollback()
    result = []
    for name, schedule in sorted(context.models.schedules.items()):
        row = stored.get(name)
        after = max(now, row.fire_after) if row is not None else now
        result.append(
            ScheduleOverview(
                schedule=schedule,
                paused=bool(row and row.paused),
                next_fire_times=schedule.fire_times_after(after, count),
                last_fire_at=row.last_fire_at if row else None,
                last_outcome=row.last_outcome if row else None,
                last_error=row.last_error if row else None,
                stored=row is not None,
                paused_at=row.paused_at if row else None,
                operator_actions=list(reversed(row.operator_actions)) if row else [],
            )
        )
    return result


def recent_fires(
    context: EngineContext, session: orm.Session, name: str, *, limit: int = 10
) -> list[Any]:
    """The latest ``limit`` fires of a declared schedule, newest first.

    Raises:
        ScheduleNotFoundError: No such schedule is declared.
    """
    _declared(context, name)
    context.bind(session)
    if not optional_columns(session).schedules:
        return []
    fires = rows.fire_rows(session, name, limit)
    session.rollback()
    return fires
