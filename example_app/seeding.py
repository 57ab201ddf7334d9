"""Seeding the newsletter campaign: what the demo and the ``seed`` command share.

Needs an app context.
"""

from __future__ import annotations

import sqlalchemy as sa

from example_app import db

#: Every UNSUBSCRIBED_EVERY-th seeded subscriber has unsubscribed (skipped).
UNSUBSCRIBED_EVERY = 50


def seed_campaign(subscriber_count: int, *, subject: str = "Geneva News #1") -> int:
    """Insert ``subscriber_count`` subscribers in bulk and a campaign; return its id.

    The subscribers go in as one multi-row insert (executemany), not one ORM
    object each, so 20,000 take well under a second on SQLite. Committed.
    """
    from example_app.models import Campaign
    from example_app.models import Subscriber

    offset = db.session.scalar(sa.select(sa.func.count(Subscriber.id))) or 0
    if subscriber_count > 0:
        db.session.execute(
            sa.insert(Subscriber),
            [
                {
                    "email": f"reader{offset + i}@example.com",
                    "issues_received": 0,
                    "unsubscribed": (offset + i) % UNSUBSCRIBED_EVERY
                    == UNSUBSCRIBED_EVERY - 1,
                }
                for i in range(subscriber_count)
            ],
        )
    campaign = Campaign(subject=subject)
    db.session.add(campaign)
    db.session.commit()
    return int(campaign.id)
