"""What the ``flask geneva`` commands look up: the app's Geneva and typed ids."""

from __future__ import annotations

from typing import Any

import click

from flask_geneva import keys
from flask_geneva.app_state import current_state

__all__ = ["current_geneva", "parse_key_argument"]


def current_geneva() -> Any:
    """Return the :class:`~flask_geneva.Geneva` of the app in the current context."""
    return current_state().geneva


def parse_key_argument(raw: str, *, what: str) -> Any:
    """Parse a primary key given on the command line for the configured key type.

    Args:
        raw: The text given on the command line.
        what: What the key is, for the message (``"workflow id"``, ``"hero id"``).

    Returns:
        The key (an int, or a UUID with ``key_type="uuid"``).

    Raises:
        click.ClickException: ``raw`` is not a valid key; the message names the
            value and what is accepted.
    """
    key_type = current_geneva().key_type
    key = keys.parse_key(raw, key_type)
    if key is None:
        raise click.ClickException(
            f"invalid {what} {raw!r}: expected {keys.describe_key_type(key_type)}"
        )
    return key
