"""What the ``flask geneva`` commands look up: the app's Geneva and typed ids."""

from __future__ import annotations

import re
from typing import Any

import click
from flask import has_app_context
from flask.cli import ScriptInfo

from flask_geneva.core import keys
from flask_geneva.core.terminal_text import escape_control_characters
from flask_geneva.ext.app_state import current_state

__all__ = [
    "IdArgumentsCommand",
    "OneIdArgumentCommand",
    "current_geneva",
    "parse_key_argument",
]

#: A token that Click would read as an unknown short option but that is a number:
#: none of the geneva commands has an option that starts with a digit.
_NEGATIVE_NUMBER = re.compile(r"-[0-9]")


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


class IdArgumentsCommand(click.Command):
    """A command whose arguments are workflow ids: ``-1`` is a bad id, not an option.

    Click reads ``flask geneva pause -1`` as the unknown option ``-1`` ("No such
    option"), which names neither a workflow id nor what is allowed. A token of a
    dash and a digit that is not an option's value is refused instead as a usage
    error naming it and the allowed ids (R-CLI-01), before any id is processed.
    After ``--`` every token is an id, refused one by one (R-CLI-02).
    """

    #: How many leading arguments are ids (None: all of them; ``signal ID NAME``
    #: has one, so a name such as ``-5`` stays a name).
    id_arguments: int | None = None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Refuse a negative number among the ids, then parse as Click does."""
        takes_value = {
            name
            for param in self.params
            if isinstance(param, click.Option) and not param.is_flag
            for name in param.opts
        }
        previous = None
        positional = 0
        for arg in args:
            if arg == "--" or positional == self.id_arguments:
                break
            is_value = previous in takes_value
            if not is_value and _NEGATIVE_NUMBER.match(arg):
                raise click.UsageError(
                    escape_control_characters(
                        f"invalid workflow id {arg!r}: expected "
                        f"{keys.describe_key_type(_key_type(ctx))}"
                    ),
                    ctx=ctx,
                )
            if not is_value and not arg.startswith("-"):
                positional += 1
            previous = arg
        return super().parse_args(ctx, args)


def _key_type(ctx: click.Context) -> str:
    """The app's key type, loading the app as the command itself will."""
    if has_app_context():
        return str(current_geneva().key_type)
    with ctx.ensure_object(ScriptInfo).load_app().app_context():
        return str(current_geneva().key_type)


class OneIdArgumentCommand(IdArgumentsCommand):
    """:class:`IdArgumentsCommand` whose first argument only is a workflow id."""

    id_arguments = 1
