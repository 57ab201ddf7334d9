"""``python -m example_app demo``: run the example end to end in one process."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m example_app")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="seed users, run their workflows, print a summary"
    )
    demo.add_argument(
        "--users", type=int, default=1000, help="users to seed (default 1000)"
    )
    demo.add_argument(
        "--time-scale",
        type=float,
        default=0.00001,
        help="multiply every wait by this (default 0.00001: 2 days -> 1.7 s)",
    )
    demo.add_argument(
        "--subscribers",
        type=int,
        default=20_000,
        help="newsletter subscribers to seed (default 20000)",
    )
    demo.add_argument("--database-url", default=None, help="default: a new SQLite file")
    demo.add_argument(
        "--timeout", type=float, default=600, help="seconds before giving up"
    )
    demo.add_argument(
        "--keep-database",
        action="store_true",
        help="keep the new SQLite file (default: deleted when the demo ends)",
    )
    args = parser.parse_args(argv)
    os.environ["EXAMPLE_TIME_SCALE"] = str(args.time_scale)
    return run_demo(
        args.users,
        args.database_url,
        args.timeout,
        subscriber_count=args.subscribers,
        keep_database=args.keep_database,
    )


def run_demo(
    user_count: int,
    database_url: str | None,
    timeout: float,
    *,
    subscriber_count: int = 20_000,
    keep_database: bool = False,
) -> int:
    """Run the demo on ``database_url``, or on a new SQLite file in a temporary
    folder that is deleted when the demo ends unless ``keep_database``.

    Returns:
        The exit status: 0 once every workflow settled, 1 on a timeout.
    """
    if database_url is not None:
        return _run_demo(user_count, database_url, timeout, subscriber_count)
    workdir = Path(tempfile.mkdtemp(prefix="geneva-example-"))
    url = f"sqlite:///{workdir / 'example.sqlite3'}"
    try:
        return _run_demo(user_count, url, timeout, subscriber_count)
    finally:
        if keep_database:
            print(f"the database is kept: {url}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            print(f"deleted {workdir} (--keep-database keeps it)")


def _run_demo(user_count: int, url: str, timeout: float, subscriber_count: int) -> int:
    import logging

    import sqlalchemy as sa
    from celery.contrib.testing.worker import start_worker

    from example_app import celery
    from example_app import create_app
    from example_app import db
    from example_app import geneva

    # Failed payment attempts are expected (the gateway is flaky on purpose); each
    # is logged (a WARNING while reattempted, an ERROR and a failed task once it
    # ends the workflow). Keep the demo output readable.
    logging.getLogger("celery.app.trace").setLevel(logging.CRITICAL)
    logging.getLogger("flask_geneva").setLevel(logging.CRITICAL)
    logging.getLogger("flask_geneva.tasks").setLevel(logging.CRITICAL)

    app = create_app(url, broker_url="memory://")
    from example_app.models import Campaign
    from example_app.models import Export
    from example_app.models import Subscriber
    from example_app.models import User
    from example_app.progress import approve_paused_exports
    from example_app.progress import counts_by_type_and_state
    from example_app.progress import workflow_state_counts
    from example_app.workflows import ExportReview
    from example_app.workflows import NewsletterCampaign
    from example_app.workflows import Onboarding
    from example_app.workflows import Payment

    print(f"database: {url}")
    with app.app_context():
        from flask_migrate import upgrade

        upgrade()  # the same as `flask db upgrade`
        users = [User(email=f"user{i}@example.com") for i in range(user_count)]
        db.session.add_all(users)
        db.session.commit()
        exports = [Export(user_id=u.id) for u in users[: max(1, user_count // 20)]]
        db.session.add_all(exports)
        if subscriber_count > 0:
            db.session.execute(
                sa.insert(Subscriber),
                [
                    {"email": f"reader{i}@example.com", "issues_received": 0}
                    for i in range(subscriber_count)
                ],
            )
        campaign = Campaign(subject="Geneva News #1")
        db.session.add(campaign)
        db.session.commit()
        campaign_id = campaign.id

    started = time.monotonic()
    with start_worker(
        celery, pool="solo", perform_ping_check=False, loglevel="WARNING"
    ):
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
                f"started {total} workflows for {user_count} users; embedded worker running"
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
                    + " ".join(f"{state}={counts[state]}" for state in sorted(counts))
                )
                last_print = now
            if ongoing == 0 and counts["paused"] == 0:
                break
            if now - started > timeout:
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
    print()
    print(f"summary after {elapsed:.1f}s ({executions} step executions):")
    width = max((len(str(workflow_type)) for workflow_type, _, _ in rows), default=0)
    for workflow_type, state, count in rows:
        print(f"  {workflow_type:<{width}}  {state:<10} {count}")
    print(f"  payment attempts reattempted after gateway timeouts: {reattempts}")
    _print_campaign(app, campaign_id)
    print("every workflow settled")
    return 0


def _print_campaign(app: Any, campaign_id: int) -> None:
    """Print the campaign's ``deliver`` chain: one line per execution."""
    import sqlalchemy as sa

    from example_app import db
    from example_app.models import Campaign
    from example_app.models import Subscriber
    from example_app.workflows import NewsletterCampaign

    with app.app_context():
        campaign = db.session.get(Campaign, campaign_id)
        workflow = db.session.scalars(NewsletterCampaign.for_hero(campaign)).one()
        chain = [e for e in workflow.execution_history if e.step_name == "deliver"]
        reached = db.session.scalar(
            sa.select(sa.func.count(Subscriber.id)).where(
                Subscriber.issues_received == 1
            )
        )
        total = db.session.scalar(sa.select(sa.func.count(Subscriber.id)))
        print(
            f"newsletter campaign {campaign.id} ({workflow.state}): "
            f"{reached} of {total} subscribers mailed once, "
            f"rate-limited {campaign.throttled} times, "
            f"{len(chain)} execution{'' if len(chain) == 1 else 's'} of 'deliver':"
        )
        for execution in chain:
            interrupt = execution.read_metadata("interrupt") or {}
            parent = execution.continues_from_id
            print(
                f"  #{execution.id} "
                + (f"continues #{parent} " if parent is not None else "first ")
                + f"{execution.outcome:<10} cursor={execution.cursor_value!r}"
                + (f" {interrupt['reason']}" if interrupt.get("reason") else "")
            )
        db.session.remove()


if __name__ == "__main__":
    sys.exit(main())
