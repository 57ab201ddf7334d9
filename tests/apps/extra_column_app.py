"""An app whose workflow subclass adds a column with ``onupdate`` (SQLite only)."""

from __future__ import annotations

import itertools
from typing import Any

import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import orm

from flask_geneva import Geneva
from tests.apps.basic import create_app_for
from tests.support.step_bodies import named_steps
from tests.support.step_bodies import nothing

db = SQLAlchemy()
geneva = Geneva(db)
_touch_numbers = itertools.count(1)


class TouchedWorkflow(geneva.Workflow):
    """Counts its row updates in a column of its own (single-table inheritance)."""

    may_proceed_without_hero = True
    touches: orm.Mapped[int | None] = orm.mapped_column(
        sa.Integer, nullable=True, default=0, onupdate=lambda: next(_touch_numbers)
    )

    _steps = named_steps(first=nothing, second=nothing)


def create_app(database_url: str, **config: Any) -> Flask:
    """An app bound to ``database_url`` with these models."""
    return create_app_for(db, geneva, database_url, **config)
