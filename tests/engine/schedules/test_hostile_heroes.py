"""Heroes callables that return odd things or whose query the database refuses
(SPEC §26.2, R-SCHED-22, R-SCHED-25, R-SCHED-27)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import sqlalchemy as sa

from flask_geneva.engine.schedules.fan_out import BATCH_ATTEMPTS
from tests.apps.basic import User
from tests.apps.basic import db
from tests.engine.schedules.support import Digest
from tests.engine.schedules.support import Tick
from tests.engine.schedules.support import fire_at
from tests.engine.schedules.support import fires
from tests.engine.schedules.support import make_users
from tests.engine.schedules.support import schedule_row
from tests.engine.schedules.support import workflows_of

FIRST_SEEN = datetime(2025, 1, 1, 10, 30, tzinfo=UTC)
ELEVEN = datetime(2025, 1, 1, 11, 0, tzinfo=UTC)


def _second(seconds: int) -> datetime:
    return ELEVEN.replace(second=seconds)


def test_a_query_the_database_refuses_fails_the_fire_after_a_few_attempts(app, declare):
    """R-SCHED-27: a heroes query that can never run (an unknown column) is a
    database error on every attempt: the fire records it while it is retried,
    ends failed at the BATCH_ATTEMPTS-th attempt, and stops taking the batch
    budget; another schedule fires meanwhile."""
    make_users(2)
    declare(
        "broken",
        Digest,
        cron="0 * * * *",
        heroes=lambda: sa.select(User).where(sa.text("no_such_column = 1")),
    )
    declare("healthy", Tick, cron="0 * * * *")
    fire_at(FIRST_SEEN)
    fire_at(_second(5))  # fires both; the broken batch fails once
    [fire] = fires("broken")
    assert fire["state"] == "running"
    assert "no_such_column" in fire["error"]
    assert [row["state"] for row in fires("healthy")] == ["done"]
    for attempt in range(2, BATCH_ATTEMPTS + 1):
        fire_at(_second(5 + attempt))
    [fire] = fires("broken")
    assert fire["state"] == "failed"
    assert fire["finished_at"] == _second(5 + BATCH_ATTEMPTS)
    row = schedule_row("broken")
    assert row["last_outcome"] == "failed"
    assert "no_such_column" in row["last_error"]
    fire_at(_second(30))  # nothing left to retry
    assert fires("broken")[0]["updated_at"] == _second(5 + BATCH_ATTEMPTS)
    assert workflows_of(Digest) == []


def test_a_batch_that_commits_clears_the_failure_count(app, declare):
    """R-SCHED-27: only failures in a row count: a batch that fails once and
    then succeeds goes on, its fire ends done with every hero handled."""
    ids = make_users(3)
    failing = {"left": BATCH_ATTEMPTS - 1}

    def heroes():
        if failing["left"]:
            failing["left"] -= 1
            return sa.select(User).where(sa.text("no_such_column = 1"))
        return sa.select(User)

    declare("flaky", Digest, cron="0 * * * *", heroes=heroes, batch_size=2)
    fire_at(FIRST_SEEN)
    for seconds in range(5, 5 + BATCH_ATTEMPTS + 1):
        fire_at(_second(seconds))
    [fire] = fires("flaky")
    assert (fire["state"], fire["started"], fire["skipped"]) == ("done", 3, 0)
    assert sorted(hero for _, hero, _ in workflows_of(Digest)) == ids


def test_duplicate_heroes_in_one_batch_start_one_workflow(app, declare):
    """R-SCHED-22, R-UNQ-01: a hero listed three times gets one workflow; the
    other two are counted skipped."""
    [hero_id] = make_users(1)

    def heroes():
        hero = db.session.get(User, hero_id)
        return [hero, hero, hero]

    declare("thrice", Digest, cron="0 * * * *", heroes=heroes)
    fire_at(FIRST_SEEN)
    fire_at(_second(5))
    [fire] = fires("thrice")
    assert (fire["state"], fire["started"], fire["skipped"]) == ("done", 1, 2)
    assert len(workflows_of(Digest)) == 1


def test_a_generator_raising_mid_way_keeps_the_batches_done(app, declare):
    """R-SCHED-25: a generator that raises in its second batch fails the fire
    with the error; the first batch's workflows stay."""
    ids = make_users(5)

    def heroes():
        for hero_id in ids[:3]:
            yield db.session.get(User, hero_id)
        raise RuntimeError("the hero source broke")

    declare("half", Digest, cron="0 * * * *", heroes=heroes, batch_size=2)
    fire_at(FIRST_SEEN)
    fire_at(_second(5))
    [fire] = fires("half")
    assert (fire["state"], fire["started"]) == ("failed", 2)
    assert fire["error"] == "RuntimeError: the hero source broke"
    assert [hero for _, hero, _ in workflows_of(Digest)] == ids[:2]


def test_odd_returns_fail_the_fire_naming_them(app, declare):
    """R-SCHED-25: a select of a column, a text clause, None in a hero class's
    list and an unsaved instance each fail their fire with a readable error."""
    make_users(1)
    odd = {
        "column": lambda: sa.select(User.id),
        "text": lambda: sa.text("select * from users"),
        "none": lambda: [None],
        "unsaved": lambda: [User(email="new@example.com")],
    }
    for name, heroes in odd.items():
        declare(name, Digest, cron="0 * * * *", heroes=heroes)
    fire_at(FIRST_SEEN)
    fire_at(_second(5))
    errors = {name: fires(name)[0]["error"] for name in odd}
    assert {fires(name)[0]["state"] for name in odd} == {"failed"}
    assert "TextClause" in errors["text"]
    assert "needs a hero" in errors["none"]
    assert "no primary key yet" in errors["unsaved"]
    assert "does not select one mapped class" in errors["column"]
    assert workflows_of(Digest) == []
