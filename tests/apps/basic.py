"""The app most tests use: one ``db``, one ``Geneva``, a ``User`` hero model."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import orm

from flask_geneva import Geneva

db = SQLAlchemy()
geneva = Geneva(db)


class User(db.Model):  # type: ignore[name-defined, misc]
    """A hero model."""

    __tablename__ = "users"

    id: orm.Mapped[int] = orm.mapped_column(sa.Integer, primary_key=True)
    email: orm.Mapped[str] = orm.mapped_column(
        sa.String(255), default="someone@example.com"
    )
    archived: orm.Mapped[bool] = orm.mapped_column(sa.Boolean, default=False)
    blocked: orm.Mapped[bool] = orm.mapped_column(sa.Boolean, default=False)
    counter: orm.Mapped[int] = orm.mapped_column(sa.Integer, default=0)


def create_app(database_url: str, *, celery: Any = None, **config: Any) -> Flask:
    """Build a test app bound to ``database_url``; ``config`` overrides settings.

    ``celery`` is passed to ``geneva.init_app`` (needed with the celery backend).
    """
    return create_app_for(db, geneva, database_url, celery=celery, **config)


def create_app_for(
    database: SQLAlchemy,
    extension: Geneva,
    database_url: str,
    *,
    celery: Any = None,
    **config: Any,
) -> Flask:
    """A test app for ``database`` and ``extension``, recording its publications."""
    app = Flask(__name__)
    app.config.update(
        TESTING=True,
        SQLALCHEMY_DATABASE_URI=database_url,
        GENEVA_TASK_BACKEND="recording",
        # The longest budget allowed: a loaded machine must not end a chain that a
        # test expects to run inline to the end (tests of the budget set their own).
        GENEVA_INLINE_CONTINUATION_BUDGET=3600,
    )
    app.config.update(config)
    database.init_app(app)
    extension.init_app(app, celery=celery)
    return app
