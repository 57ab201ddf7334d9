"""The app most tests use: one ``db``, one ``Geneva``, a ``User`` hero model."""

from __future__ import annotations

from typing import Any

import jinja2
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


class _CompiledTemplates(jinja2.BytecodeCache):
    """The templates every test app of this process compiled, kept in memory.

    Each test builds a new Flask app, whose Jinja environment would compile the
    admin's templates again at its first pages (about 20 ms each, a fifth of
    an admin test's time). Jinja checks each bucket against the template's
    source checksum, so a changed template is compiled again.
    """

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_compiled_templates = _CompiledTemplates()


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
    app.jinja_env.bytecode_cache = _compiled_templates
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
