"""``flask geneva status``, ``list`` and ``show``: read-only views of the workflows.

``status`` prints the R-ADM-10 counts (per class and state, paused ratios, stuck
and overdue executions), ``list`` the newest workflows, ``show`` one workflow's step
plan, timeline and operator actions. Nothing is written; each command ends its
read transaction.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from flask.cli import with_appcontext

from flask_geneva.cli.children import Family
from flask_geneva.cli.children import family_of
from flask_geneva.cli.lookup import OneIdArgumentCommand
from flask_geneva.cli.lookup import current_geneva
from flask_geneva.cli.lookup import parse_key_argument
from flask_geneva.cli.output import echo_table
from flask_geneva.cli.output import format_time
from flask_geneva.cli.output import one_line
from flask_geneva.core import clock
from flask_geneva.core.durations import format_interval
from flask_geneva.core.keys import format_hero
from flask_geneva.core.keys import split_hero
from flask_geneva.core.stored_names import is_valid_unicode
from flask_geneva.core.terminal_text import escape_control_characters
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.engine.deadlines import describe as deadline_describe
from flask_geneva.engine.limits import describe as limit_describe
from flask_geneva.engine.limits import overview as limit_overview
from flask_geneva.engine.operators import housekeeping
from flask_geneva.engine.operators import maintenance_runs
from flask_geneva.engine.operators import stuck_recovery
from flask_geneva.engine.workers import health as worker_health
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.engine.workflow_signals import waits as workflow_signal_waits
from flask_geneva.ext.app_state import current_state
from flask_geneva.models import ACTIVE_EXECUTION_STATES
from flask_geneva.models import TERMINAL_WORKFLOW_STATES
from flask_geneva.models import WorkflowState

__all__ = ["list_command", "show_command", "status_command"]

#: A finished or canceled workflow runs no step: no current or next step shown
#: (R-CLI-07).
ENDED_STATES = tuple(state.value for state in TERMINAL_WORKFLOW_STATES)

#: The length of the ``type`` and ``hero_type`` columns (SPEC §2.1).
_MAX_STORED_TEXT = 255
#: ``show --children``: children per page by default, and at most (R-CHD-60).
CHILDREN_PAGE = 50
MAX_CHILDREN_PAGE = 1000


@click.command("status")
@with_appcontext
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status_command(as_json: bool) -> None:
    """Print workflow counts per class and state, paused ratios and stuck counts.

    Stuck in-progress and overdue scheduled executions use the housekeeping
    thresholds GENEVA_STUCK_IN_PROGRESS_THRESHOLD and
    GENEVA_STUCK_SCHEDULED_THRESHOLD (and, with the worker registry, the
    heartbeats of the workers holding them). Registered workers are listed as
    alive or dead (GENEVA_WORKER_DEAD_AFTER), with a warning when no worker has
    heartbeat for that long (recovery is then suspended). The last runs of the
    dispatcher and housekeeping are shown, with a warning when one has not run
    for two of its intervals (GENEVA_DISPATCH_INTERVAL,
    GENEVA_HOUSEKEEPING_INTERVAL) or failed.
    With workflow signals: executions waiting (and how many longer than
    GENEVA_SIGNAL_WAIT_WARN_AFTER) and pending signals with the oldest's age.
    With concurrency limits and a busy key: keys busy, executions waiting and
    the oldest wait.
    \f
    Spec: R-ADM-10 counts, R-HK-20 thresholds, R-WRK-06/09/14, R-HK-42/43,
    R-WSIG-65, R-LIM-43.
    """
    overview = _status_overview()
    if as_json:
        click.echo(json.dumps(overview, indent=2, sort_keys=True))
        return
    states = [s.value for s in WorkflowState]
    totals = overview["totals"]
    # A state the code does not know (a row written by hand or by another
    # version) gets its own column, so the totals still add up.
    states += sorted(state for state in totals if state not in states)
    rows = [["class", *states, "paused_ratio"]]
    for name, counts in sorted(overview["workflows"].items()):
        ratio = overview["paused_ratio"][name]
        rows.append([name, *(str(counts.get(s, 0)) for s in states), f"{ratio:.3f}"])
    rows.append(["(all)", *(str(totals.get(s, 0)) for s in states), ""])
    echo_table(rows)
    click.echo(f"stuck in_progress executions: {overview['stuck_in_progress']}")
    click.echo(f"overdue scheduled executions: {overview['overdue_scheduled']}")
    _echo_workers(overview["workers"])
    _echo_maintenance_runs(overview["maintenance_runs"])
    _echo_signal_waits(overview["signal_waits"])
    line = limit_overview.status_line(overview["limits"])
    if line is not None:  # R-LIM-43: only with the unit and a busy key
        click.echo(line)


def _echo_signal_waits(waits: dict[str, Any] | None) -> None:
    """The workflow signals part of ``status`` (R-WSIG-65); nothing without the unit."""
    if waits is None:
        return
    oldest = waits["oldest_pending_signal_age_seconds"]
    click.echo(
        f"signal waits: {waits['waiting']} executions waiting, "
        f"{waits['waiting_long']} longer than GENEVA_SIGNAL_WAIT_WARN_AFTER; "
        f"{waits['pending_signals']} pending signals"
        + (
            f", oldest {maintenance_runs.duration_text(oldest)} old"
            if waits["pending_signals"]
            else ""
        )
    )


def _echo_maintenance_runs(runs: dict[str, Any] | None) -> None:
    """When the dispatcher and housekeeping last ran, with warnings (R-HK-42/43)."""
    if runs is None:
        click.echo(
            "last runs: not recorded (install unit add_maintenance_runs: "
            "flask geneva install, then flask db upgrade)"
        )
        return
    for name in maintenance_runs.JOBS:
        run = runs[name]
        if run is None:
            click.echo(f"{name}: no run recorded")
            continue
        counts = ", ".join(
            f"{key} {value}" for key, value in sorted((run["summary"] or {}).items())
        )
        where = run["node_name"] or run["hostname"]
        click.echo(
            f"{name}: last run started "
            f"{maintenance_runs.duration_text(run['age_seconds'])} ago "
            f"({run['started_at']}), {run['outcome']}"
            + (f" ({counts})" if counts else "")
            + f", on {escape_control_characters(where)} pid {run['pid']}"
        )
    for warning in runs["warnings"]:
        click.echo(f"WARNING: {escape_control_characters(warning)}")


def _echo_workers(workers: dict[str, Any] | None) -> None:
    """The worker registry part of ``status`` (R-WRK-09)."""
    if workers is None:
        click.echo("workers: no worker registry (install unit add_worker_registry)")
        return
    click.echo(
        f"workers: {workers['alive']} alive, {workers['dead']} dead; "
        f"executions abandoned by dead workers: {workers['abandoned_executions']}"
    )
    if workers["warning"]:  # R-WRK-14: recovery suspended without heartbeats
        click.echo(f"WARNING: {workers['warning']}")
    for warning in workers["dead_after_warnings"]:  # R-WRK-17: settings differ
        click.echo(f"WARNING: {escape_control_characters(warning)}")
    if not workers["workers"]:
        return
    rows = [["worker", "status", "host", "pid", "node", "last heartbeat", "running"]]
    for worker in workers["workers"]:
        rows.append(
            [
                worker["id"][:8],
                "alive" if worker["alive"] else "DEAD",
                escape_control_characters(worker["hostname"]),
                str(worker["pid"]),
                escape_control_characters(worker["node_name"] or "-"),
                worker["last_heartbeat_at"],
                str(worker["in_progress"]),
            ]
        )
    echo_table(rows)


@click.command("list")
@with_appcontext
@click.option("--state", default=None, help="Only workflows in this state.")
@click.option(
    "--class", "class_name", default=None, help="Only this workflow type (class)."
)
@click.option(
    "--hero", default=None, metavar="TYPE#ID", help="Only this hero, e.g. User#7."
)
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=100_000),
    default=50,
    show_default=True,
    help="At most this many workflows, newest first.",
)
def list_command(
    state: str | None, class_name: str | None, hero: str | None, limit: int
) -> None:
    """List workflows, newest first: id, class, hero, state, steps, times."""
    geneva = current_geneva()
    # Only the printed columns: the table may lack the optional metadata column
    # (R-DM-30..32), and select(table) would name every mapped column.
    columns = (
        "id",
        "type",
        "hero_type",
        "hero_id",
        "state",
        "current_step_name",
        "next_step_name",
        "created_at",
    )
    hero_key = None
    if class_name is not None:
        _check_stored_text("--class", class_name)
    if state is not None:
        allowed = [s.value for s in WorkflowState]
        if state not in allowed:
            raise click.ClickException(
                f"unknown state {state!r}; allowed: {', '.join(allowed)}"
            )
    if hero is not None:
        parts = split_hero(hero)
        if parts is None:
            raise click.ClickException(
                f"--hero must look like TYPE#ID, as `flask geneva list` prints it "
                f"(e.g. User#7), got {hero!r}"
            )
        hero_type, hero_id = parts
        _check_stored_text("--hero's type", hero_type, option="--hero")
        hero_key = (hero_type, parse_key_argument(hero_id, what="hero id"))
    session = geneva.session
    rows = [["id", "class", "hero", "state", "current", "next", "created_at"]]
    for row in admin_queries.workflow_rows(
        session,
        geneva.Workflow,
        columns,
        state=state,
        type_name=class_name,
        hero=hero_key,
        limit=limit,
    ):
        # A finished or canceled workflow runs no step: no current or next
        # one, whatever its row still holds (R-CLI-07).
        ended = row["state"] in ENDED_STATES
        rows.append(
            [
                str(row["id"]),
                row["type"],
                format_hero(row["hero_type"], row["hero_id"]),
                row["state"],
                "-"
                if ended
                else _step_label(geneva, row["type"], row["current_step_name"]),
                "-"
                if ended
                else _step_label(geneva, row["type"], row["next_step_name"]),
                format_time(row["created_at"]),
            ]
        )
    session.rollback()
    if len(rows) == 1:
        click.echo("no workflows" + _unknown_class_note(geneva, class_name))
        return
    echo_table(rows)


def _unknown_class_note(geneva: Any, class_name: str | None) -> str:
    """Why ``--class`` may have matched nothing: no class has that type name.

    Rows of a type no class defines any more are still listed (their class was
    renamed or removed), so an unknown type is not an error; but an empty result
    for a misspelt name should say which names the code knows.
    """
    if class_name is None or class_name in geneva.workflow_classes:
        return ""
    known = ", ".join(sorted(geneva.workflow_classes)) or "(none)"
    return (
        f" (no workflow class is registered for type {class_name!r}; "
        f"registered: {known})"
    )


def _check_stored_text(what: str, value: str, *, option: str | None = None) -> None:
    """Refuse filter text no row can hold, on every database (R-CLI-01).

    A NUL character (PostgreSQL text cannot hold one: the query itself would
    fail), an unpaired surrogate (no driver encodes it, R-FLT-71) or more
    characters than the 255 of the ``type``/``hero_type`` columns.
    """
    if "\x00" in value:
        raise click.ClickException(
            f"{option or what} must not contain a NUL character, got "
            f"{escape_control_characters(repr(value[:80]))}"
        )
    if not is_valid_unicode(value):
        raise click.ClickException(
            f"{option or what} must be valid Unicode (no unpaired surrogate), got "
            f"{escape_control_characters(repr(value[:80]))}"
        )
    if len(value) > _MAX_STORED_TEXT:
        raise click.ClickException(
            f"{what} is longer than {_MAX_STORED_TEXT} characters, which no stored "
            f"workflow has ({len(value)} characters, starting "
            f"{escape_control_characters(repr(value[:40]))})"
        )


@click.command("show", cls=OneIdArgumentCommand)
@with_appcontext
@click.argument("workflow_id")
@click.option(
    "--children",
    "with_children",
    is_flag=True,
    help="Also list the workflow's children: counts per state and a page by id.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=MAX_CHILDREN_PAGE),
    default=None,
    help="With --children: at most this many children (default 50).",
)
@click.option(
    "--after",
    default=None,
    metavar="ID",
    help="With --children: only children with an id above ID (the next page).",
)
def show_command(
    workflow_id: str, with_children: bool, limit: int | None, after: str | None
) -> None:
    """Show one workflow: header, step plan and execution timeline.

    A child workflow's header has a "parent:" line, a parent's a "children:"
    line (started, settled, failed, the execution waiting for them).
    --children adds the children per state and a page of them.
    \f
    Spec: R-CLI-01, R-CHD-60.
    """
    geneva = current_geneva()
    if not with_children and (limit is not None or after is not None):
        raise click.UsageError("--limit and --after apply with --children only")
    key = parse_key_argument(workflow_id, what="workflow id")
    after_key = (
        parse_key_argument(after, what="--after id") if after is not None else None
    )
    session = geneva.session
    workflow = session.get(geneva.Workflow, key)
    if workflow is None:
        raise click.ClickException(f"workflow {workflow_id} not found")
    family = family_of(
        session,
        geneva.Workflow,
        workflow.id,
        workflow.type,
        with_children=with_children,
        limit=limit or CHILDREN_PAGE,
        after=after_key,
        step_label=lambda type_name, name: _step_label(geneva, type_name or "", name),
    )
    lines = _describe_workflow(workflow)
    # The family lines follow the header's facts (after "transitioned:").
    at = next(i for i, line in enumerate(lines) if line.startswith("  transitioned:"))
    at += 1
    for line in (*lines[:at], *family.lines, *lines[at:]):
        click.echo(escape_control_characters(line))
    _echo_children_page(family)
    session.rollback()


def _echo_children_page(family: Family) -> None:
    """The ``Children:`` table of ``show --children`` and its next-page hint."""
    if family.page is None:
        return
    click.echo("Children:")
    if len(family.page) == 1:
        where = f" after id {family.after}" if family.after is not None else ""
        click.echo(f"  (no children{where})")
        return
    echo_table(family.page)
    if family.more_after is not None:
        click.echo(f"… more: --after {family.more_after}")


def _status_overview() -> dict[str, Any]:
    """The R-ADM-10 overview counts as a JSON-ready dict."""
    state = current_state()
    session = state.geneva.session
    counts = housekeeping.count_workflows_by_type_and_state(session)
    totals = {s.value: 0 for s in WorkflowState}
    ratios: dict[str, float] = {}
    for name, per_state in counts.items():
        for key, value in per_state.items():
            totals[key] = totals.get(key, 0) + value
        total = sum(per_state.values())
        ratios[name] = per_state[WorkflowState.PAUSED.value] / total if total else 0.0
    execution_table = state.geneva.StepExecution.__table__
    now = clock.now()
    config = state.config
    workers = worker_registry.registry_table(session)
    stuck = admin_queries.count_executions(
        session,
        execution_table,
        stuck_recovery.stuck_in_progress_criteria(
            execution_table.c, config, now, workers
        ),
    )
    overdue = admin_queries.count_executions(
        session,
        execution_table,
        stuck_recovery.stuck_scheduled_criteria(execution_table.c, config, now),
    )
    session.rollback()
    return {
        "workflows": counts,
        "totals": totals,
        "paused_ratio": ratios,
        "stuck_in_progress": int(stuck or 0),
        "overdue_scheduled": int(overdue or 0),
        "workers": worker_health.worker_overview(session, config=config),
        "maintenance_runs": maintenance_runs.last_runs(session, config=config),
        "signal_waits": _signal_waits(session, config),
        "limits": _limits(session),
    }


def _limits(session: Any) -> dict[str, Any] | None:
    """Busy keys, waiters and the oldest wait (R-LIM-43); None without the unit."""
    status = limit_overview.limit_status(session)
    session.rollback()
    return status


def _signal_waits(session: Any, config: Any) -> dict[str, Any] | None:
    """Parked executions and pending signals (R-WSIG-65); None without the unit."""
    overview = workflow_signal_waits.signal_wait_overview(session, config=config)
    session.rollback()
    if overview is None:
        return None
    # The totals only: the per-class counts are the gauges' (R-OMET-20).
    return {key: value for key, value in overview.items() if key != "per_workflow"}


def _describe_workflow(workflow: Any) -> list[str]:
    """Text lines for `flask geneva show`: header, step plan, timeline, actions."""
    history = workflow.execution_history
    columns = column_detection.optional_columns(workflow.__geneva__.session)
    ended = workflow.state in ENDED_STATES
    lines = [
        f"Workflow {workflow.id} ({workflow.type})",
        f"  state:        {workflow.state}",
        f"  hero:         {format_hero(workflow.hero_type, workflow.hero_id)}",
    ]
    if not ended:
        # A finished or canceled workflow runs no step: no current or next
        # step lines (R-CLI-07).
        lines += [
            f"  current step: {_display(workflow, workflow.current_step_name)}",
            f"  next step:    {_display(workflow, workflow.next_step_name)}",
        ]
    lines += [
        f"  created:      {format_time(workflow.created_at)}",
        f"  transitioned: {format_time(workflow.transitioned_at)}",
    ]
    deadline = deadline_describe.deadline_fact(
        workflow.__geneva__.session, workflow, clock.now()
    )
    if deadline is not None:  # R-DL-60
        lines.append(
            f"  deadline:     {format_time(deadline.at)} ({deadline.sentence})"
        )
    if workflow.__geneva__.workflow_class(workflow.type) is None:
        lines.append("  (no workflow class is registered for this type)")
    for execution in history:
        sentence = limit_describe.waiting_sentence(
            workflow.__geneva__.session, execution
        )
        if sentence is not None:  # R-LIM-42
            lines.append(
                f"  limit:        step {_display(workflow, execution.step_name)}: "
                f"{sentence}"
            )
    lines.append("Step plan:")
    latest: dict[str, Any] = {}
    for execution in history:
        # An execution under a renamed step's old name counts for the new step.
        resolved = workflow.steps.named(execution.step_name)
        latest[resolved.name if resolved else execution.step_name] = execution
    defined = workflow.steps.names
    for position, step in enumerate(workflow.steps.ordered, start=1):
        execution = latest.get(step.name)
        if execution is None:
            # Nothing is upcoming once the workflow ended (R-CLI-07, R-ADM-46).
            marker = "not run" if ended else "upcoming"
        elif execution.state in ACTIVE_EXECUTION_STATES:
            marker = f"current ({execution.state})"
        elif execution.state == "completed":
            marker = "done" if execution.outcome == "success" else execution.outcome
        else:
            marker = execution.state
        details = []
        if step.wait is not None:
            details.append(f"wait {format_interval(step.wait)}")
        if step.is_resumable:
            details.append("resumable")
        suffix = f"  ({', '.join(details)})" if details else ""
        lines.append(f"  {position}. {step.name}: {marker}{suffix}")
    for name in latest:
        if name not in defined:
            gone = "removed" if workflow.steps.is_removed(name) else "no longer defined"
            lines.append(f"  -. {name}: {gone}")
    lines.append("Timeline:")
    if not history:
        lines.append("  (no executions)")
    for execution in history:
        outcome = f"/{execution.outcome}" if execution.outcome else ""
        lines.append(
            f"  #{execution.id} {_display(workflow, execution.step_name)}: "
            f"{execution.state}{outcome}"
            f"  scheduled {format_time(execution.scheduled_for)}"
            f"  started {format_time(execution.started_at)}"
            f"  finished {format_time(execution.finished_at)}"
        )
        # A reattempted execution keeps its error in the metadata only
        # (R-SE-21): printed as a failed one's is (R-CLI-08).
        message = execution.error_message or (execution.exception_info or {}).get(
            "message"
        )
        if message:
            lines.append(f"      error: {one_line(str(message))[:200]}")
            error_class = _error_class(execution, columns)
            if error_class:
                lines.append(f"      error class: {error_class}")
    actions = workflow.read_metadata("operator_actions")
    if isinstance(actions, list) and actions:
        lines.append("Operator actions:")
        for entry in actions:
            if isinstance(entry, dict):
                lines.append(
                    f"  {_action_time(entry.get('at'))} {entry.get('action')} via "
                    f"{entry.get('via')} by {entry.get('actor') or '-'} "
                    f"({entry.get('from_state')} -> {entry.get('to_state')})"
                    + (f" at step {entry['step']}" if entry.get("step") else "")
                    + (
                        f" at the deadline {entry['deadline']}"
                        if entry.get("deadline")
                        else ""
                    )
                )
    return lines


def _error_class(execution: Any, columns: Any) -> str | None:
    """The recorded error class of a timeline row (R-CLI-06): its column, else
    the metadata's ``exception`` (R-SE-20); None when none is recorded."""
    error_class = execution.error_class_name if columns.error_class_name else None
    if not error_class:
        error_class = (execution.exception_info or {}).get("class")
    return str(error_class) if error_class else None


def _action_time(value: Any) -> str:
    """An operator action's stored ISO time as the other times print, to the
    second (R-ADM-24); a value that is not an ISO time (a row edited by hand, a
    number) is printed as stored."""
    if value is None or isinstance(value, datetime):
        return format_time(value)
    if not isinstance(value, str):
        return str(value)
    try:
        return format_time(datetime.fromisoformat(value))
    except ValueError:
        return value


def _display(workflow: Any, name: str | None) -> str:
    """A step name as printed: ``new (was old)`` for a renamed one (R-EVO-04)."""
    return "-" if name is None else workflow.steps.display_name(name)


def _step_label(geneva: Any, type_name: str, name: str | None) -> str:
    """:func:`_display` for a row read without its class."""
    cls = geneva.workflow_classes.get(type_name)
    if name is None or cls is None:
        return name or "-"
    return str(cls.step_collection().display_name(name))
