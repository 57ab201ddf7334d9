"""A host app for ``flask geneva install`` subprocess tests (SPEC §2.5).

``flask --app tests.apps.install_app ...`` builds it from the environment:
``GENEVA_INSTALL_DATABASE_URL`` (required) is the database and
``GENEVA_INSTALL_KEY_TYPE`` (default ``bigint``) the ``key_type`` passed to
:class:`~flask_geneva.Geneva`. It owns one model, the hero ``Account``.
"""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from flask import Flask
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import orm

from flask_geneva import Geneva

db = SQLAlchemy()
geneva = Geneva(db, key_type=os.environ.get("GENEVA_INSTALL_KEY_TYPE", "bigint"))


class Account(db.Model):  # type: ignore[name-defined, misc]
    """The hero model of this host app."""

    __tablename__ = "accounts"

    id: orm.Mapped[int] = orm.mapped_column(sa.Integer, primary_key=True)
    email: orm.Mapped[str] = orm.mapped_column(sa.String(255))


def ignore_foreign_tables(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """The host's own ``include_object``: skip tables other test apps left behind.

    Server test databases are shared with the rest of the suite; without this,
    ``flask db migrate`` would propose dropping their tables. flask_geneva's filter
    must be combined with it, not replace it.
    """
    return not (type_ == "table" and reflected and compare_to is None)


def create_app() -> Flask:
    """Build the app; ``flask --app tests.apps.install_app`` calls this."""
    url = os.environ.get("GENEVA_INSTALL_DATABASE_URL")
    if not url:
        raise RuntimeError("set GENEVA_INSTALL_DATABASE_URL to the database URL")
    app = Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI=url, GENEVA_TASK_BACKEND="recording")
    db.init_app(app)
    Migrate(app, db, include_object=ignore_foreign_tables)
    geneva.init_app(app)
    return app
