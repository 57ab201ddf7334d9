"""One batch of a fire's heroes, and where the next batch starts (R-SCHED-22).

A schedule's ``heroes`` callable is called again for every batch and may return:

* ``None`` as the callable itself (no ``heroes=``): one workflow without a hero;
* a SQLAlchemy ``Select`` or ORM ``Query`` of one mapped class: read in keyset
  batches by that class's primary key (the query's own order is replaced), the
  cursor being the last primary key done, so a resumed fire continues after it
  even when rows were added or removed meanwhile;
* one mapped instance: a batch of one;
* ``None`` from the callable: no heroes (the fire starts nothing);
* any other iterable (a list, a generator): batches by position, the cursor
  being how many items were done; a resumed fire calls the callable again
  and skips that many, so it must return the same order to resume exactly (a
  hero done twice is still skipped while its workflow is ongoing, R-UNQ-01).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.cursors import deserialize_cursor
from flask_geneva.core.cursors import serialize_cursor
from flask_geneva.db.schedules import hero_key_attribute
from flask_geneva.db.schedules import heroes_after
from flask_geneva.dsl.schedules import Schedule

__all__ = ["HeroBatch", "HeroesError", "next_batch"]


class HeroesError(Exception):
    """The ``heroes`` callable returned something no batch can be read from."""


@dataclasses.dataclass(frozen=True)
class HeroBatch:
    """One batch of heroes (R-SCHED-22).

    Attributes:
        heroes: The heroes, in order (``[None]`` for a hero-less fire).
        cursor: Where the batch after this one starts (JSON text).
        last: No batch follows.
    """

    heroes: list[Any]
    cursor: str | None
    last: bool


def next_batch(
    session: orm.Session, schedule: Schedule, cursor: str | None
) -> HeroBatch:
    """Call ``schedule.heroes`` and read the batch that starts at ``cursor``.

    Args:
        session: The fan-out batch's session (queries run in it).
        schedule: The schedule.
        cursor: The stored cursor of the fire (None: from the start).

    Raises:
        HeroesError: The callable returned a str, bytes, a mapping or something
            that is neither a hero, an iterable nor a query.
        Exception: Whatever the callable or the query raised.
    """
    if schedule.heroes is None:
        return HeroBatch([None], None, last=True)
    state = json.loads(cursor) if cursor else {}
    found = schedule.heroes()
    size = schedule.batch_size
    if found is None:
        return HeroBatch([], None, last=True)
    if isinstance(found, sa.Select | orm.Query):
        return _keyset_batch(session, found, state, size)
    if _is_mapped_instance(found):
        return HeroBatch([found], None, last=True)
    if isinstance(found, str | bytes | dict) or not isinstance(found, Iterable):
        raise HeroesError(
            f"schedule {schedule.name!r}: heroes() returned {type(found).__name__} "
            f"{_short(found)}; return one hero (a mapped instance), an iterable "
            "of heroes, a SQLAlchemy select/query, or None"
        )
    position = int(state.get("position", 0))
    items = list(itertools.islice(iter(found), position, position + size + 1))
    last = len(items) <= size
    items = items[:size]
    return HeroBatch(items, json.dumps({"position": position + len(items)}), last=last)


def _keyset_batch(
    session: orm.Session, found: Any, state: dict[str, Any], size: int
) -> HeroBatch:
    key_attribute = hero_key_attribute(found)
    if key_attribute is None:
        raise HeroesError(
            "heroes() returned a query that does not select one mapped class "
            "with a single-column primary key; select the hero class itself, "
            "e.g. sa.select(User).where(User.active)"
        )
    after = deserialize_cursor(state["after"]) if "after" in state else None
    rows = heroes_after(session, found, key_attribute, after, size + 1)
    last = len(rows) <= size
    rows = rows[:size]
    if not rows:
        return HeroBatch([], None, last=True)
    last_key = getattr(rows[-1], key_attribute.key)
    cursor = json.dumps({"after": serialize_cursor(last_key)})
    return HeroBatch(rows, cursor, last=last)


def _is_mapped_instance(value: Any) -> bool:
    mapper = sa.inspect(type(value), raiseerr=False)
    return isinstance(mapper, orm.Mapper)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
