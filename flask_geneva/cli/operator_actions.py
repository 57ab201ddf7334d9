"""``flask geneva pause``, ``resume`` (``--at``), ``cancel``, ``skip``, ``recover``.

Operator actions on workflows given by id (R-CLI-01/02, R-HK-28): each id is
processed in its own transaction, a refusal is printed on one line and the others
are still processed; the exit status is 1 if any id was refused or not found. The
actor recorded with each action is ``$GENEVA_ACTOR``, else the OS user name.
"""

from __future__ import annotations

import getpass
import os
from typing import Any

import click
from flask.cli import with_appcontext

from flask_geneva import store_admin_queries
from flask_geneva.app_state import current_state
from flask_geneva.cli.lookup import current_geneva
from flask_geneva.cli.lookup import parse_key_argument
from flask_geneva.cli.output import one_line
from flask_geneva.exceptions import GenevaError
from flask_geneva.release_spread import spread_releases
from flask_geneva.terminal_text import escape_control_characters

__all__ = ["FLOW_CONTROL_COMMANDS", "recover_command"]


def _flow_control_command(action: str, help_text: str) -> click.Command:
    """The command applying ``workflow.<action>()`` to each id (R-CLI-02)."""

    @click.command(action, help=help_text)
    @with_appcontext
    @click.argument("workflow_ids", nargs=-1, required=True, metavar="ID...")
    def command(workflow_ids: tuple[str, ...], **options: Any) -> None:
        at = options.get("at")
        if at is not None and options.get("rewind"):
            raise click.UsageError("--at and --rewind cannot be combined")
        _apply_to_each(action, workflow_ids, rewind=options.get("rewind", False), at=at)

    if action == "resume":
        click.option(
            "--rewind",
            is_flag=True,
            help="Restart a resumable step's iteration from the beginning "
            "(the cursor is cleared).",  # R-EXT-26
        )(command)
        click.option(
            "--at",
            metavar="STEP",
            default=None,
            callback=_step_name_option,
            help="Continue from this defined step instead (workflow.resume_at; "
            "for a workflow whose step a deploy removed or renamed).",  # R-EVO-06
        )(command)
    return command


def _step_name_option(ctx: Any, param: Any, value: str | None) -> str | None:
    """Refuse an empty ``--at`` as a usage error, before any workflow is touched."""
    if value is not None and not value.strip():
        raise click.BadParameter(
            f"needs a step name, got {value!r}: name a step the workflow's class "
            "defines (flask geneva show ID lists them)"
        )
    return value


FLOW_CONTROL_COMMANDS: tuple[click.Command, ...] = (
    _flow_control_command(
        "pause",
        "Pause workflows. Each ID is processed in its own transaction; "
        "exit status 1 if any was refused or not found.",
    ),
    _flow_control_command(
        "resume",
        "Resume paused workflows. Each ID is processed in its own "
        "transaction; exit status 1 if any was refused or not found.",
    ),
    _flow_control_command(
        "cancel",
        "Cancel workflows. Each ID is processed in its own transaction; "
        "exit status 1 if any was refused or not found.",
    ),
    _flow_control_command(
        "skip",
        "Skip the current step of workflows. Each ID is processed in its "
        "own transaction; exit status 1 if any was refused or not found.",
    ),
)
"""``pause``, ``resume`` (with ``--rewind``), ``cancel`` and ``skip``."""


@click.command("recover")
@with_appcontext
@click.argument("workflow_ids", nargs=-1, required=True, metavar="ID...")
@click.option(
    "--force",
    is_flag=True,
    help="Also recover an execution younger than GENEVA_RECOVER_GRACE (only when "
    "you know its worker is gone).",
)
def recover_command(workflow_ids: tuple[str, ...], force: bool) -> None:
    """Recover the in-progress step execution of workflows now (R-HK-28).

    For an execution whose worker died: it is ended as housekeeping would end a
    stuck one (GENEVA_STUCK_RECOVERY_ACTION), without waiting for the stuck
    threshold. Each ID is processed in its own transaction; exit status 1 if any
    was refused or not found. Only the execution that was in progress when the
    command started is recovered: if it ended meanwhile (another operator's
    recover, say) and the next step already runs, that one is left alone.
    """
    _apply_to_each(
        "recover",
        workflow_ids,
        rewind=False,
        force=force,
        pinned_executions=_in_progress_executions(workflow_ids),
    )


def _in_progress_executions(workflow_ids: tuple[str, ...]) -> dict[str, Any]:
    """The id of each workflow's in-progress execution now (absent: none or bad id)."""
    geneva = current_geneva()
    execution_cls = geneva.StepExecution
    pinned: dict[str, Any] = {}
    for raw_id in workflow_ids:
        try:
            key = parse_key_argument(raw_id, what="workflow id")
        except click.ClickException:
            continue  # refused with its message when the id is processed
        pinned[raw_id] = store_admin_queries.in_progress_execution_id(
            geneva.session, execution_cls, key
        )
    geneva.session.rollback()
    return pinned


def _apply_to_each(
    action: str,
    workflow_ids: tuple[str, ...],
    *,
    rewind: bool,
    force: bool = False,
    pinned_executions: dict[str, Any] | None = None,
    at: str | None = None,
) -> None:
    """Run ``action`` on every id, each in its own transaction (R-CLI-02).

    ``pinned_executions`` (recover only) maps an id to the execution that was in
    progress when the command started; None there refuses the id.
    """
    geneva = current_geneva()
    actor = _actor()
    refused = 0
    spread = current_state().config.release_spread if len(workflow_ids) > 1 else None
    for raw_id in workflow_ids:
        session = geneva.session
        try:
            key = parse_key_argument(raw_id, what="workflow id")
            workflow = session.get(geneva.Workflow, key, populate_existing=True)
            if workflow is None:
                raise click.ClickException(f"workflow {raw_id} not found")
            if action == "resume" and at is not None:
                with spread_releases(spread):  # several ids: R-SCH-20
                    workflow.resume_at(at, actor=actor, via="cli")
            elif action == "resume":
                with spread_releases(spread):  # several ids: R-SCH-20
                    workflow.resume(rewind=rewind, actor=actor, via="cli")
            elif action == "recover":
                pinned = (pinned_executions or {}).get(raw_id)
                if pinned is None:
                    raise click.ClickException(
                        f"workflow {raw_id} had no step execution in progress "
                        "when the command started"
                    )
                workflow.recover(
                    execution_id=pinned, force=force, actor=actor, via="cli"
                )
            else:
                getattr(workflow, action)(actor=actor, via="cli")
            session.refresh(workflow)
            click.echo(
                escape_control_characters(
                    f"workflow {raw_id}: {action}"
                    + (f" at {at}" if at is not None else "")
                    + f" done, state is {workflow.state}"
                )
            )
            session.rollback()
        except (GenevaError, click.ClickException) as error:
            session.rollback()
            refused += 1
            message = (
                error.format_message()
                if isinstance(error, click.ClickException)
                else str(error)
            )
            click.echo(
                escape_control_characters(
                    f"workflow {raw_id}: {action} refused: {one_line(message)}"
                ),
                err=True,
            )
    if refused:
        raise click.exceptions.Exit(1)


def _actor() -> str | None:
    """``$GENEVA_ACTOR``, else the OS user name, else None (R-CLI-02)."""
    actor = os.environ.get("GENEVA_ACTOR")
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None
