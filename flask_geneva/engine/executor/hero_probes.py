"""The hero check of a delivered step's claim, riding on its locking statement.

Before a step is claimed, a workflow that needs its hero is canceled when the
hero row is gone (R-EXE-13). That check used to load ``workflow.hero`` by the
ORM: a statement of its own in every delivered step's claim. The claim's
locking statement can answer it instead (R-EXE-83): once a delivery in this
process has resolved a hero type on this database, later claims' locking
statements carry, for each such type, an ``EXISTS`` on that type's hero table
(a ``CASE`` on the locked workflow's ``hero_type``, which locks nothing), and
the check reads the answer. A hero type not learned yet, or a session whose
``do_orm_execute`` listeners would change the ORM's load, is checked by the
load as before.

The same conditions let finalize probe the hero of an inline continuation
(R-EXE-78, :func:`probe_key_type`).
"""

from __future__ import annotations

import weakref
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import transactions
from flask_geneva.db import session_sync
from flask_geneva.db.session_transactions import geneva_from_session
from flask_geneva.engine.executor import hero_missing
from flask_geneva.exceptions import HeroTypeNotFoundError

__all__ = [
    "claim_probes",
    "hero_missing_at_claim",
    "loads_plainly",
    "on_the_workflows_database",
    "probe_key_type",
    "probeable_hero",
]

#: Hero class -> the Python type of its one-column primary key, or None.
_probe_key_types: weakref.WeakKeyDictionary[Any, type[Any] | None] = (
    weakref.WeakKeyDictionary()
)

#: Engine -> workflow base class (one per Geneva extension) -> {hero_type:
#: hero class}: the hero types a claim on that database may probe (learned
#: from a load that resolved them). Per engine: another app's database may not
#: hold the same hero tables.
_learned: weakref.WeakKeyDictionary[
    Any, weakref.WeakKeyDictionary[Any, dict[str, Any]]
] = weakref.WeakKeyDictionary()


def probe_key_type(hero_cls: Any) -> type[Any] | None:
    """The Python type of ``hero_cls``'s primary key, if one column; else None.

    A mapped class's primary key does not change: read once per class.

    Args:
        hero_cls: A mapped class.
    """
    try:
        return _probe_key_types[hero_cls]
    except KeyError:
        pass
    keys = sa.inspect(hero_cls).primary_key
    key_type: type[Any] | None = None
    if len(keys) == 1:
        try:
            key_type = keys[0].type.python_type
        except NotImplementedError:
            key_type = None
    _probe_key_types[hero_cls] = key_type
    return key_type


def loads_plainly(session: orm.Session) -> bool:
    """Whether an ORM load in ``session`` reads the row as a plain SELECT would.

    False when a ``do_orm_execute`` listener other than geneva's own is set
    (its criteria, a soft-delete filter say, would apply to the hero's load
    and not to an ``EXISTS``).
    """
    listeners = session_sync.actual_session(session).dispatch.do_orm_execute
    return all(transactions.is_own_listener(fn) for fn in listeners)


def on_the_workflows_database(session: orm.Session, hero_cls: Any) -> bool:
    """Whether ``hero_cls``'s rows are on the database the workflows are locked on.

    A hero model of another bind (Flask-SQLAlchemy's ``__bind_key__``) lives on
    another database, where a probe in the workflows' statement cannot look.

    Args:
        session: The session the workflows are locked in.
        hero_cls: The hero's mapped class.
    """
    actual = session_sync.actual_session(session)
    hero_bind = actual.get_bind(mapper=sa.inspect(hero_cls))
    return hero_bind is session_sync.bind_of(session)


def _learned_for(session: orm.Session) -> dict[str, Any] | None:
    engine = session_sync.bind_of(session)
    return _learned.get(engine, {}).get(geneva_from_session(session).Workflow)


def claim_probes(session: orm.Session) -> tuple[tuple[str, Any], ...]:
    """The ``(hero_type, hero class)`` pairs a claim's locking statement probes.

    Args:
        session: The session the claim locks in (its Geneva extension's
            workflows are claimed).

    Returns:
        The hero types learned on the session's database, sorted by name;
        ``()`` when none is or the session's loads are not plain
        (:func:`loads_plainly`).
    """
    learned = _learned_for(session)
    if not learned or not loads_plainly(session):
        return ()
    return tuple(sorted(learned.items()))


def probeable_hero(session: orm.Session, workflow: Any) -> tuple[Any, str, Any] | None:
    """``(hero class, hero_type, hero_id)`` of the workflow's hero, if a probe
    can answer for it (R-EXE-78, R-EXE-83); else None.

    It can when the hero columns are set, ``hero_type`` resolves to a mapped
    class with a one-column primary key of the stored id's type, whose table
    is on the workflows' database, and the session's loads are plain
    (:func:`loads_plainly`).

    Args:
        session: The session the workflow is locked in.
        workflow: A workflow instance whose columns are loaded.
    """
    values = sa.inspect(workflow).dict
    hero_type, hero_id = values.get("hero_type"), values.get("hero_id")
    if hero_type is None or hero_id is None:
        return None
    try:
        hero_cls = workflow.__geneva__.hero_class(hero_type)
    except HeroTypeNotFoundError:
        return None
    key_type = probe_key_type(hero_cls)
    if key_type is None or not isinstance(hero_id, key_type):
        return None
    if not loads_plainly(session) or not on_the_workflows_database(session, hero_cls):
        return None
    return hero_cls, hero_type, hero_id


def _learn(session: orm.Session, workflow: Any) -> None:
    """Note the workflow's hero type as probeable, when it can be (R-EXE-83)."""
    hero = probeable_hero(session, workflow)
    if hero is None:
        return
    hero_cls, hero_type, _ = hero
    engine = session_sync.bind_of(session)
    by_base = _learned.setdefault(engine, weakref.WeakKeyDictionary())
    base = geneva_from_session(session).Workflow
    by_base.setdefault(base, {})[hero_type] = hero_cls


def hero_missing_at_claim(session: orm.Session, workflow: Any, present: Any) -> bool:
    """Whether the locked workflow needs its hero and it is gone (R-EXE-13).

    Args:
        session: The claim's session.
        workflow: The locked workflow.
        present: The locking statement's answer for this workflow's hero
            (R-EXE-83), or None when it did not probe it: then the hero is
            loaded, and its type learned for the next claims.

    Raises:
        HeroTypeNotFoundError: ``hero_type`` names no mapped class (R-HERO-03).
    """
    if type(workflow).may_proceed_without_hero:
        return False
    if present is not None:
        return not present
    missing = hero_missing.needs_missing_hero(workflow)
    _learn(session, workflow)
    return missing
