"""``flask geneva check-steps``: a deploy gate for step names (issue 19, R-EVO-08).

Run it with the code about to be deployed (before traffic moves to it): it lists
the ongoing workflows whose current or next step, or an active execution's
step, that code does not define (neither as a step, a ``step.renamed`` old name
nor a ``step.removed`` gravestone), grouped by class and step with counts and
the workflows' ids (the first :data:`SHOWN_IDS` per group, ``--all`` for every
one, R-CLI-05), and exits with status 1 when there are any, so a deploy
pipeline can stop.
"""

from __future__ import annotations

import click
from flask.cli import with_appcontext

from flask_geneva.cli.lookup import current_geneva
from flask_geneva.cli.output import echo_table
from flask_geneva.engine import step_evolution

__all__ = ["SHOWN_IDS", "check_steps_command"]

#: Workflow ids printed per class and step without ``--all`` (R-CLI-05).
SHOWN_IDS = 10


@click.command("check-steps")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help=f"Print every workflow id of each group (default: the first {SHOWN_IDS}).",
)
@with_appcontext
def check_steps_command(show_all: bool) -> None:
    """Exit 1 if ongoing workflows carry steps the code does not define.

    Lists them by class and step with the number of workflows and their ids
    (the first 10 per group; --all prints all). Fix it by declaring
    step.removed("name") at the old step's place or step.renamed("old",
    to="new") in the class, or continue each workflow at a defined step
    (flask geneva pause ID, then flask geneva resume ID --at STEP: resume at a
    step is for paused workflows, R-EVO-06).
    """
    geneva = current_geneva()
    session = geneva.session
    try:
        stranded = step_evolution.stranded_steps(
            session, geneva, id_limit=None if show_all else SHOWN_IDS
        )
    finally:
        session.rollback()
    if not stranded:
        click.echo("ok: every ongoing workflow's steps are defined")
        return
    total = sum(entry.workflows for entry in stranded)
    click.echo(
        f"{total} step reference(s) of ongoing workflows are not defined by this code:",
        err=True,
    )
    rows = [["class", "step", "workflows", "workflow ids"]]
    for entry in stranded:
        type_label = entry.type if entry.registered else f"{entry.type} (no class)"
        rows.append(
            [type_label, entry.step_name, str(entry.workflows), _id_list(entry)]
        )
    echo_table(rows)  # escapes stored text
    more = any(len(entry.workflow_ids) < entry.workflows for entry in stranded)
    click.echo(
        'Declare step.removed("name") where the step stood or '
        'step.renamed("old", to="new") in the class, or continue each workflow '
        "at a defined step: flask geneva pause ID (unless it is paused), then "
        "flask geneva resume ID --at STEP"
        + ("; flask geneva check-steps --all prints every id" if more else ""),
        err=True,
    )
    raise click.exceptions.Exit(1)


def _id_list(entry: step_evolution.StrandedSteps) -> str:
    """``"1, 2, 3"``, or ``"1, 2 and 5 more"`` when the ids were capped."""
    shown = ", ".join(str(workflow_id) for workflow_id in entry.workflow_ids)
    hidden = entry.workflows - len(entry.workflow_ids)
    return f"{shown} and {hidden} more" if hidden > 0 else shown
