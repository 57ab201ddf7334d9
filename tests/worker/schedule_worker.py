"""The schedule a real worker fires in ``tests/worker/test_schedule_worker.py``.

Only the worker imports this module (``--include``): declared in the test
process, the schedule would fire in every later test's dispatcher runs.
"""

from __future__ import annotations

import sqlalchemy as sa

from flask_geneva import step
from tests.apps import basic

#: The schedule's name and its heroes' e-mail prefix (the test uses them too).
SCHEDULE_NAME = "worker-every-minute"
HERO_PREFIX = "scheduled-worker-"


class ScheduledWorkerGreeting(basic.geneva.Workflow):
    """One step: counts the run on its hero."""

    @step
    def greet(self):
        self.hero.counter += 1


def _heroes():
    return sa.select(basic.User).where(basic.User.email.like(f"{HERO_PREFIX}%"))


basic.geneva.schedule(
    SCHEDULE_NAME,
    ScheduledWorkerGreeting,
    cron="* * * * *",
    heroes=_heroes,
    missed="latest",
)
