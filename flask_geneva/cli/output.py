"""How the ``flask geneva`` commands print: tables, times, one-line text.

Stored text is escaped
(:func:`~flask_geneva.core.terminal_text.escape_control_characters`)
before it reaches the terminal.
"""

from __future__ import annotations

from typing import Any

import click

from flask_geneva.core.terminal_text import escape_control_characters

__all__ = ["echo_table", "format_time", "one_line"]


def one_line(text: str) -> str:
    """Return ``text`` with every run of whitespace (newlines too) as one space."""
    return " ".join(text.split())


def format_time(value: Any) -> str:
    """A datetime to the second (``2026-01-31 12:00:00``), ``-`` for None."""
    if value is None:
        return "-"
    return str(value.isoformat(sep=" ", timespec="seconds"))


def echo_table(rows: list[list[str]]) -> None:
    """Print ``rows`` (the first is the header) as left-aligned columns.

    Args:
        rows: Rows of cells, all of the same length; cells may hold stored text.
    """
    # Cells hold stored text: escape control characters before measuring widths.
    rows = [[escape_control_characters(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(
                cell.ljust(w) for cell, w in zip(row, widths, strict=True)
            ).rstrip()
        )
