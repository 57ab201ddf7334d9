"""The ``flask geneva`` command group (SPEC §2.5, §15.7).

``flask geneva install`` writes the schema migrations into the host's Flask-Migrate
directory (R-MIG-01..05). Errors are reported as one-line Click errors. Stored
text (types, step names, error messages, actors) is printed with its control
characters escaped (:mod:`flask_geneva.terminal_text`), so a stored escape
sequence cannot drive the operator's terminal; ``status --json`` gets the same
from JSON's own escaping.
"""

from __future__ import annotations

from typing import Any

import click
from flask import current_app
from flask.cli import AppGroup
from flask.cli import with_appcontext

from flask_geneva.keys import format_hero
from flask_geneva.keys import split_hero
from flask_geneva.terminal_text import escape_control_characters

__all__ = ["geneva_group"]

geneva_group = AppGroup("geneva", help="flask_geneva: durable workflows.")


@geneva_group.command("install")
@click.option(
    "-d",
    "--directory",
    default=None,
    help="Flask-Migrate directory (default: the one Migrate was configured with, "
    "usually 'migrations').",
)
@click.option(
    "--key-type",
    type=click.Choice(["auto", "bigint", "uuid"]),
    default="auto",
    show_default=True,
    help="Primary/foreign key type of the tables; 'auto' detects it from the "
    "existing tables.",  # R-DM-20
)
def install_command(directory: str | None, key_type: str) -> None:
    """Write the flask_geneva schema revisions into the migrations directory.

    Only revisions not already present are written; the database is not changed.
    Run `flask db upgrade` afterwards.
    """
    from flask_geneva.exceptions import InstallError
    from flask_geneva.schema.install import install
    from flask_geneva.schema.units import UNITS

    try:
        result = install(
            current_app._get_current_object(),  # type: ignore[attr-defined]
            directory=directory,
            key_type=key_type,
        )
    except InstallError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Key type: {result.key_type} ({result.key_type_reason}).")
    if result.already_present:
        click.echo(
            f"Already present: {len(result.already_present)} of "
            f"{len(UNITS)} flask_geneva revisions."
        )
    if not result.written:
        click.echo(
            f"Nothing to write: every flask_geneva revision is in {result.directory}."
        )
        click.echo("Run `flask db upgrade` if you have not applied them yet.")
        return
    for path in result.written:
        click.echo(f"  wrote {path}")
    click.echo(
        f"Wrote {len(result.written)} revision(s). "
        "Run `flask db upgrade` to apply them."
    )


# -- operator commands (R-MIG-10, R-CLI-01/02) -------------------------------------


@geneva_group.command("housekeeping")
def housekeeping_command() -> None:
    """Run housekeeping now and print its summary.

    Deletes finished/canceled workflows older than
    GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER, recovers stuck executions and emits
    the gauges. Schedule the `flask_geneva.housekeeping` beat task (every 30 min)
    to run it periodically.
    \f
    Spec: R-MIG-10, R-HK-01.
    """
    from flask_geneva import housekeeping

    summary = housekeeping.run_housekeeping()
    for key, value in summary.items():
        click.echo(f"{key}: {value}")


@geneva_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status_command(as_json: bool) -> None:
    """Print workflow counts per class and state, paused ratios and stuck counts.

    Stuck in-progress and overdue scheduled executions use the housekeeping
    thresholds GENEVA_STUCK_IN_PROGRESS_THRESHOLD and
    GENEVA_STUCK_SCHEDULED_THRESHOLD.
    \f
    Spec: R-ADM-10 counts, R-HK-20 thresholds.
    """
    import json

    overview = _status_overview()
    if as_json:
        click.echo(json.dumps(overview, indent=2, sort_keys=True))
        return
    from flask_geneva.models import WorkflowState

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
    _echo_table(rows)
    click.echo(f"stuck in_progress executions: {overview['stuck_in_progress']}")
    click.echo(f"overdue scheduled executions: {overview['overdue_scheduled']}")


@geneva_group.command("list")
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
    import sqlalchemy as sa

    from flask_geneva.models import WorkflowState

    geneva = _geneva()
    table = geneva.Workflow.__table__
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
    query = (
        sa.select(*(table.c[name] for name in columns))
        .order_by(table.c.id.desc())
        .limit(limit)
    )
    if state is not None:
        allowed = [s.value for s in WorkflowState]
        if state not in allowed:
            raise click.ClickException(
                f"unknown state {state!r}; allowed: {', '.join(allowed)}"
            )
        query = query.where(table.c.state == state)
    if class_name is not None:
        query = query.where(table.c.type == class_name)
    if hero is not None:
        parts = split_hero(hero)
        if parts is None:
            raise click.ClickException(
                f"--hero must look like TYPE#ID, as `flask geneva list` prints it "
                f"(e.g. User#7), got {hero!r}"
            )
        hero_type, hero_id = parts
        query = query.where(table.c.hero_type == hero_type).where(
            table.c.hero_id == _parse_key(hero_id, what="hero id")
        )
    session = geneva.session
    rows = [["id", "class", "hero", "state", "current", "next", "created_at"]]
    for row in session.execute(query).mappings():
        rows.append(
            [
                str(row["id"]),
                row["type"],
                _hero_label(row["hero_type"], row["hero_id"]),
                row["state"],
                row["current_step_name"] or "-",
                row["next_step_name"] or "-",
                _time(row["created_at"]),
            ]
        )
    session.rollback()
    if len(rows) == 1:
        click.echo("no workflows")
        return
    _echo_table(rows)


@geneva_group.command("show")
@click.argument("workflow_id")
def show_command(workflow_id: str) -> None:
    """Show one workflow: header, step plan and execution timeline."""
    geneva = _geneva()
    key = _parse_key(workflow_id, what="workflow id")
    session = geneva.session
    workflow = session.get(geneva.Workflow, key)
    if workflow is None:
        raise click.ClickException(f"workflow {workflow_id} not found")
    for line in _describe_workflow(workflow):
        click.echo(escape_control_characters(line))
    session.rollback()


def _flow_control_command(action: str, help_text: str) -> None:
    @geneva_group.command(action, help=help_text)
    @click.argument("workflow_ids", nargs=-1, required=True, metavar="ID...")
    def command(workflow_ids: tuple[str, ...], **options: bool) -> None:
        _apply_to_each(action, workflow_ids, rewind=options.get("rewind", False))

    if action == "resume":
        click.option(
            "--rewind",
            is_flag=True,
            help="Restart a resumable step's iteration from the beginning "
            "(the cursor is cleared).",  # R-EXT-26
        )(command)


_flow_control_command(
    "pause",
    "Pause workflows. Each ID is processed in its own transaction; "
    "exit status 1 if any was refused or not found.",
)
_flow_control_command(
    "resume",
    "Resume paused workflows. Each ID is processed in its own "
    "transaction; exit status 1 if any was refused or not found.",
)
_flow_control_command(
    "cancel",
    "Cancel workflows. Each ID is processed in its own transaction; "
    "exit status 1 if any was refused or not found.",
)
_flow_control_command(
    "skip",
    "Skip the current step of workflows. Each ID is processed in its "
    "own transaction; exit status 1 if any was refused or not found.",
)


@geneva_group.command("recover")
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
    import sqlalchemy as sa

    from flask_geneva.models import StepExecutionState

    geneva = _geneva()
    execution_cls = geneva.StepExecution
    pinned: dict[str, Any] = {}
    for raw_id in workflow_ids:
        try:
            key = _parse_key(raw_id, what="workflow id")
        except click.ClickException:
            continue  # refused with its message when the id is processed
        pinned[raw_id] = geneva.session.scalar(
            sa.select(execution_cls.id)
            .where(execution_cls.workflow_id == key)
            .where(execution_cls.state == StepExecutionState.IN_PROGRESS)
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
) -> None:
    """Run ``action`` on every id, each in its own transaction (R-CLI-02).

    ``pinned_executions`` (recover only) maps an id to the execution that was in
    progress when the command started; None there refuses the id.
    """
    from flask_geneva.exceptions import GenevaError

    geneva = _geneva()
    actor = _actor()
    refused = 0
    for raw_id in workflow_ids:
        session = geneva.session
        try:
            key = _parse_key(raw_id, what="workflow id")
            workflow = session.get(geneva.Workflow, key, populate_existing=True)
            if workflow is None:
                raise click.ClickException(f"workflow {raw_id} not found")
            if action == "resume":
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
                    f"workflow {raw_id}: {action} done, state is {workflow.state}"
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
                    f"workflow {raw_id}: {action} refused: {_one_line(message)}"
                ),
                err=True,
            )
    if refused:
        raise click.exceptions.Exit(1)


def _geneva() -> Any:
    from flask_geneva.runtime import current_state

    return current_state().geneva


def _actor() -> str | None:
    """``$GENEVA_ACTOR``, else the OS user name, else None (R-CLI-02)."""
    import getpass
    import os

    actor = os.environ.get("GENEVA_ACTOR")
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None


def _parse_key(raw: str, *, what: str) -> Any:
    """Parse a primary key given on the command line for the configured key type.

    Raises:
        click.ClickException: ``raw`` is not a valid key; the message names the
            value and what is accepted.
    """
    from flask_geneva import keys

    key_type = _geneva().key_type
    key = keys.parse_key(raw, key_type)
    if key is None:
        raise click.ClickException(
            f"invalid {what} {raw!r}: expected {keys.describe_key_type(key_type)}"
        )
    return key


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _time(value: Any) -> str:
    if value is None:
        return "-"
    return str(value.isoformat(sep=" ", timespec="seconds"))


def _hero_label(hero_type: Any, hero_id: Any) -> str:
    return format_hero(hero_type, hero_id)


def _echo_table(rows: list[list[str]]) -> None:
    # Cells hold stored text: escape control characters before measuring widths.
    rows = [[escape_control_characters(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        )


def _status_overview() -> dict[str, Any]:
    """The R-ADM-10 overview counts as a JSON-ready dict."""
    import sqlalchemy as sa

    from flask_geneva import clock
    from flask_geneva import housekeeping
    from flask_geneva.models import WorkflowState
    from flask_geneva.runtime import current_state

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
    stuck = session.scalar(
        sa.select(sa.func.count())
        .select_from(execution_table)
        .where(*housekeeping.stuck_in_progress_criteria(execution_table.c, config, now))
    )
    overdue = session.scalar(
        sa.select(sa.func.count())
        .select_from(execution_table)
        .where(*housekeeping.stuck_scheduled_criteria(execution_table.c, config, now))
    )
    session.rollback()
    return {
        "workflows": counts,
        "totals": totals,
        "paused_ratio": ratios,
        "stuck_in_progress": int(stuck or 0),
        "overdue_scheduled": int(overdue or 0),
    }


def _describe_workflow(workflow: Any) -> list[str]:
    """Text lines for `flask geneva show`: header, step plan, timeline, actions."""
    from flask_geneva.models import ACTIVE_EXECUTION_STATES

    history = workflow.execution_history
    lines = [
        f"Workflow {workflow.id} ({workflow.type})",
        f"  state:        {workflow.state}",
        f"  hero:         {_hero_label(workflow.hero_type, workflow.hero_id)}",
        f"  current step: {workflow.current_step_name or '-'}",
        f"  next step:    {workflow.next_step_name or '-'}",
        f"  created:      {_time(workflow.created_at)}",
        f"  transitioned: {_time(workflow.transitioned_at)}",
    ]
    if workflow.__geneva__.workflow_class(workflow.type) is None:
        lines.append("  (no workflow class is registered for this type)")
    lines.append("Step plan:")
    latest: dict[str, Any] = {}
    for execution in history:
        latest[execution.step_name] = execution
    defined = workflow.steps.names
    for position, step in enumerate(workflow.steps.ordered, start=1):
        execution = latest.get(step.name)
        if execution is None:
            marker = "upcoming"
        elif execution.state in ACTIVE_EXECUTION_STATES:
            marker = f"current ({execution.state})"
        elif execution.state == "completed":
            marker = "done" if execution.outcome == "success" else execution.outcome
        else:
            marker = execution.state
        details = []
        if step.wait is not None:
            details.append(f"wait {step.wait}")
        if step.is_resumable:
            details.append("resumable")
        suffix = f"  ({', '.join(details)})" if details else ""
        lines.append(f"  {position}. {step.name}: {marker}{suffix}")
    for name in latest:
        if name not in defined:
            lines.append(f"  -. {name}: no longer defined")
    lines.append("Timeline:")
    if not history:
        lines.append("  (no executions)")
    for execution in history:
        outcome = f"/{execution.outcome}" if execution.outcome else ""
        lines.append(
            f"  #{execution.id} {execution.step_name}: {execution.state}{outcome}"
            f"  scheduled {_time(execution.scheduled_for)}"
            f"  started {_time(execution.started_at)}"
            f"  finished {_time(execution.finished_at)}"
        )
        if execution.error_message:
            lines.append(f"      error: {_one_line(execution.error_message)[:200]}")
    actions = workflow.read_metadata("operator_actions")
    if isinstance(actions, list) and actions:
        lines.append("Operator actions:")
        for entry in actions:
            if isinstance(entry, dict):
                lines.append(
                    f"  {entry.get('at')} {entry.get('action')} via "
                    f"{entry.get('via')} by {entry.get('actor') or '-'} "
                    f"({entry.get('from_state')} -> {entry.get('to_state')})"
                )
    return lines


@geneva_group.command("dispatch")
@with_appcontext
def dispatch_command() -> None:
    """Publish deferred executions that are due soon.

    Steps that wait longer than GENEVA_MAX_BROKER_DELAY are kept out of the
    broker; run this (or the `flask_geneva.dispatch_due` beat task) periodically.
    \f
    Spec: R-DSP-02.
    """
    from flask_geneva import dispatcher

    count = dispatcher.dispatch_due()
    click.echo(f"dispatched {count} step execution(s)")


@geneva_group.command("worker")
@click.option(
    "--beat",
    is_flag=True,
    help="Also run Celery beat in this process with flask_geneva's schedule "
    "(the dispatcher of long waits).",
)
@click.option(
    "-Q",
    "--queues",
    default=None,
    help="Comma-separated queues to consume; default: GENEVA_DEFAULT_QUEUE (or "
    "Celery's default queue) plus every queue named in the job options of the "
    "registered workflow classes.",
)
@click.option(
    "--pool",
    default=None,
    help="Celery pool (prefork, threads, solo, ...); default 'solo' on SQLite, "
    "else Celery's default.",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Number of worker processes/threads; default: Celery's.",
)
@click.option(
    "-l",
    "--loglevel",
    default="INFO",
    show_default=True,
    help="Celery log level.",
)
@click.option(
    "-s",
    "--schedule",
    default=None,
    help="With --beat: the beat schedule database file (default: Celery's, "
    "'celerybeat-schedule' in the current directory).",
)
@with_appcontext
def worker_command(
    beat: bool,
    queues: str | None,
    pool: str | None,
    concurrency: int | None,
    loglevel: str,
    schedule: str | None,
) -> None:
    """Start a Celery worker for the app's Celery application.

    A convenience over `celery -A ... worker [-B]` with
    flask_geneva.celery_defaults() applied to every setting the Celery app leaves
    at Celery's default: the worker consumes the
    flask_geneva queues and, with --beat, runs the dispatch schedule of
    flask_geneva.beat_schedule() in the same process. Run at most one --beat
    process per deployment.
    """
    from flask_geneva.runtime import current_state
    from flask_geneva.tasks import apply_celery_defaults
    from flask_geneva.tasks import beat_schedule

    state = current_state()
    celery = state.celery
    if celery is None:
        raise click.ClickException(
            "no Celery app is configured: pass celery= to geneva.init_app(app, "
            "celery=celery) or call geneva.init_celery(celery)"
        )
    config = state.config
    # As `celery -A ... worker` with celery_defaults() applied (issue 14).
    apply_celery_defaults(
        celery, publish_timeout_seconds=config.publish_timeout.total_seconds()
    )
    selected = queues or ",".join(
        geneva_queues(state.geneva, config.default_queue, celery)
    )
    argv = ["worker", f"--loglevel={loglevel}", "-Q", selected]
    if pool is None and state.geneva.db.engine.dialect.name == "sqlite":
        pool = "solo"
    if pool is not None:
        argv.append(f"--pool={pool}")
    if concurrency is not None:
        argv.append(f"--concurrency={concurrency}")
    if beat:
        entries = dict(celery.conf.beat_schedule or {})
        entries.update(
            beat_schedule(
                dispatch_interval_seconds=config.dispatch_interval.total_seconds()
            )
        )
        celery.conf.beat_schedule = entries
        argv.append("--beat")
        if schedule is not None:
            argv.append(f"--schedule={schedule}")
    click.echo(f"starting Celery worker on queue(s) {selected}")
    celery.worker_main(argv)


def geneva_queues(
    geneva: object, default_queue: str | None, celery: object
) -> list[str]:
    """Queues a worker must consume for flask_geneva's tasks (R-CLI-03, R-JOB-23).

    The default queue (``GENEVA_DEFAULT_QUEUE``, else Celery's
    ``task_default_queue``) first, then every ``queue`` named in the class- or
    step-level job options of the registered workflow classes, sorted. Queues set
    only per instance (``step_job_options``) cannot be known here: pass them
    with ``--queues``.
    """
    first = default_queue or str(
        getattr(getattr(celery, "conf", None), "task_default_queue", None) or "celery"
    )
    found: set[str] = set()
    for cls in getattr(geneva, "workflow_classes", {}).values():
        definitions = getattr(cls, "__geneva_definitions__", None)
        if definitions is None:
            continue
        class_queue = definitions.default_job_options.get("queue")
        if class_queue:
            found.add(str(class_queue))
        for step in definitions.steps:
            step_queue = (step.job_options or {}).get("queue")
            if step_queue:
                found.add(str(step_queue))
    found.discard(first)
    return [first, *sorted(found)]
