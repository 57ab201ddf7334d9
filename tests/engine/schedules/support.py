"""What the schedule tests share: workflow classes, declaring a schedule for one
test, running the dispatcher's schedule pass at a frozen time, reading the
rows (SPEC §26)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.engine.schedules import FiringPass
from flask_geneva.engine.schedules import fire_schedules
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva

SCHEDULES = "geneva_drive_schedules"
FIRES = "geneva_drive_schedule_fires"


class Digest(geneva.Workflow):
    """One step per hero: stays ongoing until it runs (the one-ongoing rule)."""

    @step
    def send(self):
        pass


class Tick(geneva.Workflow):
    """No hero, one cheap step: the first fire creates it, later fires skip
    while it is ongoing (NULL heroes compare equal, R-UNQ-06)."""

    may_proceed_without_hero = True

    @step
    def tick(self):
        pass


class HeroLessReport(geneva.Workflow):
    """No hero, one step: a second fire skips while the first is ongoing."""

    may_proceed_without_hero = True

    @step
    def build(self):
        pass


@pytest.fixture
def declare(app: Any) -> Iterator[Callable[..., Any]]:
    """``declare(name, Class, **options)``: a schedule for this test only."""
    names: list[str] = []

    def declare_one(name: str, workflow_class: Any, **options: Any) -> Any:
        declared = geneva.schedule(name, workflow_class, **options)
        names.append(name)
        return declared

    yield declare_one
    for name in names:
        geneva.remove_schedule(name)


def fire_at(moment: datetime, **options: Any) -> FiringPass:
    """The dispatcher's schedule pass with the clock frozen at ``moment``."""
    with clock.frozen(moment):
        context = current_context()
        return fire_schedules(context, context.session, **options)


def fires(name: str | None = None) -> list[dict[str, Any]]:
    """The fire rows (of one schedule), oldest first."""
    table = db.metadata.tables[FIRES]
    query = sa.select(table).order_by(table.c.fire_at)
    if name is not None:
        query = query.where(table.c.schedule_name == name)
    with db.engine.connect() as connection:
        return [dict(row) for row in connection.execute(query).mappings()]


def schedule_row(name: str) -> dict[str, Any] | None:
    """The schedule's state row, or None."""
    table = db.metadata.tables[SCHEDULES]
    with db.engine.connect() as connection:
        row = (
            connection.execute(sa.select(table).where(table.c.name == name))
            .mappings()
            .first()
        )
    return None if row is None else dict(row)


def workflows_of(workflow_class: Any) -> list[Any]:
    """``(id, hero_id, state)`` of the class's workflows, by id."""
    table = geneva.Workflow.__table__
    with db.engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(table.c.id, table.c.hero_id, table.c.state)
                .where(table.c.type == workflow_class.__geneva_type__)
                .order_by(table.c.id)
            )
        )


def handled(name: str) -> list[int]:
    """``started + skipped`` of each fire of ``name``: 1 when its one hero-less
    workflow was handled exactly once."""
    return [row["started"] + row["skipped"] for row in fires(name)]


def make_users(count: int) -> list[int]:
    """``count`` committed users; their ids."""
    users = [User(email=f"u{index}@example.com") for index in range(count)]
    db.session.add_all(users)
    db.session.commit()
    return [user.id for user in users]
