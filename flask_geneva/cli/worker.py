"""``flask geneva worker``: a Celery worker for flask_geneva (R-CLI-03, R-JOB-23).

The same as ``celery -A ... worker [-B]`` with
:func:`~flask_geneva.celery_defaults` applied, consuming the queues of
:func:`geneva_queues` and, with ``--beat``, running flask_geneva's beat schedule.
"""

from __future__ import annotations

import click
from flask.cli import with_appcontext

from flask_geneva.ext.app_state import current_state
from flask_geneva.ext.tasks import apply_celery_defaults
from flask_geneva.ext.tasks import beat_schedule

__all__ = ["geneva_queues", "worker_command"]

#: Celery's log levels, as its own ``--loglevel`` accepts them.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "FATAL")


def _queue_names(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    """Check ``--queues``: comma-separated, non-empty names (R-CLI-03).

    Celery would start a worker on a queue named ``",,"`` or, for ``""``, on its
    default queue: a worker that silently consumes nothing it was meant to.
    """
    if value is None:
        return None
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise click.BadParameter(
            f"needs comma-separated queue names, got {value!r} (an empty name); "
            f"leave --queues out to consume the default queue and the queues of "
            f"the workflow classes' job options"
        )
    return ",".join(names)


def _pool_names() -> tuple[str, ...]:
    from celery.concurrency import get_available_pool_names

    return tuple(get_available_pool_names())


@click.command("worker")
@with_appcontext
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
    callback=_queue_names,
    help="Comma-separated queues to consume; default: GENEVA_DEFAULT_QUEUE (or "
    "Celery's default queue) plus every queue named in the job options of the "
    "registered workflow classes.",
)
@click.option(
    "--pool",
    type=click.Choice(_pool_names()),
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
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
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
    if schedule is not None and not beat:
        # Contradictory flags: the schedule file would be ignored silently.
        raise click.UsageError(
            f"--schedule needs --beat: it names beat's schedule file (got "
            f"--schedule {schedule!r} without --beat)"
        )
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
                dispatch_interval_seconds=config.dispatch_interval.total_seconds(),
                housekeeping_interval_seconds=(
                    config.housekeeping_interval.total_seconds()
                ),
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

    Args:
        geneva: The app's :class:`~flask_geneva.Geneva`.
        default_queue: ``GENEVA_DEFAULT_QUEUE``, or None.
        celery: The Celery app (its ``task_default_queue`` is the fallback).

    Returns:
        Queue names, the default first.
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
