"""``flask geneva signal ID NAME``: deliver a workflow signal by hand (R-WSIG-60..62).

The delivery goes through the public API, ``workflow.signal()`` (R-WSIG-20), in
one transaction, so the command behaves exactly as an application's webhook
would: a duplicate idempotency key changes nothing, a parked step is woken.
Every refusal is a usage error (exit status 2, one line, no traceback).

It is not recorded in the workflow's operator actions (R-PDR-05): those record a
change of the workflow's state made from outside (``from_state``/``to_state``),
while a signal changes no state by itself and its row (name, payload, key,
``created_at``) is already the durable record of the delivery, the same for
signals sent from the CLI and from the application (R-WSIG-62).
"""

from __future__ import annotations

from typing import Any

import click
from flask.cli import with_appcontext

from flask_geneva.cli.lookup import OneIdArgumentCommand
from flask_geneva.cli.lookup import current_geneva
from flask_geneva.cli.lookup import parse_key_argument
from flask_geneva.cli.output import one_line
from flask_geneva.core.cursors import parse_json_text
from flask_geneva.core.terminal_text import escape_control_characters
from flask_geneva.exceptions import GenevaError

__all__ = ["signal_command"]


def _json_payload(ctx: Any, param: Any, value: str | None) -> Any:
    """Parse ``--payload`` as JSON; invalid JSON (or JSON nested too deeply for
    the parser) is a usage error (R-WSIG-61)."""
    if value is None:
        return None
    try:
        return parse_json_text(value)
    except ValueError as error:
        raise click.BadParameter(
            f"is not valid JSON ({error}): give a JSON document, e.g. "
            "'{\"amount\": 100}'"
        ) from None


@click.command("signal", cls=OneIdArgumentCommand)
@with_appcontext
@click.argument("workflow_id", metavar="ID")
@click.argument("name")
@click.option(
    "--payload",
    default=None,
    callback=_json_payload,
    metavar="JSON",
    help="The signal's payload, a JSON document (at most "
    "GENEVA_MAX_SIGNAL_PAYLOAD_SIZE bytes encoded).",
)
@click.option(
    "--idempotency-key",
    default=None,
    metavar="KEY",
    help="A key unique per workflow: a second delivery with it changes nothing.",
)
def signal_command(
    workflow_id: str, name: str, payload: Any, idempotency_key: str | None
) -> None:
    """Deliver the workflow signal NAME to the workflow ID (R-WSIG-60).

    Prints what happened: the signal stored (pending, or waking the parked
    execution N), or a duplicate of an earlier delivery. Exit status 2 with a
    one-line message when the id is invalid or unknown, the payload is not JSON
    or too large, the workflow is finished or canceled (unless the key is one it
    received: a duplicate, R-WSIG-24), its signal buffer is full,
    or the workflow signals unit is not installed (R-WSIG-61).
    """
    geneva = current_geneva()
    session = geneva.session
    key = _workflow_key(workflow_id)
    workflow = session.get(geneva.Workflow, key, populate_existing=True)
    if workflow is None:
        session.rollback()
        raise click.UsageError(f"workflow {workflow_id} not found")
    try:
        delivery = workflow.signal(
            name, payload, idempotency_key=idempotency_key, warn_unawaited=False
        )
    except (GenevaError, ValueError) as error:
        session.rollback()
        raise click.UsageError(
            escape_control_characters(
                f"workflow {workflow_id}: signal {name!r} refused: "
                f"{one_line(str(error))}"
            )
        ) from None
    signal = delivery.signal
    if delivery.duplicate:
        what = (
            f"duplicate of signal {signal.id} (idempotency key "
            f"{idempotency_key!r}), nothing changed"
        )
    elif delivery.woken:
        woken = ", ".join(str(execution_id) for execution_id in delivery.woken)
        what = f"signal {signal.id} stored, woke execution {woken}"
    else:
        what = f"signal {signal.id} stored, pending"
    if delivery.unawaited is not None:
        # A misspelt name would sit pending unseen (R-WSIG-60, R-WSIG-73).
        what += f" ({delivery.unawaited})"
    click.echo(escape_control_characters(f"workflow {workflow_id}: {name}: {what}"))
    session.rollback()


def _workflow_key(raw: str) -> Any:
    """The workflow id as a key; an invalid one is a usage error (exit 2)."""
    try:
        return parse_key_argument(raw, what="workflow id")
    except click.ClickException as error:
        raise click.UsageError(error.format_message()) from None
