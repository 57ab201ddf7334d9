"""Workflow classes that many suites share, instead of a copy in each test file.

Each is registered on the test app's ``geneva`` (``tests/apps/basic.py``) under its
class name. A test that needs its own type name (gauges per type, two types in
one test, a log line naming the type) keeps its own class.
"""

from __future__ import annotations

from datetime import timedelta

from flask_geneva import step
from tests.apps.basic import geneva


class CountingTwoSteps(geneva.Workflow):
    """``first`` adds 1 to the hero's counter, then ``second`` adds 10."""

    @step
    def first(self):
        self.hero.counter += 1

    @step
    def second(self):
        self.hero.counter += 10


class CountingThreeSteps(CountingTwoSteps):
    """``first`` adds 1 to the hero's counter, ``second`` 10, ``third`` 100."""

    @step
    def third(self):
        self.hero.counter += 100


class EmptyTwoSteps(geneva.Workflow):
    """Two immediate steps, ``first`` and ``second``, that do nothing."""

    @step
    def first(self):
        pass

    @step
    def second(self):
        pass


class CountingOneStep(geneva.Workflow):
    """One step, ``only``, that adds 1 to the hero's counter."""

    @step
    def only(self):
        self.hero.counter += 1


class WaitsForGo(geneva.Workflow):
    """One step, ``use``, that waits for the signal ``go``."""

    @step(wait_for="go")
    def use(self):
        pass


class EmptyOneStep(geneva.Workflow):
    """One immediate step, ``only``, that does nothing."""

    @step
    def only(self):
        pass


class WaitingThreeSteps(geneva.Workflow):
    """``first`` adds 1 to the hero's counter, ``second``, 2 seconds later, 10, and
    ``third`` 100 (the real-worker apps run it)."""

    @step
    def first(self):
        self.hero.counter += 1

    @step(wait=timedelta(seconds=2))
    def second(self):
        self.hero.counter += 10

    @step
    def third(self):
        self.hero.counter += 100


class EvolvedSignup(geneva.Workflow):
    """After a deploy: step ``charge`` removed, ``mail`` renamed to ``send_mail``
    (issue 19)."""

    @step
    def start(self):
        pass

    step.removed("charge")

    @step
    def send_mail(self):
        pass

    step.renamed("mail", to="send_mail")
