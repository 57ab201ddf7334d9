"""The example workflows: onboarding drip, flaky payment, export with operator review,
a refund that waits for a workflow signal, and a newsletter campaign that fans
out to batch children from a resumable step and sums their results.

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


class RefundRequest(geneva.Workflow):
    """Refund a user once support approves: the refund step waits for the
    workflow signal ``refund_approved`` (delivered from the admin's
    "Deliver signal…" form, ``flask geneva signal ID refund_approved`` or
    ``workflow.signal("refund_approved", {...})``), parked with no worker held.
    The demo leaves a few waiting for you to try (R-APP-04)."""

    __geneva_type__ = "RefundRequest"

    @step
    def open_ticket(self) -> None:
        self.hero.mails_sent += 1

    @step(wait_for="refund_approved")
    def refund(self) -> None:
        self.hero.paid = False

    @step
    def confirm(self) -> None:
        self.hero.mails_sent += 1


#: Subscribers the simulated mail provider accepts per rate-limit window.
PROVIDER_WINDOW_LIMIT = 7_500
#: Subscribers per batch child of a campaign.
CAMPAIGN_BATCH_SIZE = 500
#: Batch children the campaign starts per checkpoint of its fan-out.
BATCHES_PER_CHECKPOINT = 5


class SendBatch(geneva.Workflow):
    """One batch child of a campaign: mails the issue to its subscribers.

    Its hero is a :class:`~example_app.models.CampaignBatch`. Subscribers who
    unsubscribed are skipped. A subscriber already mailed this campaign is not
    mailed again (``last_campaign_id``), so a run of ``send`` repeated after a
    crash (steps run at least once) mails nobody twice, and its result still
    counts every mail of the batch.
    """

    __geneva_type__ = "SendBatch"
    #: Only its campaign starts a batch: not offered on the admin's start page
    #: (R-ADM-200).
    admin_startable = False

    @step
    def send(self) -> None:
        from example_app.models import Subscriber

        batch = self.hero
        in_batch = Subscriber.id.between(
            batch.first_subscriber_id, batch.last_subscriber_id
        )
        db.session.execute(
            sa.update(Subscriber)
            .where(in_batch, Subscriber.unsubscribed.is_(False))
            .where(
                sa.or_(
                    Subscriber.last_campaign_id.is_(None),
                    Subscriber.last_campaign_id != batch.campaign_id,
                )
            )
            .values(
                issues_received=Subscriber.issues_received + 1,
                last_campaign_id=batch.campaign_id,
            )
        )
        counts = db.session.execute(
            sa.select(
                sa.func.count().filter(
                    Subscriber.last_campaign_id == batch.campaign_id
                ),
                sa.func.count().filter(Subscriber.unsubscribed.is_(True)),
            ).where(in_batch)
        ).one()
        self.set_result({"sent": counts[0], "skipped": counts[1]})


class NewsletterCampaign(geneva.Workflow):
    """Mail one issue to every subscriber: a fan-out to batch children, then a report.

    ``fan_out`` is a resumable step: it walks the subscribers in keyset order and
    starts one :class:`SendBatch` child per ``CAMPAIGN_BATCH_SIZE`` of them, a few
    batches per checkpoint, so each checkpoint commits its children with the
    cursor and no transaction holds the whole fan-out; a restarted worker
    continues after the last checkpoint. After ``max_iterations`` checkpoints
    the execution ends ``continued`` and a successor carries on at once; when
    the provider's window is used up the step suspends and the successor waits
    for the next window. ``report`` waits (parked, no worker held) until every
    child settled, then sums their results into the campaign's result.
    """

    __geneva_type__ = "NewsletterCampaign"

    @step
    def prepare(self) -> None:
        self.hero.mails_sent = 0
        self.hero.window_sent = 0

    @resumable_step(max_iterations=2)
    def fan_out(self, it) -> None:
        from example_app.models import CampaignBatch
        from example_app.models import Subscriber

        campaign = self.hero
        for chunk in it.iterate_over_batches(
            sa.select(Subscriber),
            batch_size=CAMPAIGN_BATCH_SIZE * BATCHES_PER_CHECKPOINT,
        ):
            if campaign.window_sent + len(chunk.ids) > PROVIDER_WINDOW_LIMIT:
                # Rate limited before starting anything of this chunk: a
                # successor picks the same chunk up when the next window opens.
                campaign.window_sent = 0
                campaign.throttled += 1
                self.suspend(wait=scaled(minutes=30))
            batches = [
                CampaignBatch(
                    campaign_id=campaign.id,
                    first_subscriber_id=ids[0],
                    last_subscriber_id=ids[-1],
                )
                for ids in _split(chunk.ids, CAMPAIGN_BATCH_SIZE)
            ]
            db.session.add_all(batches)
            db.session.flush()
            # Committed with this chunk's checkpoint; the children's first steps
            # are published after that commit.
            self.start_children(
                SendBatch,
                batches,
                key=lambda b: (
                    f"subscribers {b.first_subscriber_id}-{b.last_subscriber_id}"
                ),
            )
            campaign.window_sent += len(chunk.ids)

    @step(wait_for_children=True)
    def report(self) -> None:
        results = self.child_results().values()
        sent = sum(result["sent"] for result in results)
        skipped = sum(result["skipped"] for result in results)
        self.hero.mails_sent = sent
        if not self.hero.subject.endswith(" (sent)"):
            self.hero.subject = f"{self.hero.subject} (sent)"
        self.set_result({"batches": len(results), "sent": sent, "skipped": skipped})


def _split(ids: list[int], size: int) -> list[list[int]]:
    """``ids`` (in keyset order) in runs of ``size``, the last one shorter."""
    return [ids[start : start + size] for start in range(0, len(ids), size)]
