"""The example workflows: onboarding drip, flaky payment, export with operator review,
and a newsletter campaign walking every subscriber in a resumable step.

Waits are multiplied by ``$EXAMPLE_TIME_SCALE`` (default 1.0) so the demo settles in
seconds; read when this module is imported.
"""

from __future__ import annotations

import os
import random
from datetime import timedelta

import sqlalchemy as sa

from example_app import db
from example_app import geneva
from flask_geneva import cancel_if
from flask_geneva import resumable_step
from flask_geneva import step

TIME_SCALE = float(os.environ.get("EXAMPLE_TIME_SCALE", "1.0"))


def scaled(**kwargs: float) -> timedelta:
    """A ``timedelta(**kwargs)`` shrunk by the demo's time scale."""
    return timedelta(**kwargs) * TIME_SCALE


class GatewayTimeout(Exception):
    """The simulated payment gateway did not answer."""


class Onboarding(geneva.Workflow):
    """Welcome mail, a nudge two days later unless the user is active, tips after a week."""

    __geneva_type__ = "Onboarding"

    @cancel_if
    def unsubscribed(self) -> bool:
        return self.hero.unsubscribed

    @step
    def welcome(self) -> None:
        self.hero.mails_sent += 1
        # Some users log in right away; their nudge is skipped.
        if random.random() < 0.3:
            self.hero.logins += 1
        # A few unsubscribe; the workflow is then canceled by the condition.
        if random.random() < 0.05:
            self.hero.unsubscribed = True

    @step(wait=scaled(days=2), skip_if="is_active")
    def nudge(self) -> None:
        self.hero.mails_sent += 1

    @step(wait=scaled(days=5))
    def tips(self) -> None:
        self.hero.mails_sent += 1

    def is_active(self) -> bool:
        return self.hero.logins > 0


class Payment(geneva.Workflow):
    """Charge the user through a flaky gateway, retrying timeouts."""

    __geneva_type__ = "Payment"

    @step(
        on_exception="reattempt",
        max_reattempts=5,
        terminal_action="cancel",
    )
    def charge(self) -> None:
        if random.random() < 0.3:
            raise GatewayTimeout("gateway did not answer in time")
        self.hero.paid = True

    @step
    def receipt(self) -> None:
        self.hero.mails_sent += 1


class ExportReview(geneva.Workflow):
    """Build an export, wait for an operator's approval, deliver it."""

    __geneva_type__ = "ExportReview"

    @step
    def gather(self) -> None:
        self.hero.rows = random.randint(10, 10_000)

    @step
    def review(self) -> None:
        if not self.hero.approved:
            # An operator approves and resumes; resume() re-runs this step.
            self.pause()

    @step
    def deliver(self) -> None:
        self.hero.delivered = True


#: Mails the simulated provider accepts per rate-limit window.
PROVIDER_WINDOW_LIMIT = 7_500
#: Subscribers mailed per batch (one checkpoint per batch).
CAMPAIGN_BATCH_SIZE = 500


class NewsletterCampaign(geneva.Workflow):
    """Mail one issue to every subscriber, surviving restarts and rate limits.

    ``deliver`` is a resumable step: each batch of subscribers is mailed and
    checkpointed together, so a restarted worker continues after the last
    batch. After ``max_iterations`` batches the execution ends ``continued`` and
    a successor carries on at once; when the provider's window is used up the
    step suspends and the successor waits for the next window. The executions
    of ``deliver`` form a chain linked by ``continues_from_id``.
    """

    __geneva_type__ = "NewsletterCampaign"

    @step
    def prepare(self) -> None:
        self.hero.mails_sent = 0
        self.hero.window_sent = 0

    @resumable_step(max_iterations=10)
    def deliver(self, it) -> None:
        from example_app.models import Subscriber

        campaign = self.hero
        for batch in it.iterate_over_batches(
            sa.select(Subscriber), batch_size=CAMPAIGN_BATCH_SIZE
        ):
            if campaign.window_sent + len(batch.ids) > PROVIDER_WINDOW_LIMIT:
                # Rate limited before sending anything of this batch: a successor
                # picks the same batch up when the next window opens.
                campaign.window_sent = 0
                campaign.throttled += 1
                self.suspend(wait=scaled(minutes=30))
            db.session.execute(
                sa.update(Subscriber)
                .where(batch.where)
                .values(issues_received=Subscriber.issues_received + 1)
            )
            campaign.window_sent += len(batch.ids)
            campaign.mails_sent += len(batch.ids)

    @step
    def report(self) -> None:
        self.hero.subject = f"{self.hero.subject} (sent)"
