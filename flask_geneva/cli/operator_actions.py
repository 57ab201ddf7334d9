"""``flask geneva pause``, ``resume`` (``--at``), ``cancel``, ``skip``, ``recover``.

Operator actions on workflows given by id (R-CLI-01/02, R-HK-28): each id is
processed in its own transaction, a refusal is printed on one line and the others
are still processed; the exit status is 1 if any id was refused or not found. The
actor recorded with each action is ``$GENEVA_ACTOR``, else the OS user name.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
from typing import Any

import click
from flask.cli import with_appcontext

from flask_geneva.cli.lookup import IdArgumentsCommand
from flask_geneva.cli.lookup import current_geneva
from flask_geneva.cli.lookup import parse_key_argument
from flask_geneva.cli.output import one_line
from flask_geneva.core.terminal_text import escape_control_characters
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.exceptions import GenevaError
from flask_geneva.ext.app_state import current_state
from flask_geneva.policies.release_spread import spread_releases

__all__ = ["FLOW_CONTROL_COMMANDS", "operator_actor", "recover_command"]


def _flow_control_command(action: str, help_text: str) -> click.Command:
    """The command applying ``workflow.<action>()`` to each id (R-CLI-02)."""

    @click.command(action, help=help_text, cls=IdArgumentsCommand)
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


@click.command("recover", cls=IdArgumentsCommand)
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
    _apply_to_each("recover", workflow_ids, rewind=False, force=force)


@dataclasses.dataclass(frozen=True)
class _Target:
    """One id of the command line: its key, or why it is not a valid id."""

    label: str
    key: Any = None
    error: str | None = None


def _targets(workflow_ids: tuple[str, ...]) -> list[_Target]:
    """The ids in the order given, each workflow once (R-CLI-02).

    An id given again (``5 5``, ``5 05``) is dropped with a note: processing it
    twice would skip two steps or refuse the second pause of one request.
    """
    targets: list[_Target] = []
    seen: set[Any] = set()
    noted: set[Any] = set()
    for raw_id in workflow_ids:
        try:
            key = parse_key_argument(raw_id, what="workflow id")
        except click.ClickException as error:
            targets.append(_Target(raw_id, error=error.format_message()))
            continue
        if key not in seen:
            seen.add(key)
            targets.append(_Target(str(key), key=key))
        elif key not in noted:
            noted.add(key)
            click.echo(f"workflow {key}: given more than once, processed once")
    return targets


def _pins(action: str, targets: list[_Target]) -> dict[Any, Any]:
    """What each workflow looked like when the command started, for the guards.

    ``recover`` recovers only the execution in progress then (R-HK-28); ``skip``
    skips only the step current then (``expected_step``), so a step that ran or
    another operator skipped meanwhile is refused, never a second step skipped.
    """
    if action not in ("recover", "skip"):
        return {}
    geneva = current_geneva()
    session = geneva.session
    pins: dict[Any, Any] = {}
    for target in targets:
        if target.key is None:
            continue
        if action == "recover":
            pins[target.key] = admin_queries.in_progress_execution_id(
                session, geneva.StepExecution, target.key
            )
            continue
        workflow = session.get(geneva.Workflow, target.key)
        if workflow is not None:
            pins[target.key] = workflow.current_step_name or workflow.next_step_name
    session.rollback()
    return pins


def _apply_to_each(
    action: str,
    workflow_ids: tuple[str, ...],
    *,
    rewind: bool,
    force: bool = False,
    at: str | None = None,
) -> None:
    """Run ``action`` on every id, each in its own transaction (R-CLI-02)."""
    geneva = current_geneva()
    actor = operator_actor()
    refused = 0
    targets = _targets(workflow_ids)
    pins = _pins(action, targets)
    valid = [target for target in targets if target.key is not None]
    spread = current_state().config.release_spread if len(valid) > 1 else None
    for target in targets:
        session = geneva.session
        try:
            if target.error is not None:
                raise click.ClickException(target.error)
            workflow = session.get(geneva.Workflow, target.key, populate_existing=True)
            if workflow is None:
                raise click.ClickException(f"workflow {target.label} not found")
            if action == "resume" and at is not None:
                with spread_releases(spread):  # several ids: R-SCH-20
                    workflow.resume_at(at, actor=actor, via="cli")
            elif action == "resume":
                with spread_releases(spread):  # several ids: R-SCH-20
                    workflow.resume(rewind=rewind, actor=actor, via="cli")
            elif action == "recover":
                pinned = pins.get(target.key)
                if pinned is None:
                    raise click.ClickException(
                        f"workflow {target.label} had no step execution in progress "
                        "when the command started"
                    )
                workflow.recover(
                    execution_id=pinned, force=force, actor=actor, via="cli"
                )
            elif action == "skip":
                workflow.skip(
                    actor=actor, via="cli", expected_step=pins.get(target.key)
                )
            else:
                getattr(workflow, action)(actor=actor, via="cli")
            session.refresh(workflow)
            click.echo(
                escape_control_characters(
                    f"workflow {target.label}: {action}"
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
                    f"workflow {target.label}: {action} refused: {one_line(message)}"
                ),
                err=True,
            )
    if refused:
        raise click.exceptions.Exit(1)


def operator_actor() -> str | None:
    """Who runs the command: ``$GENEVA_ACTOR``, else the OS user name, else
    None (R-CLI-02); recorded with every operator action the CLI takes."""
    actor = os.environ.get("GENEVA_ACTOR")
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None
