"""Geneva's write path: its two tables written with Core statements.

A step run changes two loaded rows twice and inserts one row. Through the ORM,
loading (``populate_existing``) and the unit of work cost more CPU than the SQL
itself (``bench/end_to_end.py``). So geneva's own rows (workflows and step
executions) are always read under lock, updated and inserted with Core
statements, whatever listeners the host has (R-DM-41):

* :func:`write_geneva_rows` writes the pending column changes of workflows and
  step executions as UPDATEs (state changes guarded, R-DM-40, see
  :mod:`flask_geneva.db.row_updates`); it also runs at the start of every ORM flush
  (a ``before_flush`` listener), so a plain ``session.commit()`` writes them the
  same way; workflows it writes ended go to the :func:`on_workflows_ended`
  listeners (R-WSIG-34);
* :func:`insert_step_execution` INSERTs a new execution.

The instances are then left as an ORM load or flush would leave them, through
public API only, by :mod:`flask_geneva.db.session_sync` (which also turns a locked
row into the session's instance, :func:`~flask_geneva.db.session_sync.materialize`):
a written instance is marked clean in place, a new one is attached with
``make_transient_to_detached`` and ``Session.add``, and what a rolled-back
transaction or savepoint wrote is undone. No ORM flush or mapper events fire for
these writes. ``tests/db/test_core_rows.py`` checks the rows and the
session states.

The session helpers this module exported before the split (``actual_session``,
``bind_of``, ``connection_of``, ``column_keys``, ``materialize``,
``materialize_allowed``) are still importable from here.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.db import counter_releases
from flask_geneva.db import execution_exits
from flask_geneva.db import row_updates
from flask_geneva.db import session_sync
from flask_geneva.db.session_sync import actual_session
from flask_geneva.db.session_sync import bind_of
from flask_geneva.db.session_sync import column_keys
from flask_geneva.db.session_sync import connection_of
from flask_geneva.db.session_sync import materialize
from flask_geneva.db.session_sync import materialize_allowed
from flask_geneva.db.states import WorkflowState

__all__ = [
    "WorkflowsEnded",
    "actual_session",
    "bind_of",
    "clear_caches",
    "column_keys",
    "connection_of",
    "expect_unchanged_since_claim",
    "flush",
    "insert_step_execution",
    "materialize",
    "materialize_allowed",
    "on_workflows_ended",
    "write_geneva_rows",
]

_cache: dict[tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()

#: Workflow states that end a workflow (R-WF-02).
_END_STATES = frozenset({WorkflowState.FINISHED.value, WorkflowState.CANCELED.value})

WorkflowsEnded = Callable[[orm.Session, Any, list[Any], datetime], object]
"""``(session, geneva, workflow ids, now)``: workflows were just written ended.

The return value is ignored."""

_end_listeners: list[WorkflowsEnded] = []

#: ``session.info`` key: (geneva, workflow id) of workflows whose end the ORM
#: flush writes (a relationship changed with the state).
_ENDED_BY_ORM = "geneva_workflows_ended_by_orm_flush"


def on_workflows_ended(listener: WorkflowsEnded) -> WorkflowsEnded:
    """Call ``listener`` whenever :func:`write_geneva_rows` ends workflows.

    Whatever ends a workflow (the executor, an operator, housekeeping,
    ``transition_to``) writes its new state here, so a listener runs in the
    same transaction as every end, after the rows were written. The engine
    registers what must end with a workflow (its workflow signals, R-WSIG-34)
    without this data layer importing it.

    Returns:
        ``listener`` (usable as a decorator).
    """
    _end_listeners.append(listener)
    return listener


def clear_caches() -> None:
    """Forget built statements and column lists (after a schema change)."""
    with _cache_lock:
        _cache.clear()
    session_sync.clear_cache()
    row_updates.clear_statements()


# -- writing -------------------------------------------------------------------------


def flush(session: orm.Session | orm.scoped_session[Any], geneva: Any) -> None:
    """Write geneva's pending row changes with Core, then flush anything else.

    Args:
        session: The session to flush.
        geneva: The :class:`~flask_geneva.Geneva` whose models are written.

    Raises:
        StateConflictError: A state write found the row in another state
            (R-DM-40); the caller rolls the transaction back.
        sqlalchemy.orm.exc.StaleDataError: An UPDATE matched no row (the row was
            deleted), as the ORM flush raises.
    """
    session = session_sync.actual_session(session)
    if write_geneva_rows(session, geneva) or session.new or session.deleted:
        session.flush()  # other objects: the ORM (geneva's rows are clean now)


def write_geneva_rows(session: orm.Session, geneva: Any) -> bool:
    """UPDATE the changed workflows and step executions of ``session`` with Core.

    Step executions are written before workflows, each table in primary-key
    order (the ORM's order); an execution and its own workflow share one
    statement on PostgreSQL and MySQL/MariaDB. ``updated_at`` and any other
    ``onupdate`` column are set as the ORM would. A change of ``state`` is
    guarded by the state read before it (R-DM-40). The instances are left
    clean and persistent. A relationship assignment (not a column change) is
    left to the ORM flush. Workflows written ``finished`` or ``canceled`` are
    then handed to the :func:`on_workflows_ended` listeners (R-WSIG-34).

    Args:
        session: The session whose dirty instances are written.
        geneva: The :class:`~flask_geneva.Geneva` whose models are written.

    Returns:
        Whether other changed objects are left for the ORM flush.

    Raises:
        StateConflictError: A guarded row held another state.
        sqlalchemy.orm.exc.StaleDataError: A row is gone.
    """
    pending = _plan_writes(session, geneva)
    if pending is None:
        return False
    if pending.updates:
        _refuse_if_optimistic(session)
        row_updates.update_rows(
            session_sync.connection_of(session), pending.updates, pending.releases
        )
    _settle_writes(session, geneva, pending)
    return pending.others_left


@dataclasses.dataclass
class _PendingWrites:
    """What :func:`write_geneva_rows` writes, planned before any statement."""

    planned: list[tuple[Any, str, dict[str, Any]]]
    updates: list[row_updates.RowUpdate]
    reloaded: list[tuple[Any, tuple[str, ...]]]
    ended: list[Any]
    left: list[execution_exits.ExecutionLeft]
    others_left: bool
    now: datetime

    @property
    def releases(self) -> tuple[counter_releases.CounterRelease, ...]:
        """The fast give-backs of every leaving execution, in key order."""
        found = [release for left in self.left for release in left.fast_releases]
        return tuple(sorted(found, key=lambda r: (r.limit_name, r.limit_key)))


def _plan_writes(session: orm.Session, geneva: Any) -> _PendingWrites | None:
    """The UPDATEs of ``session``'s changed geneva rows; None when nothing is dirty."""
    dirty = session.dirty
    if not dirty:
        return None
    # One pass over the dirty instances: executions, then workflows, each in
    # primary-key order (the ORM's order).
    execution_cls, workflow_cls = geneva.StepExecution, geneva.Workflow
    executions: list[Any] = []
    workflows: list[Any] = []
    for instance in dirty:
        if isinstance(instance, execution_cls):
            executions.append(sa.inspect(instance))
        elif isinstance(instance, workflow_cls):
            workflows.append(sa.inspect(instance))
    planned: list[tuple[Any, str, dict[str, Any]]] = []
    left = execution_exits.left_executions(executions, geneva)
    for states, row in ((executions, "step execution"), (workflows, "workflow")):
        if len(states) > 1:
            states.sort(key=_identity_of)
        for state in states:
            changes = _column_changes(state)
            if changes is not None:
                planned.append((state, row, changes))
            elif row == "workflow" and _ends(state):
                # Left to the ORM flush (a relationship changed too): its end
                # listeners run after that flush (_after_flush, R-WSIG-34).
                ended_by_orm = session.info.setdefault(_ENDED_BY_ORM, set())
                ended_by_orm.add((geneva, state.key[1][0]))
    now = clock.now()
    updates: list[row_updates.RowUpdate] = []
    reloaded: list[tuple[Any, tuple[str, ...]]] = []
    for state, row, changes in planned:
        if changes:
            update, expired = _row_update(state, row, changes, now)
            updates.append(update)
            if expired:
                reloaded.append((state, expired))
    ended = [
        state.key[1][0]
        for state, row, changes in planned
        if row == "workflow" and changes.get("state") in _END_STATES
    ]
    return _PendingWrites(
        planned, updates, reloaded, ended, left, len(planned) != len(dirty), now
    )


def _identity_of(state: Any) -> Any:
    """The primary key of a persistent instance's ``state`` (its sort key)."""
    return state.key[1]


def _settle_writes(session: orm.Session, geneva: Any, pending: _PendingWrites) -> None:
    """Leave the written instances as a flush would; run the end listeners."""
    if pending.left:
        execution_exits.notify_executions_left(
            session, geneva, pending.left, pending.now
        )
    if not pending.planned:
        return
    in_savepoint = session.get_nested_transaction() is not None
    for state, _, changes in pending.planned:
        session_sync.settle_written_state(session, state)
        if changes and in_savepoint:
            session_sync.record_write(session, state.obj(), inserted=False)
    for state, keys in pending.reloaded:
        session.expire(state.obj(), keys)
    if pending.ended:
        for listener in _end_listeners:
            listener(session, geneva, pending.ended, pending.now)


def _ends(state: Any) -> bool:
    """Whether ``state``'s pending ``state`` change ends its workflow."""
    if "state" not in state.committed_state:
        return False
    return state.dict.get("state") in _END_STATES


def _column_changes(state: Any) -> dict[str, Any] | None:
    """Changed columns of ``state`` as ``{attribute key: new value}``, or None.

    None means a change the ORM must flush (a relationship, a value not loaded).
    An attribute set back to its loaded value is no change, as in a flush.
    """
    attrs = state.mapper.attrs
    values = state.dict
    changes: dict[str, Any] = {}
    for key, loaded in state.committed_state.items():
        prop = attrs.get(key)
        if not isinstance(prop, orm.ColumnProperty) or key not in values:
            return None
        value = values[key]
        if loaded is value or (loaded is not orm.NO_VALUE and loaded == value):
            continue
        changes[key] = value
    return changes


def _row_update(
    state: Any, row: str, changes: dict[str, Any], now: Any
) -> tuple[row_updates.RowUpdate, tuple[str, ...]]:
    """The guarded UPDATE for ``changes``, and the keys to reload after it."""
    mapper = state.mapper
    columns = _columns_by_key(mapper)
    values_by_key = state.dict
    values = {columns[key].name: value for key, value in changes.items()}
    expressions: list[str] = []
    reload: list[str] = []
    for key, column, kind in _onupdate_columns(mapper):
        if key in changes:
            continue
        if kind == "now":
            value = values_by_key[key] = now
            values[column.name] = value
        elif kind == "python":
            value = values_by_key[key] = column.onupdate.arg(None)
            values[column.name] = value
        elif kind == "sql":
            expressions.append(column.name)
            reload.append(key)
        else:  # server_onupdate: the database sets it
            reload.append(key)
    expected: Any = row_updates.UNGUARDED
    if "state" in changes:
        loaded = state.committed_state.get("state", orm.NO_VALUE)
        if loaded is not orm.NO_VALUE:
            expected = loaded
    update = row_updates.RowUpdate(
        table=mapper.local_table,
        row=row,
        row_id=state.key[1][0],
        values=values,
        expressions=tuple(sorted(expressions)),
        expected_state=expected,
        workflow_id=values_by_key.get("workflow_id"),
    )
    return update, tuple(reload)


def _columns_by_key(mapper: Any) -> dict[str, Any]:
    key = ("columns-by-key", mapper)
    cached = _cache.get(key)
    if cached is None:
        cached = _cache[key] = {
            prop.key: prop.columns[0] for prop in mapper.column_attrs
        }
    return cached


def _onupdate_columns(mapper: Any) -> tuple[tuple[str, Any, str], ...]:
    """``(attribute key, column, kind)`` of the columns set on every UPDATE.

    kind: ``"now"`` (``updated_at``, set to the write's time as its ``onupdate``
    would), ``"python"`` (a scalar or callable ``onupdate``), ``"sql"`` (a SQL
    expression, sent in the statement and read back on access) or ``"server"``
    (``server_onupdate``, read back on access).
    """
    key = ("onupdate", mapper)
    cached = _cache.get(key)
    if cached is None:
        found = []
        for prop in mapper.column_attrs:
            column = prop.columns[0]
            onupdate = column.onupdate
            if onupdate is not None:
                if column.name == "updated_at":
                    kind = "now"
                elif onupdate.is_scalar or onupdate.is_callable:
                    kind = "python"
                else:
                    kind = "sql"
            elif column.server_onupdate is not None:
                kind = "server"
            else:
                continue
            found.append((prop.key, column, kind))
        cached = _cache[key] = tuple(found)
    return cached


def insert_step_execution(
    session: orm.Session, geneva: Any, execution: Any, absent: frozenset[str]
) -> None:
    """Write pending changes, then INSERT the new ``execution`` through Core.

    The pending UPDATEs go first: the unique index on active executions
    (R-DM-09) needs the ended execution's new state before the new row arrives.
    On PostgreSQL, when the pending changes are geneva's rows only (one row, or
    an execution and its own workflow) and end no workflow, they go out with
    the INSERT as one statement, the INSERT reading from the UPDATEs so that it
    runs only after, and only if, every UPDATE matched its row (R-EXE-79).
    Column defaults are evaluated as a flush evaluates them; columns left None
    are left out of the INSERT (so absent optional columns are never named,
    R-DM-32) and read None afterwards, without a reload. A rollback of the
    transaction (or savepoint) expunges the instance again and makes it
    transient.

    Args:
        session: The session; ``execution`` is added to it as persistent.
        geneva: The :class:`~flask_geneva.Geneva` whose models are written.
        execution: A new (transient or pending) step execution.
        absent: Attribute keys of optional columns missing from the database.

    Raises:
        StateConflictError: A pending state write found its row in another
            state (R-DM-40); nothing was inserted, the caller rolls back.
        sqlalchemy.orm.exc.StaleDataError: A row to update is gone.
    """
    session = session_sync.actual_session(session)
    state = sa.inspect(execution)
    mapper = state.mapper
    values_by_key = state.dict
    other_attributes, plan = _insert_plan(mapper, absent)
    core_insert = other_attributes.isdisjoint(values_by_key)
    # An optimistic finalize's guards (R-EXE-81) hold for this INSERT only,
    # and so do an inline claim's kept limit slots (R-LIM-15).
    guards = session.info.pop(row_updates.OPTIMISTIC_GUARDS, None)
    keeps = tuple(session.info.pop(counter_releases.KEEPS, ()))
    pending = _plan_writes(session, geneva)
    merged = (
        pending is not None
        and core_insert
        and not state.pending
        and not pending.others_left
        and not pending.ended
        and not session.new
        and not session.deleted
        and row_updates.merges_with_insert(
            session_sync.bind_of(session).dialect, pending.updates
        )
    )
    if guards is not None and not merged:
        raise row_updates.OptimisticWriteRefused(
            "the pending writes do not go out with the INSERT as one statement"
        )
    if not merged:
        _flush_planned(session, geneva, pending)
        if state.pending:
            session.expunge(execution)
        counter_releases.send_keeps(session_sync.connection_of(session), keeps)
    if not core_insert:
        # A relationship was assigned: the ORM works out its foreign key.
        session.add(execution)
        session.flush()
        return
    row: dict[str, Any] = {}
    for key, name, default_kind, default in plan:
        value = values_by_key.get(key)
        if value is None and default_kind is not None:
            if default_kind == "scalar":
                value = default
            elif default_kind == "callable":
                value = default(None)
            else:
                # A SQL expression or sequence: the INSERT evaluates it and the
                # attribute stays unloaded (read on access).
                values_by_key.pop(key, None)
                continue
        values_by_key[key] = value
        if value is not None:
            row[name] = value
    connection = session_sync.connection_of(session)
    if merged:
        assert pending is not None  # noqa: S101 - merged implies it
        new_id = row_updates.update_rows_and_insert(
            connection,
            pending.updates,
            mapper.local_table,
            row,
            guards,
            pending.releases,
            keeps,
        )
        _settle_writes(session, geneva, pending)
        if values_by_key.get("id") is None:
            values_by_key["id"] = new_id
    else:
        _insert_row(connection, mapper.local_table, row, values_by_key)
    orm.make_transient_to_detached(execution)
    session.add(execution)
    session_sync.record_write(session, execution, inserted=True)


def expect_unchanged_since_claim(
    session: orm.Session, guards: row_updates.OptimisticGuards | None
) -> None:
    """Guard the next INSERT's merged statement with ``guards`` (R-EXE-81).

    Until that INSERT consumes them (or this is called with None), any other
    write of geneva's rows in ``session`` raises
    :class:`~flask_geneva.db.row_updates.OptimisticWriteRefused` before a
    statement is sent, and so does an INSERT whose pending writes do not merge
    with it (R-EXE-79).

    Args:
        session: The session finalize writes with.
        guards: What the statement must find unchanged; None forgets them.
    """
    info = session_sync.actual_session(session).info
    if guards is None:
        info.pop(row_updates.OPTIMISTIC_GUARDS, None)
    else:
        info[row_updates.OPTIMISTIC_GUARDS] = guards


def _refuse_if_optimistic(session: orm.Session) -> None:
    """Send no unguarded write while an optimistic finalize's guards are set."""
    if row_updates.OPTIMISTIC_GUARDS in session.info:
        session.info.pop(row_updates.OPTIMISTIC_GUARDS)
        raise row_updates.OptimisticWriteRefused(
            "geneva rows would be written before the guarded statement"
        )


def _flush_planned(
    session: orm.Session, geneva: Any, pending: _PendingWrites | None
) -> None:
    """:func:`flush` with the writes :func:`_plan_writes` planned already."""
    others_left = False
    if pending is not None:
        if pending.updates:
            row_updates.update_rows(
                session_sync.connection_of(session), pending.updates, pending.releases
            )
        _settle_writes(session, geneva, pending)
        others_left = pending.others_left
    if others_left or session.new or session.deleted:
        session.flush()  # other objects: the ORM (geneva's rows are clean now)


def _insert_row(
    connection: sa.Connection,
    table: sa.Table,
    row: dict[str, Any],
    values_by_key: dict[str, Any],
) -> None:
    """INSERT ``row``; a primary key the database chose goes into ``values_by_key``."""
    statement = _cache.get(("insert", table))
    if statement is None:
        statement = _cache[("insert", table)] = sa.insert(table)
    result = connection.execute(statement, row)
    if values_by_key.get("id") is None:
        inserted = result.inserted_primary_key
        if inserted is None or inserted[0] is None:
            raise sa.exc.InvalidRequestError(
                "the database returned no primary key for the new step execution"
            )
        values_by_key["id"] = inserted[0]


def _insert_plan(
    mapper: Any, absent: frozenset[str]
) -> tuple[frozenset[str], tuple[tuple[str, str, str | None, Any], ...]]:
    """What :func:`insert_step_execution` reads of ``mapper``, built once.

    Returns:
        The keys of attributes that are not columns (relationships and the
        like), and ``(attribute key, column name, default kind, default)`` of
        each column not in ``absent``, in mapper order; the default kind is
        None (no default), ``"scalar"``, ``"callable"`` (called with None) or
        ``"sql"`` (evaluated by the INSERT), the default its ``arg``.
    """
    key = ("insert-plan", mapper, absent)
    cached = _cache.get(key)
    if cached is None:
        other_attributes = frozenset(
            name
            for name, prop in mapper.attrs.items()
            if not isinstance(prop, orm.ColumnProperty)
        )
        plan = []
        for prop in mapper.column_attrs:
            if prop.key in absent:
                continue
            column = prop.columns[0]
            default = column.default
            kind: str | None = None
            if default is not None:
                if default.is_scalar:
                    kind = "scalar"
                elif default.is_callable:
                    kind = "callable"
                else:
                    kind = "sql"
            plan.append((prop.key, column.name, kind, default.arg if kind else None))
        cached = _cache[key] = (other_attributes, tuple(plan))
    return cached


def _before_flush(session: orm.Session, flush_context: Any, instances: Any) -> None:
    """Write geneva's own changed rows with Core before any ORM flush."""
    genevas = []
    for instance in session.dirty:
        geneva = getattr(type(instance), "__geneva__", None)
        if geneva is not None and geneva not in genevas:
            genevas.append(geneva)
    for geneva in genevas:
        write_geneva_rows(session, geneva)


def _after_flush(session: orm.Session, flush_context: Any) -> None:
    """Run the end listeners for workflows the ORM flush itself ended.

    A workflow whose change includes a relationship is written by the ORM
    flush, not by :func:`write_geneva_rows`; what must end with it (R-WSIG-34)
    runs here, in the same transaction, once its row is written.
    """
    ended_by_orm = session.info.pop(_ENDED_BY_ORM, None)
    if not ended_by_orm:
        return
    now = clock.now()
    by_geneva: dict[Any, list[Any]] = {}
    for geneva, workflow_id in sorted(ended_by_orm, key=lambda pair: pair[1]):
        by_geneva.setdefault(geneva, []).append(workflow_id)
    for geneva, workflow_ids in by_geneva.items():
        for listener in _end_listeners:
            listener(session, geneva, workflow_ids, now)


event.listen(orm.Session, "before_flush", _before_flush)


def _forget_ended_by_orm(session: orm.Session, previous_transaction: Any) -> None:
    """A failed flush's ended workflows were never written: forget them, and
    any kept slots an inline claim left for an INSERT that never came."""
    session.info.pop(_ENDED_BY_ORM, None)
    session.info.pop(counter_releases.KEEPS, None)


event.listen(orm.Session, "after_flush", _after_flush)
event.listen(orm.Session, "after_soft_rollback", _forget_ended_by_orm)
