"""The example app's own tables: the heroes of its workflows and their data."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import orm

from example_app import db


class User(db.Model):  # type: ignore[name-defined, misc]
    """A customer; hero of the onboarding and payment workflows."""

    __tablename__ = "example_users"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    email: orm.Mapped[str] = orm.mapped_column(sa.String(255), unique=True)
    logins: orm.Mapped[int] = orm.mapped_column(default=0)
    unsubscribed: orm.Mapped[bool] = orm.mapped_column(default=False)
    mails_sent: orm.Mapped[int] = orm.mapped_column(default=0)
    paid: orm.Mapped[bool] = orm.mapped_column(default=False)


class Export(db.Model):  # type: ignore[name-defined, misc]
    """A data export that an operator must approve before delivery."""

    __tablename__ = "example_exports"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    user_id: orm.Mapped[int] = orm.mapped_column(sa.ForeignKey("example_users.id"))
    rows: orm.Mapped[int] = orm.mapped_column(default=0)
    approved: orm.Mapped[bool] = orm.mapped_column(default=False)
    delivered: orm.Mapped[bool] = orm.mapped_column(default=False)


class Campaign(db.Model):  # type: ignore[name-defined, misc]
    """A newsletter issue mailed to every subscriber; hero of the campaign workflow."""

    __tablename__ = "example_campaigns"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    subject: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    mails_sent: orm.Mapped[int] = orm.mapped_column(default=0)
    #: Mails sent in the mail provider's current rate-limit window.
    window_sent: orm.Mapped[int] = orm.mapped_column(default=0)
    #: How often the provider's rate limit made the campaign wait.
    throttled: orm.Mapped[int] = orm.mapped_column(default=0)


class Subscriber(db.Model):  # type: ignore[name-defined, misc]
    """A newsletter subscriber; the campaign's resumable step walks these rows."""

    __tablename__ = "example_subscribers"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    email: orm.Mapped[str] = orm.mapped_column(sa.String(255), unique=True)
    issues_received: orm.Mapped[int] = orm.mapped_column(default=0)
