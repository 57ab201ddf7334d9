"""A limit slot given back with the write that ends its holder (R-LIM-20).

:class:`CounterRelease` is the guarded decrement of a limit key's ``running``
counter, ``UPDATE ... WHERE <key> AND waiting = 0 AND running > 0``: the
give-back when nobody waits. :mod:`flask_geneva.db.row_updates` folds it into
the statement that writes the holder on PostgreSQL (:func:`release_ctes`) and
sends it right after elsewhere (:func:`send_releases`).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import sqlalchemy as sa

__all__ = ["CounterRelease", "release_ctes", "releases_params", "send_releases"]

_statements: dict[Any, Any] = {}
_statements_lock = threading.Lock()


@dataclasses.dataclass
class CounterRelease:
    """A limit slot given back with the UPDATE that ends its holder (R-LIM-20).

    ``UPDATE <keys> SET running = running - 1 WHERE <key> AND waiting = 0 AND
    running > 0``: the give-back when nobody waits. On PostgreSQL it is one
    more data-modifying CTE of the statement that writes the holder (and its
    workflow, and the next execution's INSERT), so it costs no statement of
    its own; elsewhere it follows the UPDATEs. ``released`` tells whether it
    matched; when it did not (waiters are queued), the write path's listener
    gives the slot back under the key row's lock.

    Attributes:
        table: The limit keys table.
        limit_name: The limit.
        limit_key: The key.
        now: ``updated_at``'s new value.
        sent: Whether it was sent (with the holder's UPDATE).
        released: Set once sent: whether the row matched.
    """

    table: sa.Table
    limit_name: str
    limit_key: str
    now: Any
    sent: bool = False
    released: bool = False


def _release_update(release: CounterRelease, prefix: str) -> Any:
    """The guarded decrement of :class:`CounterRelease` (parameters ``prefix*``)."""
    table = release.table
    return (
        sa.update(table)
        .where(
            table.c.limit_name == sa.bindparam(f"{prefix}name"),
            table.c.limit_key == sa.bindparam(f"{prefix}key"),
            table.c.waiting == 0,
            table.c.running > 0,
        )
        .values(running=table.c.running - 1, updated_at=sa.bindparam(f"{prefix}now"))
    )


def _release_params(release: CounterRelease, prefix: str) -> dict[str, Any]:
    return {
        f"{prefix}name": release.limit_name,
        f"{prefix}key": release.limit_key,
        f"{prefix}now": release.now,
    }


def release_ctes(releases: tuple[CounterRelease, ...]) -> list[Any]:
    """The releases as data-modifying CTEs returning their key (PostgreSQL).

    Their parameters are ``r<index>_*`` (:func:`releases_params`).
    """
    return [
        _release_update(release, f"r{index}_")
        .returning(release.table.c.limit_name)
        .cte(f"geneva_release_{index}")
        for index, release in enumerate(releases)
    ]


def releases_params(releases: tuple[CounterRelease, ...]) -> dict[str, Any]:
    """The parameters of :func:`release_ctes`."""
    params: dict[str, Any] = {}
    for index, release in enumerate(releases):
        params.update(_release_params(release, f"r{index}_"))
    return params


def send_releases(
    connection: sa.Connection, releases: tuple[CounterRelease, ...]
) -> None:
    """Send each release as a statement of its own (no CTE to fold it into);
    set its ``sent`` and ``released``."""
    for release in releases:
        statement = _statements.get(release.table)
        if statement is None:
            statement = _statements[release.table] = _release_update(release, "r_")
        result = connection.execute(statement, _release_params(release, "r_"))
        release.sent, release.released = True, int(result.rowcount or 0) == 1
