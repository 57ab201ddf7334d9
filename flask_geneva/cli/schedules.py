"""``flask geneva schedules`` and ``flask geneva schedule pause|resume|run-now NAME``
(R-SCHED-33, R-SCHED-34).

``schedules`` lists every declared schedule, one table row each: name, class,
cron, zone, paused, the next fire times (in the schedule's zone and in UTC)
and the last fire with its outcome; the error of a failed last fire follows
on its own line. The ``schedule`` group acts on one schedule through the
engine's operations (:mod:`flask_geneva.engine.schedules.operations`): each
locks the schedule row, checks its state and refuses with a one-line error
(exit status 1) for an undeclared name or a state that does not allow it.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import click
from flask.cli import with_appcontext

from flask_geneva.cli.operator_actions import operator_actor
from flask_geneva.cli.output import echo_table
from flask_geneva.core.terminal_text import escape_control_characters
from flask_geneva.engine.schedules import pause_schedule
from flask_geneva.engine.schedules import resume_schedule
from flask_geneva.engine.schedules import run_schedule_now
from flask_geneva.engine.schedules import schedule_overview
from flask_geneva.exceptions import GenevaError
from flask_geneva.ext.app_state import current_context

__all__ = ["schedule_group", "schedules_command"]


def _local(moment: datetime, zone: str) -> str:
    return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


@click.command("schedules")
@with_appcontext
@click.option(
    "--next",
    "count",
    type=click.IntRange(1, 20),
    default=3,
    show_default=True,
    help="How many next fire times to show.",
)
def schedules_command(count: int) -> None:
    """List the declared schedules: cron, zone, paused, next and last fires.
    \f
    Spec: R-SCHED-33.
    """
    context = current_context()
    views = schedule_overview(context, context.session, count=count)
    if not views:
        click.echo("no schedules are declared (geneva.schedule(...))")
        return
    rows = [["name", "class", "cron", "zone", "paused", "next fires", "last fire"]]
    errors = []
    for view in views:
        schedule = view.schedule
        upcoming = ", ".join(
            _local(moment, schedule.timezone) for moment in view.next_fire_times
        )
        last = "never"
        if view.last_fire_at is not None:
            last = (
                f"{_local(view.last_fire_at, schedule.timezone)} ({view.last_outcome})"
            )
        rows.append(
            [
                schedule.name,
                schedule.workflow_class.__name__,
                schedule.cron,
                schedule.timezone,
                "yes" if view.paused else "no",
                upcoming,
                last,
            ]
        )
        if view.last_error:
            errors.append(f"{schedule.name}: last error: {view.last_error}")
    echo_table(rows)
    for line in errors:
        click.echo(escape_control_characters(line))


@click.group("schedule")
def schedule_group() -> None:
    """Act on one schedule: pause, resume or run it now."""


def _act(action: str, name: str) -> None:
    context = current_context()
    operation = {"pause": pause_schedule, "resume": resume_schedule}[action]
    try:
        operation(context, context.session, name, actor=operator_actor(), via="cli")
    except GenevaError as error:
        raise click.ClickException(escape_control_characters(str(error))) from None
    click.echo(f"schedule {escape_control_characters(name)}: {action}d")


@schedule_group.command("pause")
@with_appcontext
@click.argument("name")
def pause_command(name: str) -> None:
    """Pause schedule NAME: it fires nothing until resumed.
    \f
    Spec: R-SCHED-31, R-SCHED-34.
    """
    _act("pause", name)


@schedule_group.command("resume")
@with_appcontext
@click.argument("name")
def resume_command(name: str) -> None:
    """Resume schedule NAME; the times passed while paused are not fired.
    \f
    Spec: R-SCHED-31, R-SCHED-34.
    """
    _act("resume", name)


@schedule_group.command("run-now")
@with_appcontext
@click.argument("name")
def run_now_command(name: str) -> None:
    """Fire schedule NAME now and run its fan-out to the end.

    Exits 1 when the fire failed, or stopped at a database error that the
    dispatcher's next runs retry.
    \f
    Spec: R-SCHED-32, R-SCHED-34.
    """
    context = current_context()
    try:
        result = run_schedule_now(
            context, context.session, name, actor=operator_actor(), via="cli"
        )
    except GenevaError as error:
        raise click.ClickException(escape_control_characters(str(error))) from None
    line = (
        f"schedule {name}: fired at {result.fire_at.isoformat()}: {result.state}, "
        f"{result.started} started, {result.skipped} skipped (ongoing)"
    )
    if result.error:
        line += f"; error: {result.error}"
    click.echo(escape_control_characters(line))
    if result.state == "failed" or result.error is not None:
        # Failed, or left running after a database error the dispatcher's
        # next runs retry (R-SCHED-27): not done, so not a success.
        raise SystemExit(1)
