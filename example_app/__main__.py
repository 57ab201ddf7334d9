"""``python -m example_app demo``: run the example end to end in one process.

One process, no services: the SQLite database (``flask db upgrade``), the seed
data, an embedded Celery worker (in-memory broker), an embedded Celery beat with
flask_geneva's dispatcher and housekeeping schedule, and the admin UI served on
127.0.0.1. It prints progress and a summary once every workflow has settled,
then serves the admin until Ctrl-C (``--exit-when-settled`` exits instead).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import math
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any


def _count(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be from 0 (any free port) to 65535, got {text}"
        )
    return value


def _time_scale(text: str) -> float:
    """An argparse type: a finite factor >= 0 (0: no waits at all)."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of 0 or more (e.g. 0.00001), got {text}"
        )
    return value


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds above 0, got {text}"
        )
    return value


def _database_url(text: str) -> str:
    """An argparse type: a SQLAlchemy URL whose dialect and driver are installed."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    from sqlalchemy.exc import NoSuchModuleError

    try:
        make_url(text).get_dialect()
    except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as error:
        raise argparse.ArgumentTypeError(
            f"not a usable SQLAlchemy database URL ({error}), got {text!r}; e.g. "
            f"postgresql+psycopg://postgres@127.0.0.1:5432/example"
        ) from error
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m example_app")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="seed users, run their workflows, serve the admin, print a summary",
    )
    demo.add_argument(
        "--users", type=_count, default=1000, help="users to seed (default 1000)"
    )
    demo.add_argument(
        "--time-scale",
        type=_time_scale,
        default=0.00001,
        help="multiply every wait by this (default 0.00001: 2 days -> 1.7 s); "
        "the dispatcher and housekeeping intervals too, at least "
        f"{MIN_DISPATCH_SECONDS:g} s and {MIN_HOUSEKEEPING_SECONDS:g} s",
    )
    demo.add_argument(
        "--subscribers",
        type=_count,
        default=20_000,
        help="newsletter subscribers to seed (default 20000)",
    )
    demo.add_argument(
        "--database-url",
        type=_database_url,
        default=None,
        help="default: a new SQLite file",
    )
    demo.add_argument(
        "--timeout", type=_seconds, default=600, help="seconds before giving up"
    )
    demo.add_argument(
        "--keep-database",
        action="store_true",
        help="keep the new SQLite file (default: deleted when the demo ends)",
    )
    demo.add_argument(
        "--port",
        type=_port,
        default=5000,
        help="port of the admin UI on 127.0.0.1 (default 5000; a free one if "
        "it is busy; 0 picks a free one)",
    )
    demo.add_argument(
        "--exit-when-settled",
        action="store_true",
        help="exit after the summary instead of serving the admin until Ctrl-C",
    )
    args = parser.parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Progress lines show up as they are printed, also through a pipe.
        sys.stdout.reconfigure(line_buffering=True)
    os.environ["EXAMPLE_TIME_SCALE"] = str(args.time_scale)
    return run_demo(
        args.users,
        args.database_url,
        args.timeout,
        subscriber_count=args.subscribers,
        keep_database=args.keep_database,
        time_scale=args.time_scale,
        port=args.port,
        serve_after_settled=not args.exit_when_settled,
    )


#: The shortest dispatcher and housekeeping intervals of the demo, in seconds: the
#: library's (30 s and 30 min) times --time-scale would be milliseconds.
MIN_DISPATCH_SECONDS = 1.0
MIN_HOUSEKEEPING_SECONDS = 5.0


def run_demo(
    user_count: int,
    database_url: str | None,
    timeout: float,
    *,
    subscriber_count: int = 20_000,
    keep_database: bool = False,
    time_scale: float | None = None,
    port: int = 5000,
    serve_after_settled: bool = False,
) -> int:
    """Run the demo on ``database_url``, or on a new SQLite file in a temporary
    folder that is deleted when the demo ends unless ``keep_database``.

    While it runs, an embedded Celery worker executes the steps, an embedded
    Celery beat runs flask_geneva's dispatcher and housekeeping schedule, and the
    admin UI is served on ``127.0.0.1:port``. With ``serve_after_settled`` the
    admin (with the worker and beat) goes on after the summary until Ctrl-C.

    Args:
        time_scale: What the waits are multiplied by; default
            ``$EXAMPLE_TIME_SCALE`` (1.0). Scales the maintenance intervals too.

    Returns:
        The exit status: 0 once every workflow settled (and, with
        ``serve_after_settled``, Ctrl-C stopped the admin), 1 on a timeout, 130
        on Ctrl-C before every workflow settled.
    """
    if time_scale is None:
        time_scale = float(os.environ.get("EXAMPLE_TIME_SCALE", "1.0"))
    demo = Demo(
        user_count,
        timeout,
        subscriber_count=subscriber_count,
        time_scale=time_scale,
        port=port,
        serve_after_settled=serve_after_settled,
    )
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous_handlers = {
        number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)
    }
    if in_main_thread:
        # SIGTERM (a service manager, `kill`) stops the demo as Ctrl-C does.
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        if database_url is not None:
            return demo.run(database_url)
        workdir = Path(tempfile.mkdtemp(prefix="geneva-example-"))
        url = f"sqlite:///{workdir / 'example.sqlite3'}"
        try:
            return demo.run(url)
        finally:
            if keep_database:
                print(f"the database is kept: {url}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
                print(f"deleted {workdir} (--keep-database keeps it)")
    except KeyboardInterrupt:
        # Ctrl-C before the worker started (migrations, seeding).
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if in_main_thread:
            for number, handler in previous_handlers.items():
                signal.signal(number, handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class Demo:
    """One run of the demo (see :func:`run_demo`)."""

    def __init__(
        self,
        user_count: int,
        timeout: float,
        *,
        subscriber_count: int,
        time_scale: float,
        port: int,
        serve_after_settled: bool,
    ) -> None:
        self.user_count = user_count
        self.timeout = timeout
        self.subscriber_count = subscriber_count
        self.time_scale = time_scale
        self.port = port
        self.serve_after_settled = serve_after_settled
        #: Every workflow settled and the summary was printed.
        self.settled = False

    def run(self, url: str) -> int:
        import logging

        from example_app import create_app

        # Failed payment attempts are expected (the gateway is flaky on purpose);
        # each is logged (a WARNING while reattempted, an ERROR and a failed task
        # once it ends the workflow). Keep the demo output readable, without the
        # admin server's request lines either.
        logging.getLogger("celery.app.trace").setLevel(logging.CRITICAL)
        logging.getLogger("flask_geneva").setLevel(logging.CRITICAL)
        logging.getLogger("flask_geneva.tasks").setLevel(logging.CRITICAL)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)

        app = create_app(url, broker_url="memory://")
        print(f"database: {url}")
        campaign_id = self._migrate_and_seed(app)
        schedule = self._configure_maintenance(app)
        status = 130
        with contextlib.ExitStack() as running:
            try:
                # Stopped in reverse order: the admin server, beat, the worker.
                self._start_worker(running)
                self._start_beat(running, schedule)
                admin_url, user, password = self._start_admin(running, app)
                print(
                    f"admin UI: {admin_url} (log in as {user!r} / {password!r}; "
                    "'viewer' reads only and 'admin' may do everything, with the "
                    "same password)"
                )
                status = self._start_and_watch(app, campaign_id)
                if status == 0 and self.serve_after_settled:
                    self._leave_something_to_try(app)
                    print(
                        f"serving the admin UI at {admin_url} (user {user!r}, "
                        f"password {password!r}); the worker and the dispatcher "
                        "keep running. Press Ctrl-C to stop (--exit-when-settled "
                        "exits here instead).",
                        flush=True,
                    )
                    while True:
                        time.sleep(3600)
            except KeyboardInterrupt:
                # A second Ctrl-C must not interrupt the shutdown below.
                if threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                print(
                    "\nCtrl-C: stopping the admin server, beat and the worker",
                    flush=True,
                )
                status = 0 if self.settled else 130
        return status

    def _leave_something_to_try(self, app: Any) -> None:
        """Leave a few workflows paused or waiting for a signal (R-APP-04)."""
        from example_app import db
        from example_app.leftovers import describe
        from example_app.leftovers import leave_something_to_try

        with app.app_context():
            left = leave_something_to_try("demo-operator")
            db.session.remove()
        for line in describe(left):
            print(line, flush=True)

    def _migrate_and_seed(self, app: Any) -> int:
        from flask_migrate import upgrade

        from example_app import db
        from example_app.models import Export
        from example_app.models import User
        from example_app.seeding import seed_campaign

        with app.app_context():
            upgrade()  # the same as `flask db upgrade`
            users = [User(email=f"user{i}@example.com") for i in range(self.user_count)]
            db.session.add_all(users)
            db.session.commit()
            exports = [
                Export(user_id=u.id) for u in users[: max(1, self.user_count // 20)]
            ]
            db.session.add_all(exports)
            db.session.commit()
            started = time.monotonic()
            campaign_id = seed_campaign(self.subscriber_count)
            print(
                f"seeded {self.subscriber_count} newsletter subscribers in "
                f"{time.monotonic() - started:.2f}s"
            )
            return campaign_id

    def _configure_maintenance(self, app: Any) -> dict[str, Any]:
        """Scale the dispatcher and housekeeping intervals; return beat's schedule.

        The app's settings give the intervals (GENEVA_DISPATCH_INTERVAL and
        GENEVA_HOUSEKEEPING_INTERVAL, 30 s and 30 min by default); the demo
        multiplies them by the time scale, with a floor, and sets them back, so
        the admin's health panel judges the runs by the intervals beat uses.
        """
        import flask_geneva
        from example_app import geneva

        settings = geneva.reload_settings(app)
        dispatch = max(
            MIN_DISPATCH_SECONDS,
            settings.dispatch_interval.total_seconds() * self.time_scale,
        )
        housekeeping = max(
            MIN_HOUSEKEEPING_SECONDS,
            settings.housekeeping_interval.total_seconds() * self.time_scale,
        )
        app.config["GENEVA_DISPATCH_INTERVAL"] = timedelta(seconds=dispatch)
        app.config["GENEVA_HOUSEKEEPING_INTERVAL"] = timedelta(seconds=housekeeping)
        geneva.reload_settings(app)
        print(
            f"dispatcher every {dispatch:g} s, housekeeping every {housekeeping:g} s "
            "(embedded Celery beat)"
        )
        return flask_geneva.beat_schedule(
            dispatch_interval_seconds=dispatch,
            housekeeping_interval_seconds=housekeeping,
        )

    def _start_worker(self, running: contextlib.ExitStack) -> None:
        from celery.contrib.testing.worker import start_worker
        from celery.signals import worker_shutdown
        from celery.worker import state as worker_state

        import flask_geneva
        from example_app import celery
        from flask_geneva.engine.iteration import clear_worker_exit

        stopped = threading.Event()

        def on_worker_shutdown(*args: Any, **kwargs: Any) -> None:
            stopped.set()

        def forget_stop_requests() -> None:
            worker_shutdown.disconnect(on_worker_shutdown)
            worker_state.should_stop = None
            clear_worker_exit()

        def stop_warmly() -> None:
            # What Ctrl-C does to `celery worker`: resumable steps stop at their
            # next checkpoint, the running step finishes, Celery's warm shutdown
            # sends worker_shutdown and flask_geneva deletes the worker's row.
            # (start_worker alone stops it cold, leaving the row behind.)
            flask_geneva.request_worker_exit()
            worker_state.should_stop = 0
            stopped.wait(60)

        worker_shutdown.connect(on_worker_shutdown, weak=False)
        running.callback(forget_stop_requests)
        running.enter_context(
            start_worker(
                celery,
                pool="solo",
                perform_ping_check=False,
                loglevel="WARNING",
                # A step running at Ctrl-C finishes first.
                shutdown_timeout=60.0,
            )
        )
        running.callback(stop_warmly)

    def _start_beat(
        self, running: contextlib.ExitStack, schedule: dict[str, Any]
    ) -> None:
        """Celery beat in a thread of this process, with flask_geneva's schedule.

        Its tasks go through the in-memory broker to the embedded worker, as
        `celery beat` and `celery worker` would through a real broker.
        """
        from celery.beat import EmbeddedService

        from example_app import celery

        celery.conf.beat_schedule = schedule
        beat = EmbeddedService(
            celery,
            thread=True,
            # Nothing on disk: the schedule lives in memory for this run.
            scheduler_cls="celery.beat:Scheduler",
            max_interval=0.5,
        )
        beat.start()
        running.callback(beat.stop)

    def _start_admin(
        self, running: contextlib.ExitStack, app: Any
    ) -> tuple[str, str, str]:
        """Serve ``app`` on 127.0.0.1 in a thread; return (URL, user, password).

        The example's admin asks for a demo login (``example_app/login.py``):
        the users viewer, operator and admin share $EXAMPLE_ADMIN_PASSWORD;
        without one the demo makes one up and sets it for this process. The
        user returned is the operator.
        """
        from werkzeug.serving import make_server

        user = "operator"
        password = os.environ.get("EXAMPLE_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        os.environ["EXAMPLE_ADMIN_PASSWORD"] = password
        listener = _listen(self.port)
        port = listener.getsockname()[1]
        server = make_server(
            "127.0.0.1", port, app, threaded=True, fd=listener.fileno()
        )
        listener.close()  # the server holds a duplicate of the socket
        thread = threading.Thread(
            target=server.serve_forever, name="example-admin", daemon=True
        )
        thread.start()

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(10)

        running.callback(stop)
        return f"http://127.0.0.1:{port}/geneva/", user, password

    def _start_and_watch(self, app: Any, campaign_id: int) -> int:
        """Start the workflows, print progress until they settle, then the summary."""
        import sqlalchemy as sa

        from example_app import db
        from example_app import geneva
        from example_app.models import Campaign
        from example_app.models import Export
        from example_app.models import User
        from example_app.progress import approve_paused_exports
        from example_app.progress import counts_by_type_and_state
        from example_app.progress import workflow_state_counts
        from example_app.summary import print_campaign
        from example_app.workflows import ExportReview
        from example_app.workflows import NewsletterCampaign
        from example_app.workflows import Onboarding
        from example_app.workflows import Payment

        started = time.monotonic()
        with app.app_context():
            for user in db.session.scalars(sa.select(User)):
                Onboarding.create(hero=user, commit=False)
                Payment.create(hero=user, commit=False)
            for export in db.session.scalars(sa.select(Export)):
                ExportReview.create(hero=export, commit=False)
            NewsletterCampaign.create(
                hero=db.session.get(Campaign, campaign_id), commit=False
            )
            db.session.commit()
            total = db.session.scalar(sa.select(sa.func.count(geneva.Workflow.id)))
            print(
                f"started {total} workflows for {self.user_count} users; "
                "embedded worker running",
                flush=True,
            )

        last_print = 0.0
        while True:
            with app.app_context():
                counts = workflow_state_counts()
                steps_done = db.session.scalar(
                    sa.select(sa.func.count(geneva.StepExecution.id)).where(
                        geneva.StepExecution.finished_at.is_not(None)
                    )
                )
                # The "operator": approve paused exports and resume them.
                approve_paused_exports("demo-operator")
                db.session.remove()
            ongoing = counts["ready"] + counts["performing"]
            now = time.monotonic()
            if now - last_print >= 1.0:
                print(
                    f"[{now - started:6.1f}s] steps done={steps_done} workflows: "
                    + " ".join(f"{state}={counts[state]}" for state in sorted(counts)),
                    flush=True,
                )
                last_print = now
            if ongoing == 0 and counts["paused"] == 0:
                break
            if now - started > self.timeout:
                print("timed out before every workflow settled", file=sys.stderr)
                return 1
            time.sleep(0.2)

        elapsed = time.monotonic() - started
        with app.app_context():
            rows = counts_by_type_and_state()
            executions = db.session.scalar(
                sa.select(sa.func.count(geneva.StepExecution.id))
            )
            reattempts = db.session.scalar(
                sa.select(sa.func.count(geneva.StepExecution.id)).where(
                    geneva.StepExecution.outcome == "reattempted"
                )
            )
            db.session.remove()
        print()
        print(f"summary after {elapsed:.1f}s ({executions} step executions):")
        width = max(
            (len(str(workflow_type)) for workflow_type, _, _ in rows), default=0
        )
        for workflow_type, state, count in rows:
            print(f"  {workflow_type:<{width}}  {state:<10} {count}")
        print(f"  payment attempts reattempted after gateway timeouts: {reattempts}")
        print_campaign(app, campaign_id)
        print("every workflow settled", flush=True)
        self.settled = True
        return 0


def _listen(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port``, or on a free port if it is busy."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as error:
        if port == 0 or error.errno != errno.EADDRINUSE:
            listener.close()
            raise
        print(f"port {port} is busy; the admin UI uses a free port instead")
        listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    return listener


if __name__ == "__main__":
    sys.exit(main())
