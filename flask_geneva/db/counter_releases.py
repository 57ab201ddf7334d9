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
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

__all__ = [
    "KEEPS",
    "CounterKeep",
    "CounterRelease",
    "SlotNotKept",
    "keep_ctes",
    "keeps_params",
    "release_ctes",
    "releases_params",
    "send_keeps",
    "send_releases",
]

#: ``Session.info`` key of the :class:`CounterKeep` guards an inline claim set
#: for the next INSERT of a step execution (R-LIM-15).
KEEPS = "geneva_limit_keeps"


class SlotNotKept(Exception):
    """An inline claim's slot could not be kept: a waiter queued meanwhile.

    Raised by the statement that writes the finished execution and inserts
    the claimed one, before anything of it is committed: the caller rolls
    back and finalizes again without continuing inline (R-LIM-15).
    """


@dataclasses.dataclass
class CounterKeep:
    """A slot kept from a finished step for the step claimed inline (R-LIM-15).

    ``UPDATE <keys> SET updated_at = :now WHERE <key> AND waiting = 0``: it
    matches only when nobody waits for the key. On PostgreSQL it is a CTE of
    the statement that inserts the claimed execution, which inserts only when
    it matched; elsewhere it is sent before that INSERT.

    Attributes:
        table: The limit keys table.
        limit_name: The limit.
        limit_key: The key.
        now: ``updated_at``'s new value.
    """

    table: sa.Table
    limit_name: str
    limit_key: str
    now: Any


def _guarded_update(table: sa.Table, prefix: str, *, give_back: bool) -> Any:
    """``UPDATE`` of one key row while nobody waits (parameters ``prefix*``):
    ``running - 1`` for a give-back (a slot must be held), else only
    ``updated_at`` (a keep)."""
    conditions = [
        table.c.limit_name == sa.bindparam(f"{prefix}name"),
        table.c.limit_key == sa.bindparam(f"{prefix}key"),
        table.c.waiting == 0,
    ]
    values: dict[str, Any] = {"updated_at": sa.bindparam(f"{prefix}now")}
    if give_back:
        conditions.append(table.c.running > 0)
        values["running"] = table.c.running - 1
    return sa.update(table).where(*conditions).values(values)


def _keep_update(keep: CounterKeep, prefix: str) -> Any:
    return _guarded_update(keep.table, prefix, give_back=False)


def keep_ctes(keeps: tuple[CounterKeep, ...]) -> list[Any]:
    """The keeps as data-modifying CTEs returning their key (PostgreSQL);
    parameters ``k<index>_*`` (:func:`keeps_params`)."""
    return _numbered_ctes(keeps, "k", "geneva_keep", give_back=False)


def keeps_params(keeps: tuple[CounterKeep, ...]) -> dict[str, Any]:
    """The parameters of :func:`keep_ctes`."""
    return _numbered_params(keeps, "k")


def send_keeps(connection: sa.Connection, keeps: tuple[CounterKeep, ...]) -> None:
    """Send each keep as a statement of its own.

    Raises:
        SlotNotKept: A keep matched no row (a waiter is queued).
    """
    for keep in keeps:
        result = connection.execute(
            _keep_update(keep, "k_"),
            {"k_name": keep.limit_name, "k_key": keep.limit_key, "k_now": keep.now},
        )
        if int(result.rowcount or 0) != 1:
            raise SlotNotKept(
                f"a waiter queued for limit {keep.limit_name!r} key "
                f"{keep.limit_key!r}: the next step is not claimed inline"
            )


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
    return _guarded_update(release.table, prefix, give_back=True)


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
    return _numbered_ctes(releases, "r", "geneva_release", give_back=True)


def releases_params(releases: tuple[CounterRelease, ...]) -> dict[str, Any]:
    """The parameters of :func:`release_ctes`."""
    return _numbered_params(releases, "r")


def _numbered_ctes(
    counters: Sequence[CounterKeep | CounterRelease],
    letter: str,
    name: str,
    *,
    give_back: bool,
) -> list[Any]:
    """Each keep or release as a CTE ``<name>_<index>`` returning its key."""
    return [
        _guarded_update(counter.table, f"{letter}{index}_", give_back=give_back)
        .returning(counter.table.c.limit_name)
        .cte(f"{name}_{index}")
        for index, counter in enumerate(counters)
    ]


def _numbered_params(
    counters: Sequence[CounterKeep | CounterRelease], letter: str
) -> dict[str, Any]:
    """``<letter><index>_name``/``_key``/``_now`` of each keep or release."""
    params: dict[str, Any] = {}
    for index, counter in enumerate(counters):
        prefix = f"{letter}{index}_"
        params[f"{prefix}name"] = counter.limit_name
        params[f"{prefix}key"] = counter.limit_key
        params[f"{prefix}now"] = counter.now
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
