"""Geneva's rows in the session: Core reads and writes kept as the ORM keeps them.

The write path (:mod:`flask_geneva.db.write_path`) writes geneva's two tables with
Core statements, and the locking reads (:mod:`flask_geneva.db.locks`) read them
with Core. This module keeps the session's instances as an ORM load or flush
would leave them, through public API only (R-DM-41):

* :func:`materialize` turns a locked row into the session's instance (a new one,
  or the one already in the identity map, overwritten like ``populate_existing``);
  :func:`materialize_allowed` says when it may stand in for an ORM load;
* :func:`settle_written` marks a written (or re-read) instance clean in place
  with ``Session.merge(instance, load=False)`` into its own session;
* :func:`record_write` remembers a Core write of an open transaction or
  savepoint, and session events (``after_rollback``, ``after_soft_rollback``,
  ``after_transaction_end``) undo what a rolled-back one wrote: written
  instances are expired, inserted ones expunged and made transient;
* :func:`bind_of` / :func:`connection_of` give the session's default bind and
  its transaction's connection, read once per session.

``tests/db/test_core_rows.py`` checks the rows and the session states.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

__all__ = [
    "actual_session",
    "bind_of",
    "clear_cache",
    "column_keys",
    "connection_of",
    "mark_committed",
    "materialize",
    "materialize_allowed",
    "record_write",
    "relationship_keys",
    "settle_written",
    "settle_written_state",
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


def actual_session(session: orm.Session | orm.scoped_session[Any]) -> orm.Session:
    """The :class:`~sqlalchemy.orm.Session` behind ``session`` (or a scoped one)."""
    if isinstance(session, orm.scoped_session):
        resolved: orm.Session = session()
        return resolved
    return session


def clear_cache() -> None:
    """Forget the column and key lists of the mapped classes (a schema change)."""
    with _cache_lock:
        _cache.clear()


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
            for key in relationship_keys(mapper):
                values_by_key.pop(key, None)
            values_by_key.update(zip(keys, values, strict=True))
            return instance
        values_by_key = state.dict
        # populate_existing resets loaded relationships: the next access loads
        # them again (a many-to-one from the identity map, without SQL).
        for key in relationship_keys(mapper):
            values_by_key.pop(key, None)
        values_by_key.update(zip(keys, values, strict=True))
        mark_committed(session, instance)
        return instance
    values_by_key.update(zip(keys, values, strict=True))
    orm.make_transient_to_detached(instance)
    session.add(instance)
    return instance


def relationship_keys(mapper: Any) -> tuple[str, ...]:
    """Keys of ``mapper``'s relationships (cached), reset on a load or a write."""
    key = ("relationships", mapper)
    cached = _cache.get(key)
    if cached is None:
        cached = _cache[key] = tuple(mapper.relationships.keys())
    return cached


# -- keeping the session in step -----------------------------------------------------


def settle_written(session: orm.Session, instance: Any) -> None:
    """Leave a written instance clean and persistent, as a flush leaves it.

    Called by the write path (:mod:`flask_geneva.db.write_path`) once the row
    holds the instance's values. Its loaded values are what was written: they
    are marked committed in place (:func:`mark_committed`). Loaded
    relationships are reset: the next access reads them from the identity map.
    """
    settle_written_state(session, sa.inspect(instance))


def settle_written_state(session: orm.Session, state: Any) -> None:
    """:func:`settle_written` for the instance whose ``InstanceState`` is ``state``.

    The write path (:mod:`flask_geneva.db.write_path`) holds the states of the rows
    it wrote already (R-DM-41).

    Args:
        session: The session holding the instance.
        state: ``sa.inspect(instance)`` of a persistent instance whose row holds
            its loaded values.
    """
    values_by_key = state.dict
    relationships, primary_key = _settle_keys(state.mapper)
    for key in relationships:
        if key in values_by_key:
            del values_by_key[key]
    # An expired instance may hold no primary key value: keep its identity.
    for key, value in zip(primary_key, state.key[1], strict=True):
        values_by_key.setdefault(key, value)
    session.merge(state.obj(), load=False)  # mark_committed, inlined


def _settle_keys(mapper: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """:func:`relationship_keys` and the primary key's attribute keys of ``mapper``."""
    key = ("settle", mapper)
    cached = _cache.get(key)
    if cached is None:
        cached = _cache[key] = (relationship_keys(mapper), _primary_key_keys(mapper))
    return cached


def mark_committed(session: orm.Session, instance: Any) -> None:
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


def record_write(session: orm.Session, instance: Any, *, inserted: bool) -> None:
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


event.listen(orm.Session, "after_rollback", _after_rollback)
event.listen(orm.Session, "after_soft_rollback", _after_soft_rollback)
event.listen(orm.Session, "after_transaction_end", _after_transaction_end)
