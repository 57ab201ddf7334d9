"""``flask geneva check-steps``: a deploy gate for step names (issue 19, R-EVO-08).

Run it with the code about to be deployed (before traffic moves to it): it lists
the ongoing workflows whose current or next step, or an active execution's
step, that code does not define (neither as a step, a ``step.renamed`` old name
nor a ``step.removed`` gravestone), grouped by class and step with counts, and
exits with status 1 when there are any, so a deploy pipeline can stop.
"""

from __future__ import annotations

import click
from flask.cli import with_appcontext

from flask_geneva.cli.lookup import current_geneva
from flask_geneva.cli.output import echo_table
from flask_geneva.engine import step_evolution

__all__ = ["check_steps_command"]


@click.command("check-steps")
@with_appcontext
def check_steps_command() -> None:
    """Exit 1 if ongoing workflows carry steps the code does not define.

    Lists them by class and step with the number of workflows. Fix it by
    declaring step.removed("name") at the old step's place or
    step.renamed("old", to="new") in the class, or resume the workflows
    elsewhere (flask geneva resume ID --at STEP).
    """
    geneva = current_geneva()
    session = geneva.session
    try:
        stranded = step_evolution.stranded_steps(session, geneva)
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
    rows = [["class", "step", "workflows"]]
    for entry in stranded:
        type_label = entry.type if entry.registered else f"{entry.type} (no class)"
        rows.append([type_label, entry.step_name, str(entry.workflows)])
    echo_table(rows)  # escapes stored text
    click.echo(
        'Declare step.removed("name") where the step stood or '
        'step.renamed("old", to="new") in the class, or continue each workflow '
        "elsewhere: flask geneva resume ID --at STEP",
        err=True,
    )
    raise click.exceptions.Exit(1)
