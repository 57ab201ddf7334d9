"""Workflow classes the telemetry tests share (SPEC §28.1)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

from opentelemetry import trace

from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva

T0 = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)

#: (where, span id, trace id) of the current span, as the step's code saw it.
SEEN: list[tuple[str, int, int]] = []


def _see(where: str) -> None:
    context = trace.get_current_span().get_span_context()
    SEEN.append((where, context.span_id, context.trace_id))


class Boom(Exception):
    """A step failure."""


class TracedTwoSteps(geneva.Workflow):
    """Two steps; the second waits three days (the dispatcher publishes it)."""

    @step
    def first(self):
        _see("first")

    @step(wait=timedelta(days=3))
    def second(self):
        _see("second")


class Watched(geneva.Workflow):
    """One step whose skip_if, body and after hook note the current span."""

    @step(skip_if=lambda wf: _see("skip_if") or False)
    def only(self):
        _see("body")

    def after_step_execution(self, execution: Any) -> None:
        _see("after")


class FailsOnce(geneva.Workflow):
    """Raises on its first attempt (reattempted by its policy), then passes."""

    calls: list[int] = []

    @step(on_exception="reattempt")
    def flaky(self):
        FailsOnce.calls.append(1)
        if len(FailsOnce.calls) == 1:
            raise Boom("first attempt fails")


class SkipsThenCancels(geneva.Workflow):
    """skip() in its first step, cancel() in the second."""

    @step
    def skipping(self):
        self.skip()

    @step
    def canceling(self):
        self.cancel()


class Pausing(geneva.Workflow):
    """pause() in its only step."""

    @step
    def pausing(self):
        self.pause()


class Child(geneva.Workflow):
    """A child with one step."""

    @step
    def work(self):
        _see("child")


class Parent(geneva.Workflow):
    """Starts two Child workflows, one per hero in HEROES."""

    @step
    def fan_out(self):
        _see("fan_out")
        heroes = list(
            db.session.scalars(
                db.select(User).where(User.email.in_(HEROES)).order_by(User.id)
            )
        )
        self.start_children(Child, heroes)


HEROES = ["c1@example.com", "c2@example.com"]


class WaitsForPayment(geneva.Workflow):
    """Waits for the signal "paid"."""

    @step(wait_for="paid")
    def settle(self):
        _see("settle")


class ThreeInline(geneva.Workflow):
    """Three steps, due at once: one delivery runs them all (R-EXE-70)."""

    @step
    def one(self):
        _see("one")

    @step
    def two(self):
        _see("two")

    @step
    def three(self):
        _see("three")


class HeroLess(geneva.Workflow):
    """No hero, one step: a schedule's workflow."""

    may_proceed_without_hero = True

    @step
    def tick(self):
        pass
