"""Workflow classes that many suites share, instead of a copy in each test file.

Each is registered on the test app's ``geneva`` (``tests/apps/basic.py``) under its
class name. A test that needs its own type name (gauges per type, two types in
one test, a log line naming the type) keeps its own class.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from flask_geneva import step
from tests.apps.basic import geneva
from tests.support.step_bodies import adds
from tests.support.step_bodies import named_steps
from tests.support.step_bodies import nothing


class CountingTwoSteps(geneva.Workflow):
    """``first`` adds 1 to the hero's counter, then ``second`` adds 10."""

    _steps = named_steps(first=adds(1), second=adds(10))


class CountingThreeSteps(geneva.Workflow):
    """``first`` adds 1 to the hero's counter, ``second`` 10, ``third`` 100."""

    _steps = named_steps(first=adds(1), second=adds(10), third=adds(100))


class WaitingThreeSteps(geneva.Workflow):
    """``first`` adds 1 to the hero's counter, ``second``, 2 seconds later, 10, and
    ``third`` 100 (the real-worker apps run it)."""

    _first = step.anonymous(adds(1), name="first")
    _second = step.anonymous(adds(10), name="second", wait=timedelta(seconds=2))
    _third = step.anonymous(adds(100), name="third")


class EmptyTwoSteps(geneva.Workflow):
    """Two immediate steps, ``first`` and ``second``, that do nothing."""

    _steps = named_steps(first=nothing, second=nothing)


class EmptyOneStep(geneva.Workflow):
    """One immediate step, ``only``, that does nothing."""

    _steps = named_steps(only=nothing)


class CountingOneStep(geneva.Workflow):
    """One step, ``only``, that adds 1 to the hero's counter."""

    _steps = named_steps(only=adds(1))


class WaitsForGo(geneva.Workflow):
    """One step, ``use``, that waits for the signal ``go``."""

    _use = step.anonymous(nothing, name="use", wait_for="go")


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


class EscapesWithCancelledError(geneva.Workflow):
    """A step whose asyncio code lets ``CancelledError`` (a BaseException, no
    flow-control signal) escape."""

    @step
    def cancelled(self):
        async def inner():
            task = asyncio.ensure_future(asyncio.sleep(10))
            task.cancel()
            await task

        asyncio.run(inner())
