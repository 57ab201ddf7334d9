"""Core statements for geneva's own rows, with the session kept as the ORM keeps it.

A step run changes two loaded rows twice and inserts one row. Through the ORM,
loading (``populate_existing``) and the unit of work cost more CPU than the SQL
itself (``bench/end_to_end.py``). The executor's hot path therefore reads and
writes its rows with Core statements and then leaves the session exactly as an
ORM load or flush would have left it:

* :func:`materialize` turns a locked row into the session's instance (a new one,
  or the one already in the identity map, overwritten like ``populate_existing``);
* :func:`flush` writes pending column changes of workflows and step executions as
  UPDATEs and marks the instances clean;
* :func:`insert_step_execution` INSERTs a new execution and registers it as the
  flush registers a pending object (a rollback expunges it again).

Each falls back to the ORM whenever the shortcut could change what the host
sees: listeners on flush, mapper, load or persistence events (Flask-SQLAlchemy's
modification tracking, a ``@reconstructor``), other pending objects, or changes
that are not plain column assignments.

Four private SQLAlchemy calls are used, each in one helper here:
``InstanceState._commit_all`` (what a flush or load does to a written or read
instance), ``Session._register_altered`` (how a flush tells the transaction,
so that a rollback expires the instance), ``Session._register_persistent``
(what a flush does to an inserted one) and ``Mapper.class_manager.new_instance``
(what a load does to build one).
``tests/workflow/test_core_rows.py`` checks the session state they produce, so a
SQLAlchemy release that changes them fails there first.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm.exc import StaleDataError

from flask_geneva import clock

__all__ = [
    "column_keys",
    "flush",
    "insert_step_execution",
    "materialize",
    "materialize_allowed",
]

#: Session events whose listeners expect an ORM flush.
_FLUSH_EVENTS = ("before_flush", "after_flush", "after_flush_postexec")
#: Session events whose listeners expect an ORM load or flush to attach instances.
_ATTACH_EVENTS = (
    "before_attach",
    "after_attach",
    "loaded_as_persistent",
    "detached_to_persistent",
    "pending_to_persistent",
    "transient_to_pending",
)
#: Mapper events fired by a flush.
_MAPPER_FLUSH_EVENTS = (
    "before_insert",
    "after_insert",
    "before_update",
    "after_update",
)

_cache: dict[tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()


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
    attach events are listened to.
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
    identity map is overwritten (unflushed changes included) and marked clean; a
    new one is built without ``__init__`` and attached as persistent. Columns not
    in ``keys`` stay unloaded (a later access loads them).

    Args:
        session: The session the instance belongs to.
        mapper: The instance's mapper (for a workflow, the one its ``type`` names).
        keys: Attribute keys, primary key first (see :func:`column_keys`).
        values: The row's values in the order of ``keys``.
    """
    session = actual_session(session)
    identity = mapper.identity_key_from_primary_key((values[0],))
    instance = session.identity_map.get(identity)
    if instance is None:
        instance = mapper.class_manager.new_instance()
        sa.inspect(instance).dict.update(zip(keys, values, strict=True))
        orm.make_transient_to_detached(instance)
        session.add(instance)
        return instance
    state = sa.inspect(instance)
    values_by_key = state.dict
    values_by_key.update(zip(keys, values, strict=True))
    # populate_existing resets loaded relationships: the next access loads them
    # again (a many-to-one from the identity map, without SQL).
    for key in _relationship_keys(mapper):
        values_by_key.pop(key, None)
    _mark_clean(session, state)
    return instance


def _relationship_keys(mapper: Any) -> tuple[str, ...]:
    key = ("relationships", mapper)
    cached = _cache.get(key)
    if cached is None:
        cached = _cache[key] = tuple(mapper.relationships.keys())
    return cached


# -- writing -------------------------------------------------------------------------


def _flush_events_listened(session: orm.Session, mappers: Any) -> bool:
    """Whether anything a flush would do for ``mappers`` is not done here.

    True with listeners on flush, mapper or ``refresh_flush`` events, or when a
    table has a column updated by ``onupdate``/``server_onupdate`` other than
    ``updated_at`` (its new value would have to be read back).
    """
    dispatch = session.dispatch
    for name in _FLUSH_EVENTS:
        if getattr(dispatch, name):
            return True
    for mapper in mappers:
        mapper_dispatch = mapper.dispatch
        for name in _MAPPER_FLUSH_EVENTS:
            if getattr(mapper_dispatch, name):
                return True
        if mapper.class_manager.dispatch.refresh_flush:
            return True
        if _has_other_onupdate(mapper.local_table):
            return True
    return False


def _has_other_onupdate(table: sa.Table) -> bool:
    key = ("other-onupdate", table)
    cached = _cache.get(key)
    if cached is None:
        cached = _cache[key] = any(
            (column.onupdate is not None or column.server_onupdate is not None)
            and column.name != "updated_at"
            for column in table.columns
        )
    return bool(cached)


def _column_changes(state: Any) -> dict[str, Any] | None:
    """Changed columns of ``state`` as ``{column name: new value}``, or None.

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
        changes[prop.columns[0].name] = value
    return changes


def flush(session: orm.Session | orm.scoped_session[Any], geneva: Any) -> None:
    """Flush pending changes; geneva's own row updates go out as Core UPDATEs.

    Step executions are written before workflows, each table in primary-key
    order (the ORM's order). An execution's and its workflow's change go out as
    one statement on PostgreSQL (a data-modifying CTE) and on MySQL/MariaDB (a
    multiple-table UPDATE): one round trip instead of two. ``updated_at`` is set
    as its ``onupdate`` would. Anything else falls back to :meth:`Session.flush`.

    Args:
        session: The session to flush.
        geneva: The :class:`~flask_geneva.Geneva` whose models are written.

    Raises:
        sqlalchemy.orm.exc.StaleDataError: An UPDATE matched no row (the row was
            deleted), as the ORM flush raises.
    """
    session = actual_session(session)
    if session.new or session.deleted:
        session.flush()
        return
    dirty = session.dirty
    if not dirty:
        return
    execution_cls, workflow_cls = geneva.StepExecution, geneva.Workflow
    planned: list[tuple[Any, dict[str, Any]]] = []
    for owner in (execution_cls, workflow_cls):
        # Primary-key order within a table, as the unit of work sorts them.
        for state in sorted(
            (sa.inspect(instance) for instance in dirty if isinstance(instance, owner)),
            key=lambda state: state.key[1],
        ):
            changes = _column_changes(state)
            if changes is None:
                session.flush()
                return
            planned.append((state, changes))
    if len(planned) != len(dirty) or _flush_events_listened(
        session, {state.mapper for state, _ in planned}
    ):
        session.flush()
        return
    writes = [(state, changes) for state, changes in planned if changes]
    if writes:
        now = clock.now()
        for _, changes in writes:
            changes.setdefault("updated_at", now)
        connection = session.connection()
        dialect = connection.dialect.name
        # The executor's pair: one execution and its own workflow.
        pair = (
            len(writes) == 2
            and writes[0][0].mapper.local_table is execution_cls.__table__
            and writes[1][0].mapper.local_table is workflow_cls.__table__
            and writes[0][0].dict.get("workflow_id") == writes[1][0].key[1][0]
        )
        if pair and dialect == "postgresql":
            _update_pair(connection, writes)
        elif pair and dialect in ("mysql", "mariadb"):
            _update_pair_multi_table(connection, writes)
        else:
            for state, changes in writes:
                statement = _update_statement(
                    state.mapper.local_table, tuple(sorted(changes))
                )
                result = connection.execute(
                    statement, {**changes, "geneva_pk": state.key[1][0]}
                )
                _check_updated(state, result.rowcount)
        for state, changes in writes:
            state.dict["updated_at"] = changes["updated_at"]
        _register_written(session, [state for state, _ in writes])
    for state, _ in planned:
        _mark_clean(session, state)


def _update_pair(connection: sa.Connection, writes: list[tuple[Any, Any]]) -> None:
    """An execution's and its workflow's UPDATE as one PostgreSQL statement.

    The execution's UPDATE is a data-modifying CTE. PostgreSQL does not define
    which of the two rows it writes first; nothing depends on it: they are in
    different tables, and the caller holds both row locks (SPEC §7).
    """
    (first, first_changes), (second, second_changes) = writes
    statement = _paired_update_statement(
        first.mapper.local_table,
        tuple(sorted(first_changes)),
        second.mapper.local_table,
        tuple(sorted(second_changes)),
    )
    params = {f"a_{name}": value for name, value in first_changes.items()}
    params.update({f"b_{name}": value for name, value in second_changes.items()})
    params["a_pk"] = first.key[1][0]
    params["b_pk"] = second.key[1][0]
    row: Any = connection.execute(statement, params).one_or_none()
    # The statement returns one row when the second UPDATE matched, holding the
    # number of rows the first one matched.
    _check_updated(first, row[0] if row is not None else 0)
    _check_updated(second, 1 if row is not None else 0)


def _update_pair_multi_table(
    connection: sa.Connection, writes: list[tuple[Any, Any]]
) -> None:
    """An execution's and its workflow's UPDATE as one MySQL/MariaDB statement.

    A multiple-table UPDATE joined on ``workflow_id``. Both rows are locked
    already (the executor's lock, SPEC §7), so the order in which InnoDB writes
    them does not matter. The dialect counts matched rows, so anything but 2
    means a row is gone.
    """
    (first, first_changes), (second, second_changes) = writes
    first_table, second_table = first.mapper.local_table, second.mapper.local_table
    key = (
        "update-pair-multi-table",
        first_table,
        tuple(sorted(first_changes)),
        second_table,
        tuple(sorted(second_changes)),
    )
    statement = _cache.get(key)
    if statement is None:
        values: dict[Any, Any] = {
            first_table.c[name]: sa.bindparam(f"a_{name}") for name in first_changes
        }
        values.update(
            {second_table.c[name]: sa.bindparam(f"b_{name}") for name in second_changes}
        )
        statement = _cache[key] = (
            sa.update(first_table)
            .values(values)
            .where(first_table.c.id == sa.bindparam("a_pk"))
            .where(second_table.c.id == sa.bindparam("b_pk"))
            .where(first_table.c.workflow_id == second_table.c.id)
        )
    params = {f"a_{name}": value for name, value in first_changes.items()}
    params.update({f"b_{name}": value for name, value in second_changes.items()})
    params["a_pk"] = first.key[1][0]
    params["b_pk"] = second.key[1][0]
    matched = connection.execute(statement, params).rowcount
    if matched != 2:
        # A multiple-table UPDATE matches nothing when either row is gone.
        _check_updated(first, 0)


def _check_updated(state: Any, count: int) -> None:
    if count != 1:
        raise StaleDataError(
            f"UPDATE statement on table '{state.mapper.local_table.name}' expected "
            f"to update 1 row(s); {count} were matched (id={state.key[1][0]!r})"
        )


def _update_statement(table: sa.Table, names: tuple[str, ...]) -> Any:
    key = ("update", table, names)
    statement = _cache.get(key)
    if statement is None:
        statement = (
            sa.update(table)
            .where(table.c.id == sa.bindparam("geneva_pk"))
            .values({name: sa.bindparam(name) for name in names})
        )
        _cache[key] = statement
    return statement


def _paired_update_statement(
    first: sa.Table,
    first_names: tuple[str, ...],
    second: sa.Table,
    second_names: tuple[str, ...],
) -> Any:
    key = ("update-pair", first, first_names, second, second_names)
    statement = _cache.get(key)
    if statement is None:
        first_update = (
            sa.update(first)
            .where(first.c.id == sa.bindparam("a_pk"))
            .values({name: sa.bindparam(f"a_{name}") for name in first_names})
            .returning(first.c.id)
            .cte("geneva_first_update")
        )
        statement = (
            sa.update(second)
            .where(second.c.id == sa.bindparam("b_pk"))
            .values({name: sa.bindparam(f"b_{name}") for name in second_names})
            .add_cte(first_update)
            .returning(
                sa.select(sa.func.count()).select_from(first_update).scalar_subquery()
            )
        )
        _cache[key] = statement
    return statement


def insert_step_execution(
    session: orm.Session, geneva: Any, execution: Any, absent: frozenset[str]
) -> None:
    """Flush pending changes, then INSERT the new ``execution`` through Core.

    The pending UPDATEs go first: the unique index on active executions
    (R-DM-09) needs the ended execution's new state before the new row arrives.
    Column defaults are evaluated as a flush evaluates them; columns left None
    are left out of the INSERT (so absent optional columns are never named,
    R-DM-32) and read None afterwards, without a reload.

    Args:
        session: The session; ``execution`` is added to it.
        geneva: The :class:`~flask_geneva.Geneva` whose models are written.
        execution: A new (transient) step execution.
        absent: Attribute keys of optional columns missing from the database.
    """
    session = actual_session(session)
    flush(session, geneva)
    state = sa.inspect(execution)
    mapper = state.mapper
    attrs = mapper.attrs
    if _flush_events_listened(session, (mapper,)) or not materialize_allowed(
        session, (mapper,)
    ):
        session.add(execution)
        session.flush()
        return
    values_by_key = state.dict
    for key in values_by_key:
        if key in attrs and not isinstance(attrs[key], orm.ColumnProperty):
            session.add(execution)
            session.flush()
            return
    row: dict[str, Any] = {}
    for prop in mapper.column_attrs:
        if prop.key in absent:
            continue
        column = prop.columns[0]
        value = values_by_key.get(prop.key)
        default = column.default
        if value is None and default is not None:
            if default.is_scalar:
                value = default.arg
            elif default.is_callable:
                value = default.arg(None)
            else:  # a SQL expression default: let the ORM evaluate it
                session.add(execution)
                session.flush()
                return
        values_by_key[prop.key] = value
        if value is not None:
            row[column.name] = value
    statement = _cache.get(("insert", mapper.local_table))
    if statement is None:
        statement = _cache[("insert", mapper.local_table)] = sa.insert(
            mapper.local_table
        )
    session.add(execution)
    result = session.connection().execute(statement, row)
    if values_by_key.get("id") is None:
        inserted = result.inserted_primary_key
        if inserted is None or inserted[0] is None:
            raise sa.exc.InvalidRequestError(
                "the database returned no primary key for the new step execution"
            )
        values_by_key["id"] = inserted[0]
    _register_inserted(session, state)


def _mark_clean(session: orm.Session, state: Any) -> None:
    """Mark every loaded attribute committed, as a flush or load leaves it."""
    state._commit_all(state.dict, session.identity_map)


def _register_written(session: orm.Session, states: list[Any]) -> None:
    """Tell the transaction these instances were written, as a flush does.

    A rollback (of the transaction or of a savepoint) then expires them, so they
    do not keep values the database no longer has.
    """
    session._register_altered(states)


def _register_inserted(session: orm.Session, state: Any) -> None:
    """Make a pending instance persistent, as a flush does after its INSERT.

    The transaction records it, so a rollback expunges it again.
    """
    session._register_persistent({state})
