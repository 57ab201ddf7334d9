"""The admin's look-up of a hero by its label column (R-ADM-203).

A hero model may name a label column (``__geneva_hero_label__ = "email"``); the
admin's "Start a workflow" form then finds heroes whose label starts with the
typed text. One bounded read on the host's own table: a prefix match ordered
by the label, ``LIMIT`` rows at most, so a table of millions is never listed
(an index on the column keeps it quick on a large table).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

__all__ = ["heroes_by_label"]


def heroes_by_label(
    session: orm.Session, hero_cls: Any, column: Any, prefix: str, *, limit: int
) -> list[Any]:
    """The heroes whose ``column`` starts with ``prefix``, by that column.

    Args:
        session: The admin's session (a plain read, no lock).
        hero_cls: The hero model.
        column: Its mapped label column attribute (e.g. ``User.email``).
        prefix: The text typed; ``%`` and ``_`` match themselves.
        limit: Most rows returned.

    Returns:
        Up to ``limit`` model instances, ordered by the label, then the key.
    """
    key = sa.inspect(hero_cls).primary_key[0]
    statement = (
        sa.select(hero_cls)
        .where(column.startswith(prefix, autoescape=True))
        .order_by(column, key)
        .limit(limit)
    )
    return list(session.scalars(statement))
