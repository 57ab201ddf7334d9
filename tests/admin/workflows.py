"""Workflow classes shown by the admin tests (distinct names: the registry is global)."""

from __future__ import annotations

from datetime import timedelta

from flask_geneva import resumable_step
from flask_geneva import step
from tests.apps.basic import geneva


class AdminTwoStep(geneva.Workflow):
    """A plain two-step workflow."""

    @step
    def first(self):
        self.hero.counter += 1

    @step(wait=timedelta(hours=1))
    def second(self):
        self.hero.counter += 10


class AdminFailing(geneva.Workflow):
    """A workflow whose step raises (the default policy pauses it)."""

    @step
    def explode(self):
        raise RuntimeError("<script>alert('boom')</script>")


class AdminResumable(geneva.Workflow):
    """A resumable step interrupted every 2 items, then a regular step."""

    @resumable_step(max_iterations=2)
    def walk(self, it):
        for _item in it.iterate_over(range(5)):
            pass

    @step
    def done(self):
        pass


class AdminSignalWait(geneva.Workflow):
    """A step that waits for the workflow signal 'payment_confirmed' (issue 18)."""

    @step(wait_for="payment_confirmed", wait_timeout=timedelta(days=2))
    def ship(self):
        self.hero.counter += 1

    @step
    def done(self):
        pass


class AdminInternal(geneva.Workflow):
    """A class operators may not start from the admin (R-ADM-200)."""

    admin_startable = False

    @step
    def only(self):
        pass
