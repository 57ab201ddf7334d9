"""The schedule tables and every statement on them (SPEC §26, R-SCHED-10..13).

``geneva_drive_schedules`` holds one row per declared schedule (created by the
dispatcher the first time it sees the schedule):

* ``paused``: an operator paused it; ``paused_at`` since when;
* ``fire_after``: fire times at or before it are never fired (they were fired,
  skipped as missed, passed while paused, or lie before the schedule was first
  seen);
* ``last_fire_at``, ``last_outcome``, ``last_error``: the latest fire and how
  it ended (``running``, ``done`` or ``failed``);
* ``operator_actions``: the latest operators' pauses, resumes and runs now, a
  JSON list written in the action's transaction (R-SCHED-35).

``geneva_drive_schedule_fires`` holds one row per fire, with the primary key
``(schedule_name, fire_at)``: whoever inserts it fires that time, every other
dispatcher finds the key taken and does nothing (R-SCHED-20). Its ``state`` is
``running`` until the fan-out over the heroes is done; ``hero_cursor``,
``started`` and ``skipped`` are its progress, committed with each batch, so a
later dispatcher run resumes an unfinished fire (R-SCHED-22).

Lock order (R-SCHED-24): the firing transaction locks the schedule row and
inserts fire rows; a fan-out batch locks one fire row, then creates workflows
(their rows and first executions), and when it finishes updates the schedule
row last. Nothing locks a fire row while holding a workflow row.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db.column_types import ExactText
from flask_geneva.db.column_types import JSONDocument
from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.column_types import table_once
from flask_geneva.db.context import models_of
from flask_geneva.db.states import SCHEDULE_FIRES_TABLE
from flask_geneva.db.states import SCHEDULES_TABLE

__all__ = [
    "FIRE_DONE",
    "FIRE_FAILED",
    "FIRE_KINDS",
    "FIRE_RUNNING",
    "FireRow",
    "ScheduleRow",
    "advance_fire_after",
    "fire_row",
    "fire_rows",
    "hero_key_attribute",
    "heroes_after",
    "insert_fire",
    "insert_missing_schedule_rows",
    "lock_fire",
    "lock_schedule",
    "record_fire_progress",
    "record_last_fire",
    "record_last_outcome",
    "record_operator_actions",
    "schedule_fires_table",
    "schedule_rows",
    "schedules_table",
    "set_paused",
    "unfinished_fires",
]

#: A fire's states (R-SCHED-11).
FIRE_RUNNING = "running"
FIRE_DONE = "done"
FIRE_FAILED = "failed"
#: How a fire came about: its cron time on time, a missed time caught up, an
#: operator's run now (R-SCHED-11).
FIRE_KINDS = ("cron", "catch_up", "run_now")
#: The longest stored error text (characters).
MAX_ERROR_LENGTH = 2000


def schedules_table(metadata: sa.MetaData) -> sa.Table:
    """The schedules' state rows, defined once per metadata (R-SCHED-10)."""
    return table_once(
        metadata,
        SCHEDULES_TABLE,
        sa.Column("name", ExactText(255), primary_key=True),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("paused_at", UTCDateTime(), nullable=True),
        sa.Column("fire_after", UTCDateTime(), nullable=False),
        sa.Column("last_fire_at", UTCDateTime(), nullable=True),
        sa.Column("last_outcome", sa.String(16), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("operator_actions", JSONDocument().evaluates_none(), nullable=True),
    )


def schedule_fires_table(metadata: sa.MetaData) -> sa.Table:
    """The fires of the schedules, defined once per metadata (R-SCHED-10)."""
    return table_once(
        metadata,
        SCHEDULE_FIRES_TABLE,
        sa.Column("schedule_name", ExactText(255), primary_key=True),
        sa.Column("fire_at", UTCDateTime(), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("hero_cursor", sa.Text(), nullable=True),
        sa.Column("started", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("skipped", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Index("index_geneva_drive_schedule_fires_on_state", "state"),
    )


@dataclasses.dataclass(frozen=True)
class ScheduleRow:
    """One schedule's stored state, as read (R-SCHED-10)."""

    name: str
    paused: bool
    paused_at: datetime | None
    fire_after: datetime
    last_fire_at: datetime | None
    last_outcome: str | None
    last_error: str | None
    updated_at: datetime
    #: The latest operator actions, oldest first; ``[]`` when none (or the
    #: stored value is no JSON list) (R-SCHED-35).
    operator_actions: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class FireRow:
    """One fire, as read (R-SCHED-11)."""

    schedule_name: str
    fire_at: datetime
    kind: str
    state: str
    hero_cursor: str | None
    started: int
    skipped: int
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


def _tables(session: orm.Session) -> tuple[sa.Table, sa.Table]:
    tables = models_of(session).Workflow.metadata.tables
    return tables[SCHEDULES_TABLE], tables[SCHEDULE_FIRES_TABLE]


def _schedule_row(row: Any) -> ScheduleRow:
    values = {field: row[field] for field in _SCHEDULE_FIELDS}
    actions = values["operator_actions"]
    values["operator_actions"] = (
        [entry for entry in actions if isinstance(entry, dict)]
        if isinstance(actions, list)
        else []
    )
    return ScheduleRow(**values)


def _fire_row(row: Any) -> FireRow:
    return FireRow(**{field: row[field] for field in _FIRE_FIELDS})


_SCHEDULE_FIELDS = tuple(field.name for field in dataclasses.fields(ScheduleRow))
_FIRE_FIELDS = tuple(field.name for field in dataclasses.fields(FireRow))


def _skip_locked(session: orm.Session) -> bool:
    return session.get_bind().dialect.name in ("postgresql", "mysql", "mariadb")


def schedule_rows(session: orm.Session) -> dict[str, ScheduleRow]:
    """Every stored schedule row by name; a plain read, no lock (R-SCHED-10)."""
    table, _ = _tables(session)
    return {
        row["name"]: _schedule_row(row)
        for row in session.execute(sa.select(table)).mappings()
    }


def insert_missing_schedule_rows(
    session: orm.Session, names: list[str], now: datetime
) -> None:
    """Insert a row for each of ``names`` that has none, ``fire_after = now``.

    Each row in its own savepoint: a row another process inserted meanwhile is
    left as it is (the primary key refuses the second, R-SCHED-10). The caller
    commits.

    Args:
        session: The session to write in.
        names: Schedule names without a row when last read.
        now: The time the schedules are first seen (aware UTC).
    """
    table, _ = _tables(session)
    for name in names:
        try:
            with session.begin_nested():
                session.execute(
                    sa.insert(table).values(
                        name=name, paused=False, fire_after=now, updated_at=now
                    )
                )
        except sa.exc.IntegrityError:
            continue


def lock_schedule(
    session: orm.Session, name: str, *, skip_locked: bool = False
) -> ScheduleRow | None:
    """Lock and read one schedule row (``FOR UPDATE``), or None (R-SCHED-24).

    Args:
        session: The session whose transaction takes the lock.
        name: The schedule's name.
        skip_locked: Return None at once when another transaction holds the
            row (PostgreSQL, MySQL/MariaDB; SQLite serialises writers with
            ``BEGIN IMMEDIATE`` instead).
    """
    table, _ = _tables(session)
    query = sa.select(table).where(table.c.name == name)
    query = query.with_for_update(skip_locked=skip_locked and _skip_locked(session))
    row = session.execute(query).mappings().first()
    return None if row is None else _schedule_row(row)


def advance_fire_after(
    session: orm.Session, name: str, to: datetime, now: datetime
) -> None:
    """Move ``fire_after`` forward to ``to``, never back (R-SCHED-21).

    The caller holds the schedule row's lock and commits.
    """
    table, _ = _tables(session)
    session.execute(
        sa.update(table)
        .where(table.c.name == name)
        .values(
            fire_after=sa.case(
                (table.c.fire_after < to, sa.literal(to, UTCDateTime())),
                else_=table.c.fire_after,
            ),
            updated_at=now,
        )
    )


def record_last_fire(
    session: orm.Session, name: str, fire_at: datetime, now: datetime
) -> None:
    """Record ``fire_at`` as the schedule's last fire, outcome ``running``,
    unless a later fire is recorded already (R-SCHED-11).

    The caller holds the schedule row's lock and commits.
    """
    table, _ = _tables(session)
    session.execute(
        sa.update(table)
        .where(
            table.c.name == name,
            sa.or_(table.c.last_fire_at.is_(None), table.c.last_fire_at < fire_at),
        )
        .values(
            last_fire_at=fire_at,
            last_outcome=FIRE_RUNNING,
            last_error=None,
            updated_at=now,
        )
    )


def insert_fire(
    session: orm.Session, name: str, fire_at: datetime, kind: str, now: datetime
) -> bool:
    """Insert the fire ``(name, fire_at)``; False when it already exists (R-SCHED-20).

    In a savepoint of the caller's transaction: a duplicate key rolls back only
    the savepoint, so the caller's other writes stand. The primary key decides
    between processes: exactly one insert of a fire time succeeds.

    Args:
        session: The session to write in (the caller commits).
        name: The schedule's name.
        fire_at: The fire time (aware UTC).
        kind: One of :data:`FIRE_KINDS`.
        now: The current time.

    Returns:
        True when this call inserted the row.
    """
    _, fires = _tables(session)
    try:
        with session.begin_nested():
            session.execute(
                sa.insert(fires).values(
                    schedule_name=name,
                    fire_at=fire_at,
                    kind=kind,
                    state=FIRE_RUNNING,
                    started=0,
                    skipped=0,
                    created_at=now,
                    updated_at=now,
                )
            )
    except sa.exc.IntegrityError:
        return False
    return True


def unfinished_fires(
    session: orm.Session, names: list[str], limit: int
) -> list[tuple[str, datetime]]:
    """``(name, fire_at)`` of the ``running`` fires of ``names``, oldest first.

    A plain read along the state index (R-SCHED-22); each is then locked by
    :func:`lock_fire`.
    """
    if not names:
        return []
    _, fires = _tables(session)
    query = (
        sa.select(fires.c.schedule_name, fires.c.fire_at)
        .where(fires.c.state == FIRE_RUNNING, fires.c.schedule_name.in_(names))
        .order_by(fires.c.fire_at, fires.c.schedule_name)
        .limit(limit)
    )
    return [(str(name), fire_at) for name, fire_at in session.execute(query)]


def lock_fire(session: orm.Session, name: str, fire_at: datetime) -> FireRow | None:
    """Lock and read a ``running`` fire, or None when it is not running or another
    transaction holds it (``SKIP LOCKED`` where the database has it, R-SCHED-22).
    """
    _, fires = _tables(session)
    query = (
        sa.select(fires)
        .where(
            fires.c.schedule_name == name,
            fires.c.fire_at == fire_at,
            fires.c.state == FIRE_RUNNING,
        )
        .with_for_update(skip_locked=_skip_locked(session))
    )
    row = session.execute(query).mappings().first()
    return None if row is None else _fire_row(row)


def record_fire_progress(
    session: orm.Session,
    name: str,
    fire_at: datetime,
    *,
    hero_cursor: str | None,
    started: int,
    skipped: int,
    state: str,
    error: str | None,
    now: datetime,
) -> None:
    """Write one batch's progress: the cursor, the counts added, the state.

    Guarded by ``state = 'running'`` (R-DM-40); the caller holds the fire's
    lock (:func:`lock_fire`) and commits.

    Args:
        session: The session to write in.
        name: The schedule's name.
        fire_at: The fire time.
        hero_cursor: Where the next batch starts (JSON text), or None.
        started: Workflows this batch created (added to the count).
        skipped: Heroes this batch skipped (added to the count).
        state: :data:`FIRE_RUNNING`, :data:`FIRE_DONE` or :data:`FIRE_FAILED`.
        error: The error text of a failed fire (cut to 2,000 characters).
        now: The current time (``finished_at`` of a fire that ends).
    """
    _, fires = _tables(session)
    values: dict[str, Any] = {
        "hero_cursor": hero_cursor,
        "started": fires.c.started + started,
        "skipped": fires.c.skipped + skipped,
        "state": state,
        "updated_at": now,
    }
    if error is not None:
        values["error"] = error[:MAX_ERROR_LENGTH]
    if state != FIRE_RUNNING:
        values["finished_at"] = now
    session.execute(
        sa.update(fires)
        .where(
            fires.c.schedule_name == name,
            fires.c.fire_at == fire_at,
            fires.c.state == FIRE_RUNNING,
        )
        .values(**values)
    )


def record_last_outcome(
    session: orm.Session,
    name: str,
    fire_at: datetime,
    outcome: str,
    error: str | None,
    now: datetime,
) -> None:
    """Set the schedule's last outcome, if ``fire_at`` is still its last fire.

    One guarded ``UPDATE`` (``last_fire_at = fire_at``): a later fire already
    recorded keeps its own outcome. The caller commits (R-SCHED-11).
    """
    table, _ = _tables(session)
    session.execute(
        sa.update(table)
        .where(table.c.name == name, table.c.last_fire_at == fire_at)
        .values(
            last_outcome=outcome,
            last_error=None if error is None else error[:MAX_ERROR_LENGTH],
            updated_at=now,
        )
    )


def record_operator_actions(
    session: orm.Session, name: str, actions: list[dict[str, Any]]
) -> None:
    """Store the schedule's operator actions, the list as given (R-SCHED-35).

    The caller holds the row's lock (it read the list under it, appended and
    cut it) and commits, in the transaction of the action itself.
    """
    table, _ = _tables(session)
    session.execute(
        sa.update(table).where(table.c.name == name).values(operator_actions=actions)
    )


def set_paused(
    session: orm.Session,
    name: str,
    *,
    paused: bool,
    now: datetime,
) -> bool:
    """Pause or resume a schedule: one ``UPDATE`` guarded by the opposite flag.

    Resuming moves ``fire_after`` to ``now``: the times passed while paused are
    not fired (R-SCHED-31). The caller holds the row's lock and commits.

    Returns:
        Whether the row changed (False: it was already so).
    """
    table, _ = _tables(session)
    values: dict[str, Any] = {"paused": paused, "updated_at": now}
    if paused:
        values["paused_at"] = now
    else:
        values["paused_at"] = None
        values["fire_after"] = sa.case(
            (table.c.fire_after < now, sa.literal(now, UTCDateTime())),
            else_=table.c.fire_after,
        )
    result = session.execute(
        sa.update(table)
        .where(table.c.name == name, table.c.paused == (not paused))
        .values(**values)
    )
    return bool(getattr(result, "rowcount", 0))


def fire_row(session: orm.Session, name: str, fire_at: datetime) -> FireRow | None:
    """One fire by its key, or None; a plain read."""
    _, fires = _tables(session)
    query = sa.select(fires).where(
        fires.c.schedule_name == name, fires.c.fire_at == fire_at
    )
    row = session.execute(query).mappings().first()
    return None if row is None else _fire_row(row)


def fire_rows(session: orm.Session, name: str, limit: int) -> list[FireRow]:
    """The latest ``limit`` fires of a schedule, newest first; a plain read."""
    _, fires = _tables(session)
    query = (
        sa.select(fires)
        .where(fires.c.schedule_name == name)
        .order_by(fires.c.fire_at.desc())
        .limit(limit)
    )
    return [_fire_row(row) for row in session.execute(query).mappings()]


def hero_key_attribute(query: Any) -> Any:
    """The primary key attribute of the one mapped class ``query`` selects, or
    None (no single mapped class, a column rather than the class, or a
    composite key) (R-SCHED-22).

    Args:
        query: A ``Select`` or ORM ``Query`` a schedule's ``heroes`` returned.
    """
    descriptions = query.column_descriptions
    entity = descriptions[0].get("entity") if len(descriptions) == 1 else None
    if entity is not None and descriptions[0].get("type") is not entity:
        return None  # a column of the class (select(User.id)), not the class
    mapper = sa.inspect(entity, raiseerr=False) if entity is not None else None
    if not isinstance(mapper, orm.Mapper) or len(mapper.primary_key) != 1:
        return None
    column = mapper.primary_key[0]
    return getattr(mapper.class_, mapper.get_property_by_column(column).key)


def heroes_after(
    session: orm.Session, query: Any, key: Any, after: Any, limit: int
) -> list[Any]:
    """The heroes of the user's ``query`` with ``key > after``, by ``key``.

    The query's own order is replaced by the key order (keyset batches,
    R-SCHED-22); an ORM ``Query`` runs in ``session``.

    Args:
        session: The fan-out batch's session.
        query: A ``Select`` or ORM ``Query`` of one mapped class.
        key: That class's primary key attribute (:func:`hero_key_attribute`).
        after: The last key done, or None for the first batch.
        limit: The most rows to read.
    """
    if isinstance(query, orm.Query):
        query = query.with_session(session)
        if after is not None:
            query = query.filter(key > after)
        return list(query.order_by(None).order_by(key).limit(limit).all())
    if after is not None:
        query = query.where(key > after)
    return list(session.scalars(query.order_by(None).order_by(key).limit(limit)))
