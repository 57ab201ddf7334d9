"""Entry module for running the example app as separate processes (R-APP-03).

It creates the app from ``$DATABASE_URL`` and ``$CELERY_BROKER_URL`` at import,
so Celery and Flask can load it::

    celery -A example_app.worker:celery worker      # runs the steps
    celery -A example_app.worker:celery beat        # runs the dispatcher
    flask --app example_app.worker:app db upgrade   # creates the tables
    flask --app example_app.worker:app seed         # seeds users, starts workflows
    flask --app example_app.worker:app progress     # operator + progress + summary

``$GENEVA_MAX_BROKER_DELAY`` (seconds, default 600) and ``$GENEVA_DISPATCH_INTERVAL``
(seconds, default 60) shorten the dispatcher's horizon and period for a demo; set
them to the same values in every process.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import click
import sqlalchemy as sa

import flask_geneva
from example_app import celery
from example_app import create_app
from example_app import db
from example_app import geneva

app = create_app()
app.config["GENEVA_MAX_BROKER_DELAY"] = timedelta(
    seconds=float(os.environ.get("GENEVA_MAX_BROKER_DELAY", "600"))
)
DISPATCH_INTERVAL = float(os.environ.get("GENEVA_DISPATCH_INTERVAL", "60"))
app.config["GENEVA_DISPATCH_INTERVAL"] = timedelta(seconds=DISPATCH_INTERVAL)
# Validate and apply the two above now (init_app ran inside create_app), not at
# the first geneva operation (R-CFG-02).
geneva.reload_settings(app)

# Merged into the app's own transport options (its polling interval stays).
celery.conf.update(flask_geneva.celery_defaults(celery))
celery.conf.beat_schedule = flask_geneva.beat_schedule(
    dispatch_interval_seconds=DISPATCH_INTERVAL
)


@app.cli.command("seed")
@click.option("--users", default=1000, show_default=True, help="Users to seed.")
@click.option(
    "--subscribers",
    default=20_000,
    show_default=True,
    help="Newsletter subscribers to seed; 0 starts no campaign.",
)
def seed_command(users: int, subscribers: int) -> None:
    """Seed users, exports and a newsletter campaign and start their workflows
    (published after commit)."""
    from example_app.models import Campaign
    from example_app.models import Export
    from example_app.models import User
    from example_app.seeding import seed_campaign
    from example_app.workflows import ExportReview
    from example_app.workflows import NewsletterCampaign
    from example_app.workflows import Onboarding
    from example_app.workflows import Payment

    offset = db.session.scalar(sa.select(sa.func.count(User.id))) or 0
    rows = [User(email=f"user{offset + i}@example.com") for i in range(users)]
    db.session.add_all(rows)
    db.session.commit()
    exports = [Export(user_id=user.id) for user in rows[: max(1, users // 20)]]
    db.session.add_all(exports)
    db.session.commit()
    for user in rows:
        Onboarding.create(hero=user, commit=False)
        Payment.create(hero=user, commit=False)
    for export in exports:
        ExportReview.create(hero=export, commit=False)
    db.session.commit()
    campaigns = 0
    if subscribers > 0:
        campaign_id = seed_campaign(subscribers)
        NewsletterCampaign.create(hero=db.session.get(Campaign, campaign_id))
        campaigns = 1
    click.echo(
        f"seeded {users} users, {len(exports)} exports and {subscribers} "
        f"subscribers; started {2 * users + len(exports) + campaigns} workflows"
    )


@app.cli.command("progress")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds.")
def progress_command(timeout: float) -> None:
    """Approve paused exports (the operator), print progress, then a summary."""
    from example_app.progress import approve_paused_exports
    from example_app.progress import counts_by_type_and_state
    from example_app.progress import workflow_state_counts

    started = time.monotonic()
    while True:
        counts = workflow_state_counts()
        approve_paused_exports("example-operator")
        db.session.remove()
        elapsed = time.monotonic() - started
        click.echo(
            f"[{elapsed:6.1f}s] "
            + " ".join(f"{state}={counts[state]}" for state in sorted(counts))
        )
        if counts["ready"] + counts["performing"] + counts["paused"] == 0:
            break
        if elapsed > timeout:
            raise click.ClickException("timed out before every workflow settled")
        time.sleep(2)
    click.echo("summary:")
    for workflow_type, state, count in counts_by_type_and_state():
        click.echo(f"  {workflow_type:<14} {state:<10} {count}")
    click.echo("every workflow settled")
