"""``flask geneva limits [NAME] [--json]``: who holds and who waits (R-LIM-40).

One line per (limit, key) with activity, most waiting first::

    partner-api  key=acme    running 2/2  granted 0  waiting 14 (oldest 3 min 12 s)
    partner-api  key=globex  running 1/2  granted 0  waiting 0
    exports      idle (concurrency 5)

A declared limit (``geneva.limits``) with no busy key reads ``idle``. At most
:data:`~flask_geneva.db.queries.limits.MAX_OVERVIEW_KEYS` keys, then ``… N more
keys``. ``--json`` prints the same data. A rate-limited key's line ends with its
use of the window, the starts within the last ``per`` by the database's clock
(``rate 97/100 per 1 min``), and, when it is full, when it allows the next
start (``rate 100/100 per 1 min (next start in 4 s)``; R-LIM-23). Without the
``add_flow_limits`` unit the command says how to install it. Only reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import click
from flask.cli import with_appcontext

from flask_geneva.cli.lookup import current_geneva
from flask_geneva.cli.output import echo_table
from flask_geneva.core import clock
from flask_geneva.core.durations import format_interval
from flask_geneva.core.terminal_text import escape_control_characters
from flask_geneva.db.queries import limits as limit_reads
from flask_geneva.engine.limits import installed

__all__ = [
    "NOT_INSTALLED_MESSAGE",
    "limits_command",
    "limits_report",
    "rate_text",
    "settings_text",
]

#: What ``flask geneva limits`` says without the ``add_flow_limits`` unit.
NOT_INSTALLED_MESSAGE = (
    "limits are not installed in this database (install unit add_flow_limits): "
    "run `flask geneva install`, then `flask db upgrade`"
)


@click.command("limits")
@with_appcontext
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
def limits_command(name: str | None, as_json: bool) -> None:
    """Show the limits' keys: running, granted and waiting executions, rate used.

    One line per limit and key with something running, granted or waiting,
    most waiting first (at most 200 keys), with a rate limit's starts in its
    current window; a declared limit with nothing going on reads "idle". NAME
    shows one limit.
    \f
    Spec: R-LIM-40.
    """
    geneva = current_geneva()
    session = geneva.session
    if not installed(session):
        session.rollback()
        raise click.ClickException(NOT_INSTALLED_MESSAGE)
    try:
        report = limits_report(session, geneva.limits, name)
    finally:
        session.rollback()
    if report is None:
        declared = ", ".join(geneva.limits) or "(none)"
        raise click.UsageError(
            f"unknown limit {escape_control_characters(repr(name))}; "
            f"declared limits: {declared}"
        )
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    _echo_report(report)


def limits_report(
    session: Any, declared: Mapping[str, Any], name: str | None
) -> dict[str, Any] | None:
    """The data of ``flask geneva limits`` as a JSON-ready dict (R-LIM-40).

    Args:
        session: A session bound to the models (the caller ends the read
            transaction); the ``add_flow_limits`` unit must be installed.
        declared: ``geneva.limits`` (``{name: Limit}``).
        name: One limit's name, or None for all.

    Returns:
        None when ``name`` is neither declared nor has stored keys; else
        ``{"keys": [{"limit", "key", "running", "granted", "waiting",
        "concurrency", "oldest_waiting_since", "oldest_wait_seconds", "rate",
        "per_seconds", "rate_used", "next_start_at",
        "next_start_in_seconds"}, ...], "more_keys": N, "idle_limits":
        [{"limit", "concurrency", "rate", "per_seconds"}, ...]}``: the busy
        keys most waiting first (at most
        :data:`~flask_geneva.db.queries.limits.MAX_OVERVIEW_KEYS`), how many
        busy keys are left out, and the declared limits without a busy key.
        ``rate`` and ``per_seconds`` are those the key's last claim used
        (None without a rate limit), ``rate_used`` its starts within the last
        ``per`` by the database's clock, ``next_start_at`` (ISO) and
        ``next_start_in_seconds`` (by the database's clock) when a full window
        allows the next start, else None (R-LIM-23, R-LIM-40).
    """
    totals = {t.limit_name: t for t in limit_reads.limit_totals(session)}
    if name is not None and name not in declared and name not in totals:
        return None
    overview = limit_reads.limit_overview(
        session, name=name, busy_only=True, limit=limit_reads.MAX_OVERVIEW_KEYS
    )
    now = clock.now()
    keys = []
    for row in overview.keys:
        oldest = row.oldest_waiting_since
        keys.append(
            {
                "limit": row.limit_name,
                "key": row.limit_key,
                "running": row.running,
                "granted": row.granted,
                "waiting": row.waiting,
                "concurrency": _concurrency(declared, row),
                "oldest_waiting_since": None if oldest is None else oldest.isoformat(),
                "oldest_wait_seconds": None
                if oldest is None
                else max(0.0, (now - oldest).total_seconds()),
                **_rate_use(row),
            }
        )
    names = [name] if name is not None else list(declared)
    idle = [
        {"limit": limit_name, **_settings(declared.get(limit_name))}
        for limit_name in names
        if limit_name not in totals or not totals[limit_name].busy_keys
    ]
    return {"keys": keys, "more_keys": overview.more, "idle_limits": idle}


def _rate_use(row: limit_reads.KeyActivity) -> dict[str, Any]:
    """A key's rate fields for ``--json`` (R-LIM-23, R-LIM-40)."""
    per = row.per
    next_at = row.next_start_at
    next_in = None
    if next_at is not None:
        read_at = row.read_at if row.read_at is not None else clock.now()
        next_in = max(0.0, (next_at - read_at).total_seconds())
    return {
        "rate": row.rate,
        "per_seconds": None if per is None else per.total_seconds(),
        "rate_used": row.rate_used,
        "next_start_at": None if next_at is None else next_at.isoformat(),
        "next_start_in_seconds": next_in,
    }


def rate_text(entry: Mapping[str, Any]) -> str:
    """``rate 97/100 per 1 min``, ``(next start in 4 s)`` added when the window
    is full; ``""`` for a key without a rate (R-LIM-40).

    Args:
        entry: One of :func:`limits_report`'s ``keys``.

    Returns:
        The text of the key's rate column.
    """
    if entry.get("rate") is None or entry.get("per_seconds") is None:
        return ""
    text = (
        f"rate {entry['rate_used']}/{entry['rate']} per "
        f"{format_interval(entry['per_seconds'])}"
    )
    if entry.get("next_start_in_seconds") is not None:
        # Rounded up: "in 0 s" would read as "now" while no start is allowed.
        wait = math.ceil(entry["next_start_in_seconds"])
        text += f" (next start in {format_interval(wait)})"
    return text


def _settings(limit: Any) -> dict[str, Any]:
    """A declared limit's settings for ``idle_limits``: concurrency, rate, per."""
    per = getattr(limit, "per", None)
    return {
        "concurrency": getattr(limit, "concurrency", None),
        "rate": getattr(limit, "rate", None),
        "per_seconds": None if per is None else per.total_seconds(),
    }


def settings_text(concurrency: Any, rate: Any, per_seconds: Any) -> str:
    """``concurrency 5``, ``rate 100 per 1 min`` or both, comma-separated."""
    parts = []
    if concurrency is not None:
        parts.append(f"concurrency {concurrency}")
    if rate is not None and per_seconds is not None:
        parts.append(f"rate {rate} per {format_interval(per_seconds)}")
    return ", ".join(parts)


def _concurrency(declared: Mapping[str, Any], row: Any) -> int | None:
    """The cap shown: this process's declaration, else the one stored by the
    last claim (a limit no class declares any more)."""
    limit = declared.get(row.limit_name)
    concurrency = getattr(limit, "concurrency", None)
    return int(concurrency) if concurrency is not None else row.concurrency


def key_label(key: str) -> str:
    """``key=acme``; the global key reads ``global``; odd keys are quoted."""
    if key == "":
        return "global"
    if key.strip() != key or any(c.isspace() for c in key) or '"' in key:
        return f"key={json.dumps(key)}"
    return f"key={key}"


def _echo_report(report: dict[str, Any]) -> None:
    rows = []
    for entry in report["keys"]:
        cap = entry["concurrency"]
        waiting = f"waiting {entry['waiting']}"
        if entry["oldest_wait_seconds"] is not None:
            oldest = format_interval(int(entry["oldest_wait_seconds"]))
            waiting += f" (oldest {oldest})"
        rows.append(
            [
                entry["limit"],
                key_label(entry["key"]),
                f"running {entry['running']}" + (f"/{cap}" if cap is not None else ""),
                f"granted {entry['granted']}",
                waiting,
                rate_text(entry),
            ]
        )
    if rows:
        echo_table(rows)  # cells escaped there: keys are stored text
    if report["more_keys"]:
        more = report["more_keys"]
        click.echo(f"… {more} more key{'s' if more != 1 else ''}")
    for entry in report["idle_limits"]:
        text = settings_text(entry["concurrency"], entry["rate"], entry["per_seconds"])
        settings = f" ({text})" if text else ""
        click.echo(f"{escape_control_characters(entry['limit'])}  idle{settings}")
    if not rows and not report["idle_limits"]:
        click.echo("no limits declared and no limit keys stored")
