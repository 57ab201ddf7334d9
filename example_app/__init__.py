"""A small Flask app that uses flask_geneva for real work (the README's first command).

``python -m example_app demo`` creates a SQLite database, seeds users, starts their
workflows, runs an embedded Celery worker and Celery beat (flask_geneva's dispatcher
and housekeeping) in the same process (in-memory broker, no services needed), serves
the admin UI, prints progress and a summary once every workflow has settled, then
serves the admin until Ctrl-C.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from celery import Celery
from flask import Flask
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy

from example_app import login
from flask_geneva import Geneva

db = SQLAlchemy()
migrate = Migrate()
geneva = Geneva(db)
celery = Celery("example_app")

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def create_app(database_url: str | None = None, broker_url: str | None = None) -> Flask:
    """Build the example app.

    Args:
        database_url: SQLAlchemy URL; default ``$DATABASE_URL`` or a SQLite file in
            the instance folder.
        broker_url: Celery broker; default ``$CELERY_BROKER_URL`` or ``memory://``
            (only usable with the embedded worker of ``python -m example_app demo``).
    """
    app = Flask(__name__)
    url = database_url or os.environ.get("DATABASE_URL") or "sqlite:///example.sqlite3"
    app.config.update(
        SQLALCHEMY_DATABASE_URI=url,
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
        # The admin's CSRF tokens and the demo login live in the signed session
        # cookie.
        SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_hex(32),
        # The admin at /geneva asks for a demo login (/login, example_app/login.py,
        # DEMO ONLY): viewer, operator or admin, password $EXAMPLE_ADMIN_PASSWORD
        # (unset = nobody logs in). The user's role decides each page and button.
        GENEVA_ADMIN_CURRENT_ROLE=login.current_role,
        GENEVA_ADMIN_ACTOR=login.current_user_name,
    )
    celery.conf.update(
        broker_url=broker_url or os.environ.get("CELERY_BROKER_URL", "memory://"),
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        # The in-memory broker of the embedded demo worker polls; keep it brisk.
        broker_transport_options={"polling_interval": 0.05},
    )
    db.init_app(app)
    # Migrations written by `flask db init`, `flask geneva install` and
    # `flask db migrate` (for the example's own tables) live next to this file.
    migrate.init_app(app, db, directory=str(MIGRATIONS_DIR))
    geneva.init_app(app, celery=celery, admin=True)
    app.register_blueprint(login.login_blueprint)
    app.before_request(login.ask_for_login)

    from example_app import models  # noqa: F401 - registers the hero models
    from example_app import workflows  # noqa: F401 - registers the workflow classes

    return app
