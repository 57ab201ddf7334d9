"""The example app's own tables: the heroes of its workflows and their data."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import orm

from example_app import db


class User(db.Model):  # type: ignore[name-defined, misc]
    """A customer; hero of the onboarding and payment workflows."""

    __tablename__ = "example_users"
    #: The admin's "Start a workflow" form finds a user by the start of the
    #: email (R-ADM-203); the column is unique, so indexed.
    __geneva_hero_label__ = "email"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    email: orm.Mapped[str] = orm.mapped_column(sa.String(255), unique=True)
    logins: orm.Mapped[int] = orm.mapped_column(default=0)
    unsubscribed: orm.Mapped[bool] = orm.mapped_column(default=False)
    mails_sent: orm.Mapped[int] = orm.mapped_column(default=0)
    paid: orm.Mapped[bool] = orm.mapped_column(default=False)

    def __str__(self) -> str:
        # The admin shows a hero as "User#7 — <str(hero)>" (R-ADM-203).
        return self.email


class Export(db.Model):  # type: ignore[name-defined, misc]
    """A data export that an operator must approve before delivery."""

    __tablename__ = "example_exports"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    user_id: orm.Mapped[int] = orm.mapped_column(sa.ForeignKey("example_users.id"))
    rows: orm.Mapped[int] = orm.mapped_column(default=0)
    approved: orm.Mapped[bool] = orm.mapped_column(default=False)
    delivered: orm.Mapped[bool] = orm.mapped_column(default=False)


class Campaign(db.Model):  # type: ignore[name-defined, misc]
    """A newsletter issue mailed to every subscriber; hero of the campaign workflow.

    The campaign fans out to one batch child per :class:`CampaignBatch`; its
    counters are the sums of the batches' results (the workflow's result).
    """

    __tablename__ = "example_campaigns"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    subject: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    mails_sent: orm.Mapped[int] = orm.mapped_column(default=0)
    #: Subscribers handed to batch children in the provider's current window.
    window_sent: orm.Mapped[int] = orm.mapped_column(default=0)
    #: How often the provider's rate limit made the fan-out wait.
    throttled: orm.Mapped[int] = orm.mapped_column(default=0)


class Subscriber(db.Model):  # type: ignore[name-defined, misc]
    """A newsletter subscriber; the campaign's resumable step walks these rows."""

    __tablename__ = "example_subscribers"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    email: orm.Mapped[str] = orm.mapped_column(sa.String(255), unique=True)
    issues_received: orm.Mapped[int] = orm.mapped_column(default=0)
    #: The last campaign mailed to this subscriber (a batch run again skips them).
    last_campaign_id: orm.Mapped[int | None]
    #: An unsubscribed reader is skipped by the batch that holds them.
    unsubscribed: orm.Mapped[bool] = orm.mapped_column(
        default=False, server_default=sa.false()
    )


class CampaignBatch(db.Model):  # type: ignore[name-defined, misc]
    """The subscribers ``first_subscriber_id..last_subscriber_id`` of a campaign;
    hero of one batch child of the campaign workflow."""

    __tablename__ = "example_campaign_batches"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    campaign_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey("example_campaigns.id"), index=True
    )
    first_subscriber_id: orm.Mapped[int]
    last_subscriber_id: orm.Mapped[int]
