"""The demo's summary of the newsletter campaign: its result, its batch
children and its resumable ``fan_out`` chain (R-APP-02, R-CHD-70)."""

from __future__ import annotations

from typing import Any

__all__ = ["print_campaign"]


def print_campaign(app: Any, campaign_id: int) -> None:
    """Print the campaign's result, its batch children and its ``fan_out`` chain."""
    import sqlalchemy as sa

    from example_app import db
    from example_app.models import Campaign
    from example_app.models import Subscriber
    from example_app.workflows import NewsletterCampaign

    with app.app_context():
        campaign = db.session.get(Campaign, campaign_id)
        if campaign is None:
            raise LookupError(f"campaign {campaign_id} is gone")
        workflow = db.session.scalars(NewsletterCampaign.for_hero(campaign)).one()
        chain = [e for e in workflow.execution_history if e.step_name == "fan_out"]
        children = workflow.children()
        reached = db.session.scalar(
            sa.select(sa.func.count(Subscriber.id)).where(
                Subscriber.issues_received == 1
            )
        )
        total = db.session.scalar(sa.select(sa.func.count(Subscriber.id)))
        finished = sum(child.state == "finished" for child in children)
        print(
            f"newsletter campaign {campaign.id} ({workflow.state}): "
            f"{len(children)} batch children ({finished} finished), "
            f"result {workflow.result!r}"
        )
        print(
            f"  {reached} of {total} subscribers mailed once, "
            f"rate-limited {campaign.throttled} times, "
            f"{len(chain)} execution{'' if len(chain) == 1 else 's'} of 'fan_out':"
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
