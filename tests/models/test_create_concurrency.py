"""Concurrent ``create()`` calls from real threads (R-WF-10, R-UNQ-01..03, issue 13.4).

Each thread has its own app context and so its own session and connection. On
MariaDB these once deadlocked on the gap lock that the "cancel other scheduled
executions" UPDATE took for a brand-new workflow, and the deadlock then surfaced as
``SAVEPOINT sa_savepoint_1 does not exist``.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import sqlalchemy as sa

from flask_geneva import DuplicateWorkflowError
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.innodb_locks import BOTH_ISOLATION_LEVELS

THREADS = 4
CREATES_PER_THREAD = 250
#: Creates per thread under REPEATABLE READ (``GENEVA_MYSQL_READ_COMMITTED =
#: False``): 4 x 50 deadlocked in each of 3 runs without the fix (h48), in ~3 s.
REPEATABLE_READ_CREATES_PER_THREAD = 50
RACED_HEROES = 100


def _make_heroes(count: int) -> list[int]:
    heroes = [User(email=f"hero{index}@example.com") for index in range(count)]
    db.session.add_all(heroes)
    db.session.commit()
    ids = [hero.id for hero in heroes]
    db.session.remove()
    return ids


def _run_threads(app: Any, chunks: list[list[int]]) -> collections.Counter[str]:
    """Create one workflow per hero id, each chunk in its own thread; count results.

    The counter holds ``"created"``, ``"DuplicateWorkflowError"`` or, for anything
    else, the exception's class and message.
    """
    results: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(len(chunks))

    def count(key: str) -> None:
        with lock:
            results[key] += 1

    def create_all(hero_ids: list[int]) -> None:
        with app.app_context():
            barrier.wait(timeout=60)
            for hero_id in hero_ids:
                try:
                    EmptyTwoSteps.create(hero=db.session.get(User, hero_id))
                except DuplicateWorkflowError:
                    count("DuplicateWorkflowError")
                except Exception as error:  # noqa: BLE001 - counted and asserted
                    count(f"{type(error).__name__}: {error}")
                    db.session.rollback()
                else:
                    count("created")
                db.session.remove()

    threads = [threading.Thread(target=create_all, args=(chunk,)) for chunk in chunks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads)
    return results


@BOTH_ISOLATION_LEVELS
def test_concurrent_creates_for_distinct_heroes_all_succeed(app):
    """4 threads x 250 creates for distinct heroes: every one succeeds (R-WF-10/13);
    4 x 50 under REPEATABLE READ, where the gap lock deadlocked (R-CFG-04)."""
    per_thread = (
        CREATES_PER_THREAD
        if app.config["GENEVA_MYSQL_READ_COMMITTED"]
        else REPEATABLE_READ_CREATES_PER_THREAD
    )
    with app.app_context():
        hero_ids = _make_heroes(THREADS * per_thread)
    chunks = [hero_ids[index::THREADS] for index in range(THREADS)]

    results = _run_threads(app, chunks)

    assert results == {"created": THREADS * per_thread}
    with app.app_context():
        executions = geneva.StepExecution
        workflows = geneva.Workflow
        assert db.session.scalar(
            sa.select(sa.func.count()).select_from(workflows)
        ) == len(hero_ids)
        # Exactly one scheduled execution of the first step per workflow (R-WF-13).
        rows = db.session.execute(
            sa.select(executions.step_name, executions.state, sa.func.count()).group_by(
                executions.step_name, executions.state
            )
        ).all()
        assert [tuple(row) for row in rows] == [("first", "scheduled", len(hero_ids))]


def test_same_hero_racers_get_duplicate_workflow_error(app):
    """Two threads per hero race to create: one workflow each, the loser gets DuplicateWorkflowError (R-UNQ-01..03)."""
    with app.app_context():
        hero_ids = _make_heroes(2 * RACED_HEROES)
    halves = [hero_ids[0::2], hero_ids[1::2]]
    # Two threads walk each half in the same order, so they race for every hero.
    chunks = [halves[0], halves[1], list(halves[0]), list(halves[1])]

    results = _run_threads(app, chunks)

    assert results == {
        "created": len(hero_ids),
        "DuplicateWorkflowError": len(hero_ids),
    }
    with app.app_context():
        workflows = geneva.Workflow
        per_hero = db.session.execute(
            sa.select(workflows.hero_id, sa.func.count()).group_by(workflows.hero_id)
        ).all()
        assert sorted(per_hero) == [(hero_id, 1) for hero_id in sorted(hero_ids)]
        assert db.session.scalar(
            sa.select(sa.func.count()).select_from(geneva.StepExecution)
        ) == len(hero_ids)
