"""Workflow classes and helpers the deadline tests share (SPEC §27.1)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.engine.operators.dispatcher import DispatcherRun
from flask_geneva.engine.operators.dispatcher import run_dispatcher
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import in_other_thread
from tests.support.workflow import workflow_row

T0 = datetime(2030, 5, 1, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


class TwoDays(geneva.Workflow):
    """A first step, then a second one a day later; no deadline of its own."""

    @step
    def first(self):
        pass

    @step(wait=DAY)
    def second(self):
        pass


class Monthly(geneva.Workflow):
    """Declares a 30-day deadline; its second step waits 40 days."""

    __geneva_deadline__ = timedelta(days=30)

    @step
    def first(self):
        pass

    @step(wait=timedelta(days=40))
    def second(self):
        pass


class PausedByDeadline(geneva.Workflow):
    """Paused, not canceled, by its 1-hour deadline."""

    __geneva_deadline__ = HOUR
    __geneva_on_deadline__ = "pause"

    @step
    def first(self):
        pass

    @step(wait=DAY)
    def second(self):
        pass


class WaitsForSignal(geneva.Workflow):
    """Waits up to 2 days for "go" (then the wait times out and cancels)."""

    @step(wait_for="go", wait_timeout=timedelta(days=2), on_wait_timeout="cancel")
    def gate(self):
        pass


#: What the body of :class:`RunsAcrossTheDeadline` saw: the dispatcher's run.
RUNS: list[DispatcherRun] = []


class RunsAcrossTheDeadline(geneva.Workflow):
    """Its first step's body has the dispatcher run in another thread (as a
    beat task would while the step runs), then returns normally."""

    @step
    def first(self):
        RUNS.append(in_other_thread(dispatch))

    @step
    def second(self):
        pass


class RunsAcrossThePause(RunsAcrossTheDeadline):
    """As :class:`RunsAcrossTheDeadline`, paused (not canceled) by the deadline."""

    __geneva_on_deadline__ = "pause"


def dispatch() -> DispatcherRun:
    """One dispatcher run (R-WRK-13), as the beat task runs it."""
    return run_dispatcher(current_context())


def state_of(workflow_id: Any) -> str:
    """The workflow's stored state."""
    return str(workflow_row(workflow_id)["state"])


def deadline_of(workflow_id: Any) -> Any:
    """The workflow's stored ``deadline_at``."""
    return workflow_row(workflow_id)["deadline_at"]


def operator_actions(workflow_id: Any) -> list[dict[str, Any]]:
    """The workflow's recorded operator actions (R-PDR-05)."""
    db.session.expire_all()
    workflow = geneva.Workflow.get(workflow_id)
    actions = workflow.read_metadata("operator_actions") or []
    db.session.rollback()
    return list(actions)


class HalfHour(TwoDays):
    """A child class whose own deadline is 30 minutes."""

    __geneva_deadline__ = timedelta(minutes=30)


#: What :class:`FansOut` starts: ``(child class, key, deadline=)`` per child.
CHILD_PLAN: list[tuple[Any, str, Any]] = []


class FansOut(geneva.Workflow):
    """Starts the children of :data:`CHILD_PLAN`, then waits for them all."""

    @step
    def fan_out(self):
        for child_cls, key, deadline in CHILD_PLAN:
            self.start_child(child_cls, hero=self.hero, key=key, deadline=deadline)

    @step(wait_for_children=True)
    def collect(self):
        pass


#: Run (each in another thread) by the next body of :class:`LimitedWork`.
LIMIT_ACTIONS: list[Any] = []


class LimitedWork(geneva.Workflow):
    """One step under a limit of one slot (key "k"); its body runs
    :data:`LIMIT_ACTIONS` while it holds the slot."""

    @step(limit=Limit("test-deadline-slot", concurrency=1, key=lambda wf: "k"))
    def work(self):
        while LIMIT_ACTIONS:
            in_other_thread(LIMIT_ACTIONS.pop(0))
