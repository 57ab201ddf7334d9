"""A second app whose geneva tables use UUID keys (R-DM-20..22), always on SQLite."""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from tests.apps.basic import create_app_for
from tests.support.step_bodies import named_steps
from tests.support.step_bodies import nothing

db = SQLAlchemy()
geneva = Geneva(db, key_type="uuid")


class UuidTwoSteps(geneva.Workflow):
    """Two no-op steps; no hero needed."""

    may_proceed_without_hero = True

    _steps = named_steps(first=nothing, second=nothing)


def create_app(database_url: str, **config: Any) -> Flask:
    """An app bound to ``database_url`` with the UUID-keyed models."""
    return create_app_for(db, geneva, database_url, **config)
