"""Geneva's write path: its two tables written with Core, the session kept in step.

A step run changes two loaded rows twice and inserts one row. Through the ORM,
loading (``populate_existing``) and the unit of work cost more CPU than the SQL
itself (``bench/end_to_end.py``). So geneva's own rows (workflows and step
executions) are always read under lock, updated and inserted with Core
statements, whatever listeners the host has (R-DM-41):

* :func:`materialize` turns a locked row into the session's instance (a new one,
  or the one already in the identity map, overwritten like ``populate_existing``);
* :func:`write_geneva_rows` writes the pending column changes of workflows and
  step executions as UPDATEs (state changes guarded, R-DM-40, see
  :mod:`flask_geneva.row_updates`); it also runs at the start of every ORM flush
  (a ``before_flush`` listener), so a plain ``session.commit()`` writes them the
  same way;
* :func:`insert_step_execution` INSERTs a new execution.

The instances are then left as an ORM load or flush would leave them, through
public API only: a written (or re-read) instance is marked clean in place by
``Session.merge(instance, load=False)`` into its own session, a new one is
attached with ``make_transient_to_detached`` and ``Session.add``, and session
events (``after_rollback``, ``after_transaction_end``) undo what a rolled-back
transaction or savepoint wrote: written instances are expired, inserted ones
expunged and made transient. No ORM flush or mapper events fire for these
writes; load listeners (a ``@reconstructor``) and attach listeners still get an
ORM load (:func:`materialize_allowed`). ``tests/workflow/test_core_rows.py``
checks the rows and the session states.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva import clock
from flask_geneva import row_updates
from flask_geneva.model_states import WorkflowState

__all__ = [
    "WorkflowsEnded",
    "column_keys",
    "flush",
    "insert_step_execution",
    "materialize",
    "materialize_allowed",
    "on_workflows_ended",
    "write_geneva_rows",
]

#: Session events whose listeners expect an ORM load to attach instances.
_ATTACH_EVENTS = (
    "before_attach",
    "after_attach",
    "loaded_as_persistent",
    "detached_to_persistent",
    "pending_to_persistent",
    "transient_to_pending",
)
#: ``Session.info`` key: instances written or inserted, per open transaction.
_WRITES_KEY = "geneva_core_writes"
#: ``Session.info`` key: writes of a transaction being rolled back.
_UNDO_KEY = "geneva_core_undo"

_cache: dict[tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()

#: Workflow states that end a workflow (R-WF-02).
_END_STATES = frozenset({WorkflowState.FINISHED.value, WorkflowState.CANCELED.value})

WorkflowsEnded = Callable[[orm.Session, Any, list[Any], datetime], object]
"""``(session, geneva, workflow ids, now)``: workflows were just written ended.

The return value is ignored."""

_end_listeners: list[WorkflowsEnded] = []


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


def actual_session(session: orm.Session | orm.scoped_session[Any]) -> orm.Session:
    """The :class:`~sqlalchemy.orm.Session` behind ``session`` (or a scoped one)."""
    if isinstance(session, orm.scoped_session):
        resolved: orm.Session = session()
        return resolved
    return session


def clear_caches() -> None:
    """Forget built statements and column lists (after a schema change)."""
    with _cache_lock:
        _cache.clear()
    row_updates.clear_statements()


# -- the session's bind --------------------------------------------------------------

#: ``Session.info`` key of the session's default bind, read once per session.
_BIND_KEY = "geneva_bind"


def bind_of(session: orm.Session) -> sa.Engine | sa.Connection:
    """Return ``session.get_bind()``, read once per session and kept in its info.

    A session keeps its default bind for its lifetime, and Flask-SQLAlchemy's
    ``get_bind`` looks the app's engines up on every call; geneva asks for it
    several times per step.
    """
    info = session.info
    bind: sa.Engine | sa.Connection | None = info.get(_BIND_KEY)
    if bind is None:
        bind = info[_BIND_KEY] = session.get_bind()
    return bind


def connection_of(session: orm.Session) -> sa.Connection:
    """Return the connection of ``session``'s transaction on its default bind.

    The same as ``session.connection()`` (begins the transaction when none is
    open), with the bind from :func:`bind_of`.
    """
    return session.connection(bind_arguments={"bind": bind_of(session)})


# -- reading -------------------------------------------------------------------------


def column_keys(
    cls: Any, absent: frozenset[str]
) -> tuple[tuple[str, ...], tuple[sa.Column[Any], ...]]:
    """Attribute keys and columns of ``cls`` that exist, primary key first.

    Args:
        cls: A mapped class (a workflow or step execution model).
        absent: Attribute keys of optional columns missing from the database
            (R-DM-30); they are left unloaded, as the ORM's deferred loading does.

    Returns:
        ``(keys, columns)`` in the same order.
    """
    key = ("columns", cls, absent)
    cached = _cache.get(key)
    if cached is None:
        props = sorted(
            (prop for prop in sa.inspect(cls).column_attrs if prop.key not in absent),
            key=lambda prop: prop.key != "id",
        )
        cached = (tuple(p.key for p in props), tuple(p.columns[0] for p in props))
        _cache[key] = cached
    return cached


def materialize_allowed(session: orm.Session, mappers: Any) -> bool:
    """Whether :func:`materialize` may stand in for an ORM load of ``mappers``.

    False when load/refresh listeners (e.g. a ``@reconstructor``) or session
    attach events are listened to: those expect an ORM load.
    """
    dispatch = actual_session(session).dispatch
    for name in _ATTACH_EVENTS:
        if getattr(dispatch, name):
            return False
    for mapper in mappers:
        manager_dispatch = mapper.class_manager.dispatch
        if manager_dispatch.load or manager_dispatch.refresh:
            return False
    return True


def materialize(
    session: orm.Session, mapper: Any, keys: tuple[str, ...], values: Any
) -> Any:
    """The session's instance of a row read by Core, holding exactly ``values``.

    Like an ORM load with ``populate_existing``: an instance already in the
    identity map is overwritten (unflushed changes included, loaded
    relationships reset) and left clean; otherwise the mapped class is called
    without arguments (as ``create()`` does) and the instance attached as
    persistent. Columns not in ``keys`` stay unloaded (a later access loads
    them).

    Args:
        session: The session the instance belongs to.
        mapper: The instance's mapper (for a workflow, the one its ``type`` names).
        keys: Attribute keys, primary key first (see :func:`column_keys`).
        values: The row's values in the order of ``keys``.

    Returns:
        The persistent, unmodified instance.
    """
    session = actual_session(session)
    identity = mapper.identity_key_from_primary_key((values[0],))
    instance = session.identity_map.get(identity)
    if instance is None:
        instance = mapper.class_()
        values_by_key = sa.inspect(instance).dict
    else:
        state = sa.inspect(instance)
        if not state.modified and not state.expired_attributes:
            # Loaded and unchanged: new values carry no history, so writing them
            # into the instance's dict leaves it clean (no re-attach needed).
            values_by_key = state.dict
            for key in _relationship_keys(mapper):
                values_by_key.pop(key, None)
            values_by_key.update(zip(keys, values, strict=True))
            return instance
        values_by_key = state.dict
        # populate_existing resets loaded relationships: the next access loads
        # them again (a many-to-one from the identity map, without SQL).
        for key in _relationship_keys(mapper):
            values_by_key.pop(key, None)
        values_by_key.update(zip(keys, values, strict=True))
        _mark_committed(session, instance)
        return instance
    values_by_key.update(zip(keys, values, strict=True))
    orm.make_transient_to_detached(instance)
    session.add(instance)
    return instance


def _relationship_keys(mapper: Any) -> tuple[str, ...]:
    key = ("relationships", mapper)
    cached = _cache.get(key)
    if cached is None:
        cached = _cache[key] = tuple(mapper.relationships.keys())
    return cached


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
    session = actual_session(session)
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
    dirty = session.dirty
    if not dirty:
        return False
    planned: list[tuple[Any, str, dict[str, Any]]] = []
    for owner, row in (
        (geneva.StepExecution, "step execution"),
        (geneva.Workflow, "workflow"),
    ):
        for state in sorted(
            (sa.inspect(instance) for instance in dirty if isinstance(instance, owner)),
            key=lambda state: state.key[1],
        ):
            changes = _column_changes(state)
            if changes is not None:
                planned.append((state, row, changes))
    others_left = len(planned) != len(dirty)
    if not planned:
        return others_left
    now = clock.now()
    updates: list[row_updates.RowUpdate] = []
    reloaded: list[tuple[Any, tuple[str, ...]]] = []
    for state, row, changes in planned:
        if changes:
            update, expired = _row_update(state, row, changes, now)
            updates.append(update)
            if expired:
                reloaded.append((state, expired))
    if updates:
        row_updates.update_rows(connection_of(session), updates)
    in_savepoint = session.get_nested_transaction() is not None
    for state, _, changes in planned:
        instance = state.obj()
        _settle(session, instance)
        if changes and in_savepoint:
            _record(session, instance, inserted=False)
    for state, keys in reloaded:
        session.expire(state.obj(), keys)
    ended = [
        state.key[1][0]
        for state, row, changes in planned
        if row == "workflow" and changes.get("state") in _END_STATES
    ]
    if ended:
        for listener in _end_listeners:
            listener(session, geneva, ended, now)
    return others_left


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
    """
    session = actual_session(session)
    flush(session, geneva)
    state = sa.inspect(execution)
    if state.pending:
        session.expunge(execution)
    mapper = state.mapper
    values_by_key = state.dict
    other_attributes, plan = _insert_plan(mapper, absent)
    if not other_attributes.isdisjoint(values_by_key):
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
    statement = _cache.get(("insert", mapper.local_table))
    if statement is None:
        statement = _cache[("insert", mapper.local_table)] = sa.insert(
            mapper.local_table
        )
    result = connection_of(session).execute(statement, row)
    if values_by_key.get("id") is None:
        inserted = result.inserted_primary_key
        if inserted is None or inserted[0] is None:
            raise sa.exc.InvalidRequestError(
                "the database returned no primary key for the new step execution"
            )
        values_by_key["id"] = inserted[0]
    orm.make_transient_to_detached(execution)
    session.add(execution)
    _record(session, execution, inserted=True)


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


# -- keeping the session in step -----------------------------------------------------


def _settle(session: orm.Session, instance: Any) -> None:
    """Leave a written instance clean and persistent, as a flush leaves it.

    Its loaded values are what was written: they are marked committed in
    place (:func:`_mark_committed`). Loaded relationships are reset: the next
    access reads them from the identity map.
    """
    state = sa.inspect(instance)
    identity = state.key[1]
    values_by_key = state.dict
    mapper = state.mapper
    for key in _relationship_keys(mapper):
        if key in values_by_key:
            del values_by_key[key]
    # An expired instance may hold no primary key value: keep its identity.
    for key, value in zip(_primary_key_keys(mapper), identity, strict=True):
        values_by_key.setdefault(key, value)
    _mark_committed(session, instance)


def _mark_committed(session: orm.Session, instance: Any) -> None:
    """Mark the loaded values of a persistent ``instance`` as its row's.

    ``Session.merge(load=False)`` of an instance into the session that holds
    it merges nothing (source and target are the same object) and, as for
    every merge without load, leaves the target without history: loaded
    values committed, not modified, out of ``Session.dirty``, expired
    attributes other than the loaded ones still expired. That is what an ORM
    load or flush leaves, through public API, in place (no detach and
    re-attach, no session attach events), at about a third of the cost of
    ``make_transient`` / ``make_transient_to_detached`` / ``Session.add``.
    Only called once the values are in the row (written or just read).
    """
    session.merge(instance, load=False)


def _primary_key_keys(mapper: Any) -> tuple[str, ...]:
    key = ("primary-key", mapper)
    cached = _cache.get(key)
    if cached is None:
        cached = _cache[key] = tuple(
            mapper.get_property_by_column(column).key for column in mapper.primary_key
        )
    return cached


def _current_transaction(session: orm.Session) -> Any:
    return session.get_nested_transaction() or session.get_transaction()


def _record(session: orm.Session, instance: Any, *, inserted: bool) -> None:
    """Remember a Core write so that a rollback of its transaction undoes it.

    Updates in the outer transaction need no record: its rollback expires every
    instance of the session.
    """
    log = session.info.get(_WRITES_KEY)
    if log is None:
        log = session.info[_WRITES_KEY] = {}
    log.setdefault(_current_transaction(session), []).append((instance, inserted))


def _after_rollback(session: orm.Session) -> None:
    """Take the Core writes of the transaction or savepoint being rolled back.

    They are undone by :func:`_after_soft_rollback`, once the session has
    restored its own snapshot (which expunges objects the ORM inserted in it,
    keeping their values).
    """
    log = session.info.get(_WRITES_KEY)
    if not log:
        return
    entries = log.pop(_current_transaction(session), None)
    if entries:
        session.info.setdefault(_UNDO_KEY, []).extend(entries)


def _after_soft_rollback(session: orm.Session, previous_transaction: Any) -> None:
    """Expire what a rolled-back transaction wrote; drop what it inserted."""
    entries = session.info.pop(_UNDO_KEY, None)
    if not entries:
        return
    for instance, inserted in entries:
        if inserted:
            if instance in session:
                session.expunge(instance)
            if sa.inspect(instance).key is not None:
                orm.make_transient(instance)
        elif instance in session:
            session.expire(instance)


def _after_transaction_end(session: orm.Session, transaction: Any) -> None:
    """A committed savepoint's writes belong to the enclosing transaction."""
    log = session.info.get(_WRITES_KEY)
    if not log:
        return
    entries = log.pop(transaction, None)
    parent = transaction.parent
    if parent is None:
        log.clear()
    elif entries:
        log.setdefault(parent, []).extend(entries)


def _before_flush(session: orm.Session, flush_context: Any, instances: Any) -> None:
    """Write geneva's own changed rows with Core before any ORM flush."""
    genevas = []
    for instance in session.dirty:
        geneva = getattr(type(instance), "__geneva__", None)
        if geneva is not None and geneva not in genevas:
            genevas.append(geneva)
    for geneva in genevas:
        write_geneva_rows(session, geneva)


event.listen(orm.Session, "before_flush", _before_flush)
event.listen(orm.Session, "after_rollback", _after_rollback)
event.listen(orm.Session, "after_soft_rollback", _after_soft_rollback)
event.listen(orm.Session, "after_transaction_end", _after_transaction_end)
