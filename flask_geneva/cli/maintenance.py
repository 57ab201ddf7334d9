"""``flask geneva housekeeping`` and ``flask geneva dispatch``: the periodic jobs,
run once by hand (R-MIG-10, R-HK-01, R-DSP-02)."""

from __future__ import annotations

import click
from flask.cli import with_appcontext

from flask_geneva.engine.operators import dispatcher
from flask_geneva.engine.operators import housekeeping
from flask_geneva.ext.app_state import current_context

__all__ = ["dispatch_command", "housekeeping_command"]


@click.command("housekeeping")
@with_appcontext
def housekeeping_command() -> None:
    """Run housekeeping now and print its summary.

    Deletes finished/canceled workflows older than
    GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER, recovers stuck executions and emits
    the gauges. Schedule the `flask_geneva.housekeeping` beat task (every
    GENEVA_HOUSEKEEPING_INTERVAL, 30 min) to run it periodically.
    \f
    Spec: R-MIG-10, R-HK-01.
    """
    summary = housekeeping.run_housekeeping(current_context())
    for key, value in summary.items():
        click.echo(f"{key}: {value}")


@click.command("dispatch")
@with_appcontext
def dispatch_command() -> None:
    """Run the dispatcher once: publish due steps, recover dead workers' steps.

    Workflows past their deadline are canceled or paused; steps that wait
    longer than GENEVA_MAX_BROKER_DELAY are kept out of the broker; scheduled
    steps whose message was lost are published again; the in-progress steps of
    workers that stopped heartbeating (or that a live worker released) are
    recovered; the
    schedules' due fire times are fired and their fan-out worked.
    Run this (or the `flask_geneva.dispatch_due` beat task) every
    GENEVA_DISPATCH_INTERVAL.
    \f
    Spec: R-DSP-02, R-WRK-13, R-DL-20, R-SCHED-20, R-FLT-11, R-FLT-20.
    """
    run = dispatcher.run_dispatcher(current_context())
    click.echo(f"dispatched {run.published} step execution(s)")
    click.echo(f"recovered {run.recovered} step execution(s) of dead workers")
    if run.republished:
        click.echo(
            f"published again {run.republished} step execution(s) whose message "
            "was lost"
        )
    if run.deadlines:
        click.echo(
            f"{run.deadlines} workflow(s) reached their deadline (canceled or paused)"
        )
    if run.fired or run.scheduled_started:
        click.echo(
            f"fired {run.fired} schedule fire time(s); "
            f"the schedules started {run.scheduled_started} workflow(s)"
        )
