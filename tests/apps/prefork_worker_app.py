"""The real-worker app of ``worker_app``, touching the database at import time.

Many hosts do this (a settings lookup, a health check) in the module the worker
loads: ``celery -A tests.apps.prefork_worker_app:celery worker --pool=prefork``.
The Celery parent process then holds a pooled database connection when it forks
its pool children (issue 12, point 2).
"""

from __future__ import annotations

import sqlalchemy as sa

from tests.apps import basic
from tests.apps.worker_app import app
from tests.apps.worker_app import celery

__all__ = ["app", "celery"]

with app.app_context():
    basic.db.session.execute(sa.text("select 1"))
