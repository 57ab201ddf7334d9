"""The UPDATE statements on geneva's two tables, each state change guarded.

Every UPDATE that changes ``state`` carries ``AND state = :expected``, the state
the row held when it was read under its lock (R-DM-40). ``RETURNING`` counts the
rows written where the dialect has it (PostgreSQL, SQLite), the matched-row
count elsewhere (MySQL/MariaDB, whose driver reports matched rows). A row in
another state is refused with :class:`~flask_geneva.exceptions.StateConflictError`
and a row that is gone with SQLAlchemy's ``StaleDataError``; the caller rolls
the transaction back.

An execution's and its own workflow's change go out as one statement: a
data-modifying CTE on PostgreSQL, a multiple-table UPDATE on MySQL/MariaDB.
On PostgreSQL the UPDATEs written just before a new execution's INSERT go out
with that INSERT as one statement, the INSERT reading from the UPDATEs'
``RETURNING`` so that it runs only once every UPDATE matched its row
(:func:`update_rows_and_insert`, R-EXE-79); an optimistic finalize's statement
is guarded instead by what the claim committed (:class:`OptimisticGuards`,
R-EXE-81). Statements are built once per table and set of columns.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm.exc import StaleDataError

from flask_geneva.db import counter_releases
from flask_geneva.exceptions import StateConflictError

__all__ = [
    "OPTIMISTIC_GUARDS",
    "UNGUARDED",
    "OptimisticGuards",
    "OptimisticWriteRefused",
    "RowUpdate",
    "clear_statements",
    "merges_with_insert",
    "update_rows",
    "update_rows_and_insert",
]

#: ``RowUpdate.expected_state`` of an UPDATE that leaves ``state`` alone.
UNGUARDED: Any = object()

#: ``Session.info`` key of the :class:`OptimisticGuards` an optimistic finalize
#: set for the next INSERT of a step execution (R-EXE-81).
OPTIMISTIC_GUARDS = "geneva_optimistic_guards"

_statements: dict[tuple[Any, ...], Any] = {}
_statements_lock = threading.Lock()


def clear_statements() -> None:
    """Forget the built statements (after a schema change)."""
    with _statements_lock:
        _statements.clear()


@dataclasses.dataclass
class RowUpdate:
    """One row's UPDATE.

    Attributes:
        table: The table (``geneva_drive_workflows`` or ``..._step_executions``).
        row: ``"workflow"`` or ``"step execution"`` (named in errors).
        row_id: The primary key.
        values: ``{column name: new value}``.
        expressions: Column names set to their own SQL ``onupdate`` expression.
        expected_state: The state read under the lock, required when ``values``
            changes ``state``; :data:`UNGUARDED` otherwise.
        workflow_id: For a step execution, its workflow's primary key.
    """

    table: sa.Table
    row: str
    row_id: Any
    values: dict[str, Any]
    expressions: tuple[str, ...] = ()
    expected_state: Any = UNGUARDED
    workflow_id: Any = None

    @property
    def guarded(self) -> bool:
        """Whether the UPDATE carries ``AND state = :expected``."""
        return self.expected_state is not UNGUARDED


class OptimisticWriteRefused(Exception):
    """An optimistic finalize's writes were not sent, or its guard failed (R-EXE-81).

    Raised before any statement when the pending writes are not the shape the
    guarded statement handles, or after it when the guard matched no row (the
    workflow or the execution changed since the claim, or the hero is gone):
    nothing was written that the caller's rollback does not undo. Finalize
    rolls back and takes the locked path.
    """


@dataclasses.dataclass
class OptimisticGuards:
    """What an optimistic finalize's statement checks instead of a lock (R-EXE-81).

    Each row must still hold the state and the ``updated_at`` it held when it
    was claimed (every write of a geneva row, geneva's own and an ORM flush
    alike, sets ``updated_at``), and, for an inline claim that needs its hero,
    the hero row must exist.

    Attributes:
        workflow_id: The workflow's primary key.
        workflow_state: The state the workflow held at the claim (``performing``).
        workflow_version: Its ``updated_at`` then.
        execution_id: The finished execution's primary key.
        execution_state: Its state then (``in_progress``).
        execution_version: Its ``updated_at`` then.
        hero: ``(hero class, hero id)`` whose row must exist, or None.
    """

    workflow_id: Any
    workflow_state: Any
    workflow_version: Any
    execution_id: Any
    execution_state: Any
    execution_version: Any
    hero: tuple[Any, Any] | None = None


def update_rows(
    connection: sa.Connection,
    updates: list[RowUpdate],
    releases: tuple[counter_releases.CounterRelease, ...] = (),
) -> None:
    """Send ``updates``; one statement for an execution and its own workflow.

    Args:
        connection: The session's connection (inside its transaction).
        updates: The UPDATEs in the order they must be sent (step executions
            first). Exactly two, an execution followed by its own workflow, go
            out as one statement on PostgreSQL and MySQL/MariaDB.
        releases: Limit slots given back with these writes (R-LIM-20): in the
            pair's statement on PostgreSQL, after the UPDATEs elsewhere; each
            gets ``released`` set.

    Raises:
        StateConflictError: A guarded row held another state (R-DM-40).
        sqlalchemy.orm.exc.StaleDataError: A row is gone.
    """
    dialect = connection.dialect.name
    if len(updates) == 2 and dialect in _PAIR_DIALECTS:
        first, second = updates
        if (
            first.row == "step execution"
            and second.row == "workflow"
            and first.workflow_id == second.row_id
        ):
            if dialect == "postgresql":
                folded, rest = _foldable(releases)
                _update_pair_cte(connection, first, second, folded)
                counter_releases.send_releases(connection, rest)
            else:
                _update_pair_multi_table(connection, first, second)
                counter_releases.send_releases(connection, releases)
            return
    _update_each(connection, updates)
    counter_releases.send_releases(connection, releases)


def _update_each(connection: sa.Connection, updates: list[RowUpdate]) -> None:
    """Send each UPDATE as a statement of its own; a run of unguarded ones of one
    shape as one ``executemany``, refused as a single UPDATE would be (R-DM-42)."""
    returning = connection.dialect.update_returning
    batched = connection.dialect.supports_sane_multi_rowcount
    runs = itertools.groupby(
        updates, key=lambda update: (update.guarded or not batched, _shape(update))
    )
    for (one_by_one, _), grouped in runs:
        run = list(grouped)
        if not one_by_one and len(run) > 1:
            params = [_params(update, "geneva_") for update in run]
            result = connection.execute(_single_statement(run[0], False), params)
            if result.rowcount != len(run):
                _refuse(connection, run)
            continue
        for update in run:
            statement = _single_statement(update, returning and update.guarded)
            result = connection.execute(statement, _params(update, "geneva_"))
            if returning and update.guarded:
                count = 0 if result.first() is None else 1  # by primary key: 0 or 1
            else:
                count = result.rowcount
            if count != 1:
                _refuse(connection, [update])


_PAIR_DIALECTS = frozenset({"postgresql", "mysql", "mariadb"})


def _params(update: RowUpdate, prefix: str) -> dict[str, Any]:
    params = {f"{prefix}{name}": value for name, value in update.values.items()}
    params[f"{prefix}pk"] = update.row_id
    if update.guarded:
        params[f"{prefix}expected"] = update.expected_state
    return params


def _assignments(update: RowUpdate, prefix: str) -> dict[str, Any]:
    table = update.table
    values: dict[str, Any] = {
        name: sa.bindparam(f"{prefix}{name}") for name in update.values
    }
    for name in update.expressions:
        values[name] = table.c[name].onupdate.arg  # type: ignore[union-attr]
    return values


def _conditions(update: RowUpdate, prefix: str) -> list[Any]:
    table = update.table
    conditions = [table.c.id == sa.bindparam(f"{prefix}pk")]
    if update.guarded:
        conditions.append(table.c.state == sa.bindparam(f"{prefix}expected"))
    return conditions


def _shape(update: RowUpdate) -> tuple[Any, ...]:
    return (
        update.table,
        tuple(sorted(update.values)),
        update.expressions,
        update.guarded,
    )


def _cached(key: tuple[Any, ...], build: Any) -> Any:
    statement = _statements.get(key)
    if statement is None:
        statement = _statements[key] = build()
    return statement


def _single_statement(update: RowUpdate, returning: bool) -> Any:
    def build() -> Any:
        statement = (
            sa.update(update.table)
            .where(*_conditions(update, "geneva_"))
            .values(_assignments(update, "geneva_"))
        )
        if returning:
            statement = statement.returning(update.table.c.id)
        return statement

    return _cached(("single", *_shape(update), returning), build)


def _update_pair_cte(
    connection: sa.Connection,
    first: RowUpdate,
    second: RowUpdate,
    releases: tuple[counter_releases.CounterRelease, ...] = (),
) -> None:
    """The execution's and its workflow's UPDATE as one PostgreSQL statement.

    The execution's UPDATE is a data-modifying CTE; the outer UPDATE returns one
    row when the workflow's matched, holding the number of execution rows
    written. PostgreSQL does not define which row it writes first; nothing
    depends on it (different tables, both rows locked by the caller, SPEC §7).
    ``releases`` are more CTEs of the same statement (R-LIM-20); their counts
    are returned too.
    """
    release_tables = tuple(release.table for release in releases)

    def build() -> Any:
        first_update = (
            sa.update(first.table)
            .where(*_conditions(first, "a_"))
            .values(_assignments(first, "a_"))
            .returning(first.table.c.id)
            .cte("geneva_first_update")
        )
        release_ctes = counter_releases.release_ctes(releases)
        return (
            sa.update(second.table)
            .where(*_conditions(second, "b_"))
            .values(_assignments(second, "b_"))
            .add_cte(first_update, *release_ctes)
            .returning(
                sa.select(sa.func.count()).select_from(first_update).scalar_subquery(),
                *(
                    sa.select(sa.func.count()).select_from(cte).scalar_subquery()
                    for cte in release_ctes
                ),
            )
        )

    statement = _cached(
        ("pair-cte", *_shape(first), *_shape(second), release_tables), build
    )
    params = _params(first, "a_")
    params.update(_params(second, "b_"))
    params.update(counter_releases.releases_params(releases))
    row: Any = connection.execute(statement, params).one_or_none()
    if row is None:
        # The workflow's UPDATE matched nothing (the CTE may have written the
        # execution; the caller's rollback undoes it).
        _refuse(connection, [second])
    elif row[0] != 1:
        _refuse(connection, [first])
    for index, release in enumerate(releases):
        release.sent, release.released = True, row[1 + index] == 1


def _update_pair_multi_table(
    connection: sa.Connection, first: RowUpdate, second: RowUpdate
) -> None:
    """The execution's and its workflow's UPDATE as one MySQL/MariaDB statement.

    A multiple-table UPDATE joined on ``workflow_id``: it matches both rows or
    neither (a row gone, or a guarded state that differs). Both rows are locked
    already (SPEC §7), so the order InnoDB writes them in does not matter.
    """

    def build() -> Any:
        # Two tables with the same column names: assign by column, not by name.
        values: dict[Any, Any] = {
            first.table.c[name]: value
            for name, value in _assignments(first, "a_").items()
        }
        values.update(
            {
                second.table.c[name]: value
                for name, value in _assignments(second, "b_").items()
            }
        )
        return (
            sa.update(first.table)
            .values(values)
            .where(*_conditions(first, "a_"), *_conditions(second, "b_"))
            .where(first.table.c.workflow_id == second.table.c.id)
        )

    statement = _cached(("pair-multi-table", *_shape(first), *_shape(second)), build)
    params = _params(first, "a_")
    params.update(_params(second, "b_"))
    if connection.execute(statement, params).rowcount != 2:
        _refuse(connection, [first, second])


def merges_with_insert(dialect: sa.Dialect, updates: list[RowUpdate]) -> bool:
    """Whether :func:`update_rows_and_insert` may send ``updates`` with an INSERT.

    On PostgreSQL, for one UPDATE, or an execution's followed by its own
    workflow's (the pair :func:`update_rows` sends as one statement).
    """
    if dialect.name != "postgresql" or not updates or len(updates) > 2:
        return False
    if len(updates) == 1:
        return True
    first, second = updates
    return (
        first.row == "step execution"
        and second.row == "workflow"
        and first.workflow_id == second.row_id
    )


def update_rows_and_insert(
    connection: sa.Connection,
    updates: list[RowUpdate],
    table: sa.Table,
    row: dict[str, Any],
    guards: OptimisticGuards | None = None,
    releases: tuple[counter_releases.CounterRelease, ...] = (),
    keeps: tuple[counter_releases.CounterKeep, ...] = (),
) -> Any:
    """Send ``updates`` and the INSERT of ``row`` as one statement (R-EXE-79).

    Each UPDATE is a data-modifying CTE returning its row's id; the INSERT is
    ``INSERT ... SELECT`` from those CTEs, so it inserts a row only when every
    UPDATE matched its row, and, reading their ``RETURNING``, only after the
    UPDATEs wrote them: the unique index on active executions (R-DM-09) sees
    the finished execution's new state before the new row arrives, as with
    two statements. The outer SELECT returns each UPDATE's count of rows
    written and the new row's id.

    Args:
        connection: The session's connection (inside its transaction).
        updates: As :func:`merges_with_insert` accepts them, in that order.
        table: The table inserted into (step executions).
        row: ``{column name: value}`` of the new row.
        guards: An optimistic finalize's guards (R-EXE-81): the statement is
            :func:`_optimistic_update_and_insert`'s instead.
        releases: Limit slots given back in the same statement (R-LIM-20),
            more CTEs; each gets ``released`` set. Not with ``guards``.
        keeps: Limit slots the inserted (claimed inline) execution keeps from
            the finished one (R-LIM-15): CTEs the INSERT reads, so that it
            inserts only when nobody waits for them. Not with ``guards``.

    Returns:
        The new row's primary key.

    Raises:
        StateConflictError: A guarded row held another state (R-DM-40); nothing
            was inserted, and the caller rolls back what the other CTE wrote.
        sqlalchemy.orm.exc.StaleDataError: A row is gone.
        OptimisticWriteRefused: With ``guards``: the writes are not an
            execution's and its own workflow's, or the guard failed.
        SlotNotKept: A keep matched no row: nothing was inserted; the
            caller rolls back and finalizes without continuing inline.
    """
    if guards is not None:
        if releases or keeps:
            raise OptimisticWriteRefused("a limit's slot is given back under a lock")
        return _optimistic_update_and_insert(connection, updates, table, row, guards)
    releases, rest = _foldable(releases)
    shapes = tuple(_shape(update) for update in updates)
    release_tables = tuple(release.table for release in releases)
    keep_tables = tuple(keep.table for keep in keeps)

    def build() -> Any:
        written = [
            sa.update(update.table)
            .where(*_conditions(update, f"u{index}_"))
            .values(_assignments(update, f"u{index}_"))
            .returning(update.table.c.id)
            .cte(f"geneva_update_{index}")
            for index, update in enumerate(updates)
        ]
        # Joined ON true (not a bare cartesian product, which SQLAlchemy warns
        # about): one row when every UPDATE returned its row, none otherwise.
        kept = counter_releases.keep_ctes(keeps)
        source: Any = written[0]
        for cte in [*written[1:], *kept]:
            source = source.join(cte, sa.true())
        inserted = _insert_cte(table, row, source)
        counts = [
            sa.select(sa.func.count()).select_from(cte).scalar_subquery()
            for cte in [*written, *counter_releases.release_ctes(releases), *kept]
        ]
        return sa.select(*counts, sa.select(inserted.c.id).scalar_subquery())

    statement = _cached(
        ("with-insert", shapes, table, tuple(row), release_tables, keep_tables),
        build,
    )
    params: dict[str, Any] = {}
    for index, update in enumerate(updates):
        params.update(_params(update, f"u{index}_"))
    params.update({f"new_{name}": value for name, value in row.items()})
    params.update(counter_releases.releases_params(releases))
    params.update(counter_releases.keeps_params(keeps))
    result = connection.execute(statement, params).one()
    counts = result[: len(updates)]
    released = result[len(updates) : len(updates) + len(releases)]
    kept_counts = result[
        len(updates) + len(releases) : len(updates) + len(releases) + len(keeps)
    ]
    new_id = result[len(updates) + len(releases) + len(keeps)]
    for release, count in zip(releases, released, strict=True):
        release.sent, release.released = True, count == 1
    for update, count in zip(updates, counts, strict=True):
        if count != 1:
            # This UPDATE wrote nothing: its row is as the refusal reads it.
            _refuse(connection, [update])
    if any(count != 1 for count in kept_counts):
        raise counter_releases.SlotNotKept(
            "a waiter queued for a slot the next step would keep: it is not "
            "claimed inline"
        )
    if new_id is None:
        raise sa.exc.InvalidRequestError(
            f"the INSERT into {table.name} returned no primary key"
        )
    counter_releases.send_releases(connection, rest)
    return new_id


def _foldable(
    releases: tuple[counter_releases.CounterRelease, ...],
) -> tuple[
    tuple[counter_releases.CounterRelease, ...],
    tuple[counter_releases.CounterRelease, ...],
]:
    """``(folded into the statement, sent after it)``: one release folds; of
    several, PostgreSQL would lock the key rows of one statement's CTEs in no
    set order, so they go out one by one in key order (R-LIM-30)."""
    if len(releases) == 1:
        return releases, ()
    return (), releases


def _insert_cte(table: sa.Table, row: dict[str, Any], source: Any) -> Any:
    """``INSERT INTO table ... SELECT`` the ``new_*`` parameters ``FROM source``.

    One row per row of ``source`` (the UPDATE CTEs it reads), returning the
    new primary key, as a CTE named ``geneva_insert``.
    """
    values = sa.select(
        *(sa.bindparam(f"new_{name}", type_=table.c[name].type) for name in row)
    ).select_from(source)
    return (
        sa.insert(table)
        .from_select(list(row), values)
        .returning(table.c.id)
        .cte("geneva_insert")
    )


def _optimistic_update_and_insert(
    connection: sa.Connection,
    updates: list[RowUpdate],
    table: sa.Table,
    row: dict[str, Any],
    guards: OptimisticGuards,
) -> Any:
    """An optimistic finalize's one statement: no locking read before it (R-EXE-81).

    The workflow's UPDATE is guarded by its state and ``updated_at`` at the
    claim (and the hero row's ``EXISTS`` when ``guards.hero``), the
    execution's by its own; the execution's UPDATE runs only when the
    workflow's returned its row (an uncorrelated ``EXISTS`` on that CTE, which
    PostgreSQL evaluates once, before it scans the execution), so the
    workflow row is locked before the execution row, as SPEC §7 orders. The
    INSERT reads the execution's ``RETURNING``, as in
    :func:`update_rows_and_insert`. A guard that matches nothing writes and
    inserts nothing, and is not read again under a lock: the caller rolls
    back and takes the locked path, which re-reads both rows.

    Raises:
        OptimisticWriteRefused: ``updates`` are not an execution's and its own
            workflow's (nothing sent), or a guard failed.
    """
    if (
        len(updates) != 2
        or updates[0].row != "step execution"
        or updates[0].row_id != guards.execution_id
        or updates[1].row != "workflow"
        or updates[1].row_id != guards.workflow_id
    ):
        raise OptimisticWriteRefused(
            "the pending writes are not the finished execution's and its workflow's"
        )
    execution_update, workflow_update = updates
    hero_key = None
    if guards.hero is not None:
        hero_key = sa.inspect(guards.hero[0]).primary_key[0]

    def build() -> Any:
        workflows, executions = workflow_update.table, execution_update.table
        conditions = [
            workflows.c.id == sa.bindparam("wg_pk"),
            workflows.c.state == sa.bindparam("wg_expected"),
            workflows.c.updated_at == sa.bindparam("wg_version"),
        ]
        if hero_key is not None:
            conditions.append(
                sa.exists().where(
                    hero_key == sa.bindparam("geneva_hero_id", type_=hero_key.type)
                )
            )
        workflow_cte = (
            sa.update(workflows)
            .where(*conditions)
            .values(_assignments(workflow_update, "w_"))
            .returning(workflows.c.id)
            .cte("geneva_workflow_update")
        )
        execution_cte = (
            sa.update(executions)
            .where(
                executions.c.id == sa.bindparam("eg_pk"),
                executions.c.state == sa.bindparam("eg_expected"),
                executions.c.updated_at == sa.bindparam("eg_version"),
                sa.select(workflow_cte.c.id).exists(),
            )
            .values(_assignments(execution_update, "e_"))
            .returning(executions.c.id)
            .cte("geneva_execution_update")
        )
        inserted = _insert_cte(table, row, execution_cte)
        return sa.select(
            sa.select(sa.func.count()).select_from(execution_cte).scalar_subquery(),
            sa.select(inserted.c.id).scalar_subquery(),
        )

    statement = _cached(
        (
            "optimistic",
            _shape(execution_update),
            _shape(workflow_update),
            table,
            tuple(row),
            hero_key,
        ),
        build,
    )
    params: dict[str, Any] = {
        f"w_{name}": value for name, value in workflow_update.values.items()
    }
    params.update(
        {f"e_{name}": value for name, value in execution_update.values.items()}
    )
    params.update(
        wg_pk=guards.workflow_id,
        wg_expected=guards.workflow_state,
        wg_version=guards.workflow_version,
        eg_pk=guards.execution_id,
        eg_expected=guards.execution_state,
        eg_version=guards.execution_version,
    )
    if guards.hero is not None:
        params["geneva_hero_id"] = guards.hero[1]
    params.update({f"new_{name}": value for name, value in row.items()})
    written, new_id = connection.execute(statement, params).one()
    if written != 1 or new_id is None:
        raise OptimisticWriteRefused(
            f"step execution {guards.execution_id!r} or its workflow changed "
            "since the claim, or the hero is gone"
        )
    return new_id


def _refuse(connection: sa.Connection, updates: list[RowUpdate]) -> None:
    """Raise for the first of ``updates`` whose row is gone or in another state."""
    locking = connection.dialect.name != "sqlite"
    for update in updates:
        table = update.table
        query = sa.select(table.c.state).where(table.c.id == update.row_id)
        if locking:
            # A locking read sees the latest committed row on every isolation
            # level (MySQL/MariaDB's REPEATABLE READ would show the snapshot).
            query = query.with_for_update()
        actual = connection.execute(query).one_or_none()
        if actual is None:
            raise StaleDataError(
                f"UPDATE statement on table '{table.name}' expected to update 1 "
                f"row(s); 0 were matched (id={update.row_id!r})"
            )
        if update.guarded and actual[0] != update.expected_state:
            raise StateConflictError(
                update.row, update.row_id, update.expected_state, actual[0]
            )
    raise StaleDataError(
        f"UPDATE statement on table '{updates[0].table.name}' matched no row "
        f"(id={updates[0].row_id!r})"
    )
