"""Parent and child workflow classes the child-workflow tests share (SPEC §25)."""

from __future__ import annotations

from typing import Any

from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva

#: Hooks a test sets to act during a child's step (keyed by hero email).
CHILD_FAILS: set[str] = set()
#: The heroes' emails a parent fans out to, set by each test.
FAN_OUT: list[str] = []


class Doubler(geneva.Workflow):
    """A child: its result is twice its hero's id."""

    @step
    def double(self):
        if self.hero.email in CHILD_FAILS:
            raise RuntimeError(f"cannot double {self.hero.email}")
        self.set_result({"doubled": self.hero.id * 2})


class SlowChild(geneva.Workflow):
    """A child with two steps, the second a day later."""

    @step
    def first(self):
        self.set_result("first")

    @step(wait=86400)
    def second(self):
        self.set_result("second")


def _heroes() -> list[Any]:
    return list(
        db.session.scalars(
            db.select(User).where(User.email.in_(FAN_OUT)).order_by(User.id)
        )
    )


class Summing(geneva.Workflow):
    """Fans out to one Doubler per hero in FAN_OUT and sums their results."""

    @step
    def fan_out(self):
        self.start_children(Doubler, _heroes())

    @step(wait_for_children=True)
    def collect(self):
        results = self.child_results()
        self.set_result(sum(value["doubled"] for value in results.values()))


class SummingIgnoringFailures(geneva.Workflow):
    """As Summing, but a failed child is left out."""

    @step
    def fan_out(self):
        self.start_children(Doubler, _heroes())

    @step(wait_for_children="all", on_child_failure="ignore")
    def collect(self):
        results = self.child_results()
        self.set_result(sum(v["doubled"] for v in results.values() if v is not None))


class FirstOfMany(geneva.Workflow):
    """Waits for any one child."""

    @step
    def fan_out(self):
        self.start_children(SlowChild, _heroes())

    @step(wait_for_children="any")
    def collect(self):
        self.set_result(len(self.children(state="ready")))


class Abandoning(geneva.Workflow):
    """Starts one child it abandons when canceled and one it cancels."""

    @step
    def fan_out(self):
        [kept, canceled] = _heroes()
        self.start_child(SlowChild, hero=kept, parent_close="abandon")
        self.start_child(SlowChild, hero=canceled)

    @step(wait_for_children=True)
    def collect(self):
        pass


class TwoOfThree(geneva.Workflow):
    """Waits for two of its children (an int threshold)."""

    @step
    def fan_out(self):
        self.start_children(SlowChild, _heroes())

    @step(wait_for_children=2)
    def collect(self):
        self.set_result(sorted(c.state for c in self.children()))


class SignalThenChildren(geneva.Workflow):
    """A step that waits for a workflow signal and for its children."""

    @step
    def fan_out(self):
        self.start_children(Doubler, _heroes())

    @step(wait_for="go", wait_for_children=True)
    def collect(self):
        self.set_result(
            {"signal": self.received_signal.payload, "children": len(self.children())}
        )
