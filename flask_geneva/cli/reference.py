"""Reference pages written from the code: settings and ``flask geneva`` commands.

The documentation site includes these (``docs/hooks.py`` puts them where a page
says ``<!-- geneva:settings -->`` or ``<!-- geneva:cli -->``), so the settings
table follows :data:`flask_geneva.core.config.DEFAULTS` and the command reference
follows the Click group, and neither can drift from the code. Pure text: no app,
no database.
"""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

import click

__all__ = ["cli_reference", "format_default", "settings_reference"]

_SEPARATOR = "| --- | --- | --- |"
_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def format_default(value: Any) -> str:
    """Write a setting's default as the reference shows it.

    Durations are written in the largest whole unit (``30 days``, ``1 hour``),
    the ``GENEVA_ENQUEUE_AFTER_COMMIT`` sentinel as ``not app.testing``, other
    values with ``repr`` (``None``, ``1000``, ``'celery'``).

    Args:
        value: The default from :data:`flask_geneva.core.config.DEFAULTS`.

    Returns:
        The text, without Markdown.
    """
    from flask_geneva.core.config import NOT_TESTING

    if value == NOT_TESTING:
        return "not app.testing"
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        for unit, size in _UNITS:
            if seconds >= size and seconds % size == 0:
                count = int(seconds // size)
                return f"{count} {unit}{'' if count == 1 else 's'}"
        return f"{seconds:g} seconds"
    return repr(value)


def settings_reference() -> str:
    """Markdown table of every ``GENEVA_*`` setting: name, default, meaning.

    Rows follow :data:`~flask_geneva.core.config.DEFAULTS` in its order; a setting
    without an entry in :data:`~flask_geneva.core.config.SETTING_DESCRIPTIONS` is
    written "(not described yet)", and a test fails on it.

    Returns:
        A Markdown table (header, separator and one row per setting).
    """
    from flask_geneva.core.config import DEFAULTS
    from flask_geneva.core.config import SETTING_DESCRIPTIONS

    lines = ["| Setting | Default | Meaning |", "| --- | --- | --- |"]
    for key, value in DEFAULTS.items():
        meaning = SETTING_DESCRIPTIONS.get(key, "(not described yet)")
        lines.append(f"| `{key}` | `{format_default(value)}` | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def cli_reference(group: click.Group | None = None) -> str:
    """Markdown reference of every ``flask geneva`` command, from Click.

    Args:
        group: The Click group to describe; by default ``flask geneva``
            (:data:`flask_geneva.cli.geneva_group`).

    Returns:
        One section per command, in name order: usage, help text, and a table of
        its arguments and options with their defaults.
    """
    if group is None:
        from flask_geneva.cli import geneva_group

        group = geneva_group
    parent = click.Context(click.Group("flask"), info_name="flask")
    group_context = click.Context(group, info_name=group.name, parent=parent)
    sections = []
    for name in sorted(group.commands):
        command = group.commands[name]
        context = click.Context(command, info_name=name, parent=group_context)
        usage = " ".join(command.collect_usage_pieces(context))
        lines = [
            f"### `flask {group.name} {name}`",
            "",
            "```text",
            f"flask {group.name} {name} {usage}".rstrip(),
            "```",
            "",
            inspect.cleandoc(command.help or ""),
            "",
        ]
        rows = [
            row
            for row in (_param_row(param, context) for param in command.params)
            if row is not None
        ]
        if rows:
            lines += [
                "| Argument or option | Default | Meaning |",
                "| --- | --- | --- |",
            ]
            lines += rows
            lines.append("")
        sections.append("\n".join(lines))
    return "\n".join(sections)


def _param_row(param: click.Parameter, context: click.Context) -> str | None:
    if getattr(param, "hidden", False):
        return None
    if isinstance(param, click.Option):
        names = ", ".join(f"`{opt}`" for opt in param.opts + param.secondary_opts)
        if not param.is_flag:
            names += f" `{param.make_metavar(context)}`"
        meaning = param.help or ""
        default = param.get_default(context, call=False)
    else:
        names = f"`{param.make_metavar(context)}`"
        meaning = "required" if param.required else "optional"
        default = None
    plain = isinstance(default, str | int | float) and not isinstance(default, bool)
    shown = f"`{default}`" if plain else ""
    return f"| {names} | {shown} | {_cell(meaning)} |"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def transitions_reference() -> str:
    """Markdown reference of the transition table, one section per entry.

    Generated from :data:`flask_geneva.engine.transitions.table.TABLE` in its order: who
    applies the entry, when, the execution and workflow it starts from and what it
    writes to each, what it schedules, and the SPEC rules it implements.

    Returns:
        Markdown: an overview table, then one ``###`` section per transition.
    """
    from flask_geneva.engine.transitions.table import TABLE

    lines = [
        "| Transition | By | Execution | Workflow | Schedules |",
        "| --- | --- | --- | --- | --- |",
    ]
    for entry in TABLE:
        lines.append(
            f"| [`{entry.name}`](#{entry.name}) | {entry.actor} | "
            f"{_cell(_execution_change(entry))} | {_cell(_workflow_change(entry))} | "
            f"{_cell(_schedules_short(entry))} |"
        )
    for entry in TABLE:
        lines += [
            "",
            f"### `{entry.name}`",
            "",
            entry.summary,
            "",
            f"- **Applied by:** {entry.actor}",
            f"- **Step execution:** {_execution_change(entry)}",
            f"- **Workflow:** {_workflow_change(entry)}",
            f"- **Schedules:** {entry.schedules.value}",
            f"- **Rules:** {', '.join(entry.rules)}",
        ]
    return "\n".join(lines) + "\n"


def _states(states: Any) -> str:
    # Execution and workflow states share spellings: order by the set's own enum.
    order = list(type(next(iter(states))).__members__.values()) if states else []
    return ", ".join(f"`{state}`" for state in sorted(states, key=order.index))


def _execution_change(entry: Any) -> str:
    write = entry.execution
    if write is None:
        return "not touched"
    outcomes = " or ".join(f"`{outcome}`" for outcome in write.outcomes)
    target = f"`{write.to}`" + (f" / {outcomes}" if outcomes else "")
    text = f"{_states(write.from_states)} → {target}"
    return text + (" (if there is one)" if write.optional else "")


def _workflow_change(entry: Any) -> str:
    write = entry.workflow
    if write is None:
        return "not touched"
    source = _states(write.from_states) if write.from_states else "a new row"
    if write.to:
        target = " or ".join(f"`{state}`" for state in write.to)
    else:
        target = "unchanged"
    text = f"{source} → {target}"
    if write.clears:
        text += "; clears " + ", ".join(f"`{name}`" for name in write.clears)
    return text


def _schedules_short(entry: Any) -> str:
    return str(entry.schedules.name).lower().replace("_", " ")
