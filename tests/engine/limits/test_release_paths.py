"""A limit's slot is given back on every way out; no overrun, no leak (R-LIM-20..22).

Each test drives one way out of a holder (an ``in_progress`` execution holding
a slot) or of a waiter (a ``scheduled`` execution parked on a key), through
the real executor (:func:`flask_geneva.ext.tasks.perform_step_execution`), the
real operators and the real dispatcher/housekeeping, and checks the key row
invariant after each move (:func:`tests.support.limits.assert_consistent`:
``running`` = the in_progress holders, ``granted``/``waiting`` = the granted
and ungranted waiter rows, each waiter a parked ``scheduled`` execution). A
freed slot must go to the next waiter, whose task is published (R-LIM-13), and
every scenario ends with the key idle.

Rules: R-LIM-10 (claim), R-LIM-11 (park), R-LIM-13 (grant on release), R-LIM-14
(paused skipped), R-LIM-15 (no inline bypass), R-LIM-16 (dispatcher grants),
R-LIM-17 (changed cap), R-LIM-18 (waiters never stuck), R-LIM-20 (holder
release on every way out), R-LIM-21 (waiter leaves the queue), R-LIM-22 (bulk
cancel), R-LIM-50 (no unit).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import Limit
from flask_geneva import StepConfigurationError
from flask_geneva import cancel_if
from flask_geneva import resumable_step
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.core.publications import LIMITED_JOB_ID
from flask_geneva.ext.operations import dispatch_due
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limits import assert_consistent
from tests.support.limits import assert_idle
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.limits import published_ids
from tests.support.limits import waiter_rows
from tests.support.workflow import delete_user
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import executions_table
from tests.support.workflow import externally
from tests.support.workflow import workflow_row

NAME = "test-release"
KEY = "k"
PUBLISH_TIMEOUT = timedelta(minutes=2)
STUCK_IN_PROGRESS = timedelta(hours=1)
STUCK_SCHEDULED = timedelta(minutes=15)

#: Called, in order, at the start of the first limited body that runs.
DURING: list[Callable[[], Any]] = []
#: How the body of a workflow ends, by workflow id (once; then it returns).
ENDINGS: dict[Any, str] = {}
#: The key a workflow's limit resolves to, by workflow id (default ``KEY``).
KEY_OF: dict[Any, str] = {}
#: Workflows whose key function raises.
KEY_FAILS: set[Any] = set()
#: Workflows whose cancel condition / skip condition is true.
STOP: set[Any] = set()
SKIP: set[Any] = set()
#: (step, workflow id) of each body that ran to its end.
RUNS: list[tuple[str, Any]] = []


def _key(workflow: Any) -> str:
    if workflow.id in KEY_FAILS:
        raise RuntimeError("tenant lookup failed")
    return KEY_OF.get(workflow.id, KEY)


release_limit = Limit(NAME, concurrency=1, key=_key)


class Boom(Exception):
    pass


class WorkerKilled(BaseException):
    """Escapes the step like a SIGKILL: the execution stays in_progress (R-EXE-35)."""


def _body(workflow: Any, name: str) -> None:
    # Before any read: on SQLite a read begins a transaction holding the write
    # lock the other "worker" needs.
    while DURING:
        DURING.pop(0)()
    ending = ENDINGS.pop(workflow.id, "return")
    if ending == "raise":
        raise Boom("partner API answered 502")
    if ending == "kill":
        raise WorkerKilled()
    if ending != "return":
        getattr(workflow, ending)()
    RUNS.append((name, workflow.id))


class Held(geneva.Workflow):
    @step(limit=release_limit)
    def work(self):
        _body(self, "work")

    @step
    def after(self):
        RUNS.append(("after", self.id))


class HeldRetrying(geneva.Workflow):
    @step(limit=release_limit, on_exception="reattempt", max_reattempts=1)
    def work(self):
        _body(self, "work")


class HeldConditional(geneva.Workflow):
    @cancel_if
    def stopped(self):
        return self.id in STOP

    @step(limit=release_limit, skip_if=lambda wf: wf.id in SKIP)
    def work(self):
        _body(self, "work")

    @step
    def after(self):
        RUNS.append(("after", self.id))


class HeldTwice(geneva.Workflow):
    @step(limit=release_limit)
    def work(self):
        _body(self, "work")

    @step(limit=release_limit)
    def again(self):
        _body(self, "again")


class HeldChain(geneva.Workflow):
    @resumable_step(limit=release_limit)
    def walk(self, it):
        _body(self, "walk")
        if not it.resumed:
            self.suspend()


class Unlimited(geneva.Workflow):
    @step
    def plain(self):
        RUNS.append(("plain", self.id))


@pytest.fixture
def app_config() -> dict[str, Any]:
    return {
        "GENEVA_PUBLISH_TIMEOUT": PUBLISH_TIMEOUT,
        "GENEVA_STUCK_IN_PROGRESS_THRESHOLD": STUCK_IN_PROGRESS,
        "GENEVA_STUCK_SCHEDULED_THRESHOLD": STUCK_SCHEDULED,
        "GENEVA_RELEASE_SPREAD": timedelta(0),
    }


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    for registry in (DURING, ENDINGS, KEY_OF, KEY_FAILS, STOP, SKIP, RUNS):
        registry.clear()
    yield
    DURING.clear()


def _perform(execution_id: Any) -> None:
    """Deliver ``execution_id`` in this thread; a step's own error is not ours."""
    with contextlib.suppress(Exception):
        perform_step_execution(execution_id, continue_inline=False)


def _holder_and_waiters(
    geneva_jobs: Any,
    *,
    holder_cls: Any = Held,
    waiter_cls: Any = Held,
    ending: str = "return",
    waiters: int = 1,
    while_holding: Callable[[Any, list[tuple[Any, Any]]], None] | None = None,
) -> tuple[tuple[Any, Any], list[tuple[Any, Any]]]:
    """Run holder A to its ``ending`` while ``waiters`` workflows park behind it.

    Asserts the invariant while A holds (1 running, the waiters waiting) and
    after A's end. Returns ``((a workflow, a execution), [(workflow,
    execution), ...])``.
    """
    holder = first_execution(holder_cls, "a@example.com")
    queued = [
        first_execution(waiter_cls, f"w{index}@example.com") for index in range(waiters)
    ]
    geneva_jobs.clear()
    ENDINGS[holder[0]] = ending
    seen: dict[str, Any] = {}

    def while_a_runs() -> None:
        for _, execution_id in queued:
            deliver(execution_id)
        seen["parked"] = assert_consistent(NAME, KEY)
        seen["published"] = published_ids(geneva_jobs)
        for _, execution_id in queued:
            row = execution_row(execution_id)
            assert (row["state"], row["job_id"]) == ("scheduled", LIMITED_JOB_ID)
        if while_holding is not None:
            while_holding(holder, queued)

    DURING.append(while_a_runs)
    if ending == "kill":
        with pytest.raises(WorkerKilled):
            perform_step_execution(holder[1], continue_inline=False)
    else:
        _perform(holder[1])
    assert not DURING, "the holder's body did not run"
    assert seen["parked"] == (1, 0, waiters)
    assert seen["published"] == []  # nobody is published while parked (R-LIM-11)
    return holder, queued


def _assert_granted_to(geneva_jobs: Any, execution_id: Any) -> None:
    """``execution_id`` is the one granted waiter, and its task was published."""
    granted = [w["execution_id"] for w in waiter_rows(NAME, KEY) if w["granted_at"]]
    assert granted == [execution_id]
    assert execution_id in published_ids(geneva_jobs)


def _drain_to_idle(geneva_jobs: Any) -> None:
    geneva_jobs.drain()
    assert geneva_jobs.failures == []
    assert_idle(NAME, KEY)


def _ended(execution_id: Any) -> tuple[str, str | None]:
    row = execution_row(execution_id)
    return row["state"], row["outcome"]


# -- a holder's ways out (R-LIM-20) -------------------------------------------------


def test_success_releases_the_slot_to_the_waiter(app, geneva_jobs):
    """R-LIM-20, R-LIM-13: A completes; its slot is granted to B, published."""
    (a_wf, a_id), [(b_wf, b_id)] = _holder_and_waiters(geneva_jobs)
    assert _ended(a_id) == ("completed", "success")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    _drain_to_idle(geneva_jobs)
    assert workflow_row(a_wf)["state"] == workflow_row(b_wf)["state"] == "finished"
    assert ("work", b_wf) in RUNS


def test_an_exception_pausing_the_workflow_releases_the_slot(app, geneva_jobs):
    """R-LIM-20: the default policy fails A and pauses its workflow; slot to B."""
    (a_wf, a_id), [(b_wf, b_id)] = _holder_and_waiters(geneva_jobs, ending="raise")
    assert _ended(a_id) == ("failed", "failed")
    assert workflow_row(a_wf)["state"] == "paused"
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    _drain_to_idle(geneva_jobs)
    assert workflow_row(b_wf)["state"] == "finished"


def test_a_reattempt_policy_releases_and_the_new_attempt_takes_a_slot_anew(
    app, geneva_jobs
):
    """R-LIM-20, R-LIM-12: the failed attempt gives its slot to waiter B; the
    reattempt is a new execution that queues behind B and runs after it."""
    (a_wf, a_id), [(b_wf, b_id)] = _holder_and_waiters(
        geneva_jobs, holder_cls=HeldRetrying, ending="raise"
    )
    assert _ended(a_id) == ("completed", "reattempted")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    retry_id = execution_rows(a_wf)[-1]["id"]
    assert retry_id != a_id
    _perform(retry_id)  # B holds the grant: the new attempt parks behind it
    assert execution_row(retry_id)["job_id"] == LIMITED_JOB_ID
    assert assert_consistent(NAME, KEY) == (0, 1, 1)
    _drain_to_idle(geneva_jobs)
    assert _ended(retry_id) == ("completed", "success")
    assert execution_row(retry_id)["limit_holds"]["held"] == [[NAME, KEY]]
    assert workflow_row(a_wf)["state"] == "finished"
    assert RUNS.index(("work", b_wf)) < RUNS.index(("work", a_wf))


@pytest.mark.parametrize(
    ("ending", "outcome", "workflow_state"),
    [
        ("skip", ("skipped", "skipped"), "finished"),
        ("cancel", ("canceled", "canceled"), "canceled"),
        ("pause", ("canceled", "canceled"), "paused"),
        ("reattempt", ("completed", "reattempted"), "finished"),
        ("finish", ("completed", "success"), "finished"),
    ],
)
def test_in_step_flow_control_releases_the_slot(
    app, geneva_jobs, ending, outcome, workflow_state
):
    """R-LIM-20: skip(), cancel(), pause(), reattempt() and finish() inside the
    limited step each end the holder and give its slot to the waiter."""
    (a_wf, a_id), [(b_wf, b_id)] = _holder_and_waiters(geneva_jobs, ending=ending)
    assert _ended(a_id)[0] != "in_progress"
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    _drain_to_idle(geneva_jobs)
    assert workflow_row(b_wf)["state"] == "finished"
    assert workflow_row(a_wf)["state"] == workflow_state
    assert _ended(a_id) == outcome


@pytest.mark.parametrize("operation", ["pause", "cancel"])
def test_an_operator_pause_or_cancel_during_the_step_releases_at_its_end(
    app, geneva_jobs, operation
):
    """R-LIM-20 (R-EXE-42): an operator stops A's workflow while A runs; A keeps
    its slot until its body ends, then finalize gives it back."""
    seen: dict[str, Any] = {}

    def stop_a(holder: Any, _: Any) -> None:
        externally(holder[0], operation)
        seen["during"] = assert_consistent(NAME, KEY)

    (a_wf, a_id), [(b_wf, b_id)] = _holder_and_waiters(
        geneva_jobs, while_holding=stop_a
    )
    assert seen["during"] == (1, 0, 1)  # still running: the slot is held
    assert _ended(a_id)[0] != "in_progress"
    assert workflow_row(a_wf)["state"] == (
        "paused" if operation == "pause" else "canceled"
    )
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    _drain_to_idle(geneva_jobs)
    assert workflow_row(b_wf)["state"] == "finished"


def test_recovery_of_a_dead_workers_execution_releases_its_slot(app, geneva_jobs):
    """R-LIM-20 (R-HK-20/24): A's worker dies mid-step, A stays in_progress and
    keeps its slot; housekeeping's stuck recovery ends it and grants B."""
    with clock.frozen(datetime(2030, 1, 1, tzinfo=UTC)) as frozen:
        (a_wf, a_id), [(b_wf, b_id)] = _holder_and_waiters(geneva_jobs, ending="kill")
        assert _ended(a_id) == ("in_progress", None)
        assert assert_consistent(NAME, KEY) == (1, 0, 1)
        frozen.advance(STUCK_IN_PROGRESS + timedelta(seconds=1))
        summary = run_housekeeping()
        assert summary["stuck_in_progress_recovered"] == 1
        assert _ended(a_id) == ("completed", "recovered")
        assert assert_consistent(NAME, KEY) == (0, 1, 0)  # B granted
        _assert_granted_to(geneva_jobs, b_id)
        _drain_to_idle(geneva_jobs)
    assert workflow_row(a_wf)["state"] == workflow_row(b_wf)["state"] == "finished"


def test_operator_recover_releases_the_slot(app, geneva_jobs):
    """R-LIM-20 (R-HK-28): recover(force=True) of A's in_progress execution."""
    (a_wf, a_id), [(b_wf, b_id)] = _holder_and_waiters(geneva_jobs, ending="kill")
    assert assert_consistent(NAME, KEY) == (1, 0, 1)
    externally(a_wf, "recover", force=True)
    assert _ended(a_id) == ("completed", "recovered")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    _drain_to_idle(geneva_jobs)
    assert workflow_row(a_wf)["state"] == workflow_row(b_wf)["state"] == "finished"


def test_each_execution_of_a_resumable_chain_takes_and_releases_a_slot(
    app, geneva_jobs
):
    """R-LIM-20, R-LIM-15: A's first execution suspends; its slot goes to waiter
    B, and A's successor takes one anew, queued behind B (the limit does not
    hold across the chain: tests/engine/limits/test_chain_holds.py has one
    that does, R-LIM-26)."""
    (a_wf, a_id), [(b_wf, b_id)] = _holder_and_waiters(
        geneva_jobs, holder_cls=HeldChain
    )
    assert _ended(a_id) == ("completed", "continued")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    successor = execution_rows(a_wf)[-1]
    assert successor["id"] != a_id
    assert successor["limit_holds"] is None
    _perform(successor["id"])
    assert assert_consistent(NAME, KEY) == (0, 1, 1)  # parked behind B
    _drain_to_idle(geneva_jobs)
    rows = execution_rows(a_wf)
    assert [r["limit_holds"] for r in rows] == [{"held": [[NAME, KEY]]}] * 2
    assert workflow_row(a_wf)["state"] == "finished"
    assert RUNS.index(("work", b_wf)) < RUNS.index(("walk", a_wf), 1)


def test_inline_continuation_never_bypasses_a_waiter(app, geneva_jobs):
    """R-LIM-15, R-LIM-12: A's next step has the same limit. Finalize releases
    A's slot to waiter B and does not claim the next step inline: it is
    published and queues behind B."""
    holder = first_execution(HeldTwice, "a@example.com")
    b_wf, b_id = first_execution(Held, "b@example.com")
    geneva_jobs.clear()
    DURING.append(lambda: deliver(b_id))
    perform_step_execution(holder[1], continue_inline=True)
    again = execution_rows(holder[0])[-1]
    assert again["step_name"] == "again"
    assert again["state"] == "scheduled"  # not claimed inline
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    _perform(again["id"])
    assert assert_consistent(NAME, KEY) == (0, 1, 1)  # behind B
    _drain_to_idle(geneva_jobs)
    assert RUNS.index(("work", b_wf)) < RUNS.index(("again", holder[0]))


# -- a waiter's ways out (R-LIM-21, R-LIM-22) ----------------------------------------


def test_canceling_an_ungranted_waiter_leaves_the_queue(app, geneva_jobs):
    """R-LIM-21: C waits behind B; canceling C's workflow while A runs removes
    its waiter row (waiting - 1) and B is still granted next."""

    def cancel_c(_: Any, queued: list[tuple[Any, Any]]) -> None:
        externally(queued[1][0], "cancel")

    (_, _), [(_, b_id), (c_wf, c_id)] = _holder_and_waiters(
        geneva_jobs, waiters=2, while_holding=cancel_c
    )
    assert _ended(c_id) == ("canceled", "canceled")
    assert workflow_row(c_wf)["state"] == "canceled"
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, b_id)
    _drain_to_idle(geneva_jobs)


def test_canceling_a_granted_waiter_grants_the_next(app, geneva_jobs):
    """R-LIM-21, R-LIM-13: B holds a grant; canceling B's workflow returns it and
    it goes to C, whose task is published."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    _assert_granted_to(geneva_jobs, b_id)
    geneva_jobs.clear()
    externally(b_wf, "cancel")
    assert _ended(b_id) == ("canceled", "canceled")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)


def test_skipping_a_granted_waiters_step_grants_the_next(app, geneva_jobs):
    """R-LIM-21: an operator skip of B's waiting step (ready workflow)."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    geneva_jobs.clear()
    externally(b_wf, "skip")
    assert _ended(b_id) == ("skipped", "skipped")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)
    assert ("after", b_wf) in RUNS
    assert ("work", b_wf) not in RUNS


def test_skipping_a_paused_waiter_drops_it_through_the_bulk_cancel(app, geneva_jobs):
    """R-LIM-22: skip() of a paused workflow cancels its preserved execution with
    the bulk UPDATE; its waiter row (granted) goes and C is granted."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    externally(b_wf, "pause")
    assert assert_consistent(NAME, KEY) == (0, 1, 1)  # B keeps its grant for now
    geneva_jobs.clear()
    externally(b_wf, "skip")
    assert _ended(b_id) == ("canceled", "canceled")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)
    assert workflow_row(b_wf)["state"] == "finished"


def test_resume_at_of_a_paused_waiter_drops_it_and_the_new_execution_queues(
    app, geneva_jobs
):
    """R-LIM-22: resume_at cancels B's parked execution (bulk) and schedules a
    new one; C gets B's grant, B's new execution parks behind C."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    externally(b_wf, "pause")
    geneva_jobs.clear()
    new_id = externally(b_wf, "resume_at", step_name="work")
    assert _ended(b_id) == ("canceled", "canceled")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _perform(new_id)
    assert assert_consistent(NAME, KEY) == (0, 1, 1)
    _drain_to_idle(geneva_jobs)
    assert _ended(new_id) == ("completed", "success")


def test_a_granted_task_of_a_paused_workflow_gives_the_grant_on_and_keeps_its_place(
    app, geneva_jobs
):
    """R-LIM-14 (R-EXE-12): B is paused after its grant; its task, delivered,
    leaves the execution waiting (not canceled), gives the slot to C, and B,
    resumed, is served before D, which queued after it."""
    _, [(b_wf, b_id), (_, c_id), (_, d_id)] = _holder_and_waiters(
        geneva_jobs, waiters=3
    )
    externally(b_wf, "pause")
    geneva_jobs.clear()
    _perform(b_id)
    assert execution_row(b_id)["state"] == "scheduled"
    assert workflow_row(b_wf)["state"] == "paused"
    assert assert_consistent(NAME, KEY) == (0, 1, 2)
    _assert_granted_to(geneva_jobs, c_id)
    externally(b_wf, "resume")  # B's task again: C holds the grant, B waits
    geneva_jobs.clear()
    _perform(b_id)
    assert execution_row(b_id)["job_id"] == LIMITED_JOB_ID
    _perform(c_id)  # C's end grants the head of the queue: B, not D
    _assert_granted_to(geneva_jobs, b_id)
    _drain_to_idle(geneva_jobs)
    assert workflow_row(b_wf)["state"] == "finished"
    assert execution_row(d_id)["state"] == "completed"


def test_a_cancel_condition_true_on_wake_drops_the_waiter(app, geneva_jobs):
    """R-LIM-21 (R-EXE-20): B's cancel condition turned true while it waited."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(
        geneva_jobs, waiter_cls=HeldConditional, waiters=2
    )
    STOP.add(b_wf)
    geneva_jobs.clear()
    _perform(b_id)
    assert _ended(b_id) == ("canceled", "canceled")
    assert workflow_row(b_wf)["state"] == "canceled"
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)


def test_skip_if_true_on_wake_drops_the_waiter(app, geneva_jobs):
    """R-LIM-21 (R-EXE-21): B's skip_if turned true while it waited."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(
        geneva_jobs, waiter_cls=HeldConditional, waiters=2
    )
    SKIP.add(b_wf)
    geneva_jobs.clear()
    _perform(b_id)
    assert _ended(b_id) == ("skipped", "skipped")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)
    assert ("after", b_wf) in RUNS
    assert ("work", b_wf) not in RUNS


def test_a_key_function_raising_on_wake_pauses_and_leaves_the_queue(app, geneva_jobs):
    """R-LIM-21, R-LIM-05: B's key function raises when B wakes: LimitKeyError
    goes through the step's policy (pause) and B's grant goes to C."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    KEY_FAILS.add(b_wf)
    geneva_jobs.clear()
    _perform(b_id)
    row = execution_row(b_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert "LimitKeyError" in (row["error_class_name"] or "")
    assert workflow_row(b_wf)["state"] == "paused"
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)


def test_a_key_that_changed_while_waiting_leaves_the_old_queue(app, geneva_jobs):
    """R-LIM-21: B parked on key k; when it wakes its key is k2 (the hero moved
    tenant). B runs under k2 and its grant on k goes back to C: the old
    queue keeps no row of an execution that no longer waits."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    KEY_OF[b_wf] = "k2"
    geneva_jobs.clear()
    _perform(b_id)
    assert _ended(b_id) == ("completed", "success")
    assert execution_row(b_id)["limit_holds"]["held"] == [[NAME, "k2"]]
    assert_idle(NAME, "k2")
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)


def test_a_step_no_longer_limited_after_a_deploy_leaves_the_queue(app, geneva_jobs):
    """R-LIM-21: a deploy removed the limit from B's step while B waited. B runs
    unlimited, and its waiter row (granted) leaves the queue for C."""
    _, [(_, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    geneva_jobs.clear()
    with _step_limits(Held, "work", ()):
        _perform(b_id)
        assert _ended(b_id) == ("completed", "success")
        assert assert_consistent(NAME, KEY) == (0, 1, 0)
        _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)


def test_a_resumed_waiter_no_longer_limited_leaves_the_queue(app, geneva_jobs):
    """R-LIM-21: as above, for a waiter that resume() published again under a
    task id (its job_id is no longer geneva:limited)."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    externally(b_wf, "pause")
    externally(b_wf, "resume")
    assert execution_row(b_id)["job_id"] != LIMITED_JOB_ID
    geneva_jobs.clear()
    with _step_limits(Held, "work", ()):
        _perform(b_id)
        assert _ended(b_id) == ("completed", "success")
        assert assert_consistent(NAME, KEY) == (0, 1, 0)
        _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)


def test_a_waiter_whose_hero_was_deleted_is_canceled_and_leaves_the_queue(
    app, geneva_jobs
):
    """R-LIM-21 (R-EXE-13): B's hero was deleted while B waited."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    delete_user(workflow_row(b_wf)["hero_id"])
    geneva_jobs.clear()
    _perform(b_id)
    assert _ended(b_id) == ("canceled", "canceled")
    assert workflow_row(b_wf)["state"] == "canceled"
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _assert_granted_to(geneva_jobs, c_id)
    _drain_to_idle(geneva_jobs)


# -- the dispatcher (R-LIM-16, R-LIM-17) ---------------------------------------------


def test_a_lost_grant_is_published_again_after_the_publish_timeout(app, geneva_jobs):
    """R-LIM-16: B's grant message is lost; the dispatcher re-publishes it once
    the grant is older than GENEVA_PUBLISH_TIMEOUT, not before. (The message
    of A's next step is lost too: the same run publishes it again, R-FLT-20.)"""
    (a_wf, _), [(b_wf, b_id)] = _holder_and_waiters(geneva_jobs)
    geneva_jobs.clear()  # the broker lost it
    dispatch_due()
    assert b_id not in published_ids(geneva_jobs)
    later = datetime.now(UTC) + PUBLISH_TIMEOUT + timedelta(seconds=1)
    with clock.frozen(later):
        dispatch_due()
    [a_next] = [r.id for r in execution_rows(a_wf) if r.state == "scheduled"]
    assert published_ids(geneva_jobs) == [b_id, a_next]
    assert assert_consistent(NAME, KEY) == (0, 1, 0)
    _drain_to_idle(geneva_jobs)
    assert workflow_row(b_wf)["state"] == "finished"


def test_the_grant_of_a_paused_waiter_is_returned_and_goes_to_the_next(
    app, geneva_jobs
):
    """R-LIM-16, R-LIM-14: B is paused holding a grant; the dispatcher returns it
    (B keeps its place, ungranted) and grants C; resumed, B runs."""
    _, [(b_wf, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
    externally(b_wf, "pause")
    geneva_jobs.clear()
    later = datetime.now(UTC) + PUBLISH_TIMEOUT + timedelta(seconds=1)
    with clock.frozen(later):
        dispatch_due()
    assert assert_consistent(NAME, KEY) == (0, 1, 1)
    _assert_granted_to(geneva_jobs, c_id)
    assert [w["execution_id"] for w in waiter_rows(NAME, KEY)] == [b_id, c_id]
    geneva_jobs.drain()
    assert assert_consistent(NAME, KEY) == (0, 0, 1)  # paused B is passed over
    externally(b_wf, "resume")
    _drain_to_idle(geneva_jobs)
    assert _ended(b_id) == ("completed", "success")


@contextlib.contextmanager
def _step_limits(
    workflow_cls: Any, step_name: str, limits: tuple[Any, ...]
) -> Iterator[None]:
    """Deploy ``limits`` on a step for the block (a frozen definition, patched)."""
    definition = workflow_cls.step_collection().named(step_name)
    before = definition.limits
    object.__setattr__(definition, "limits", limits)
    try:
        yield
    finally:
        object.__setattr__(definition, "limits", before)


def test_a_raised_cap_is_granted_by_the_dispatcher(app, geneva_jobs):
    """R-LIM-17, R-LIM-16: while A holds the one slot, B, C and D wait; a deploy
    raises the cap to 3 and a newer claim wrote it on the key row. The
    dispatcher grants the two free slots, never more."""
    raised = Limit(NAME, concurrency=3, key=_key)
    seen: dict[str, Any] = {}

    def deploy(_: Any, queued: list[tuple[Any, Any]]) -> None:
        with _step_limits(Held, "work", (raised,)):
            _set_key_concurrency(3)
            dispatch_due()
            seen["after"] = assert_consistent(NAME, KEY)
            seen["granted"] = [
                w["execution_id"] for w in waiter_rows(NAME, KEY) if w["granted_at"]
            ]

    _, queued = _holder_and_waiters(geneva_jobs, waiters=3, while_holding=deploy)
    assert seen["after"] == (1, 2, 1)
    assert seen["granted"] == [queued[0][1], queued[1][1]]
    with _step_limits(Held, "work", (raised,)):
        _drain_to_idle(geneva_jobs)


def _set_key_concurrency(cap: int) -> None:
    table = db.metadata.tables["geneva_drive_limit_keys"]
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(table)
            .where(table.c.limit_name == NAME, table.c.limit_key == KEY)
            .values(concurrency=cap)
        )


def test_a_raised_cap_is_used_by_the_next_claim(app, geneva_jobs):
    """R-LIM-17: a deploy raised the cap from 1 to 3 while B, C, D waited. A's
    release grants by the cap on the row (1: B); B's claim, under the new cap,
    grants the two slots it finds free to C and D at once."""
    raised = Limit(NAME, concurrency=3, key=_key)
    _, queued = _holder_and_waiters(geneva_jobs, waiters=3)
    (_, b_id), (_, c_id), (_, d_id) = queued
    assert assert_consistent(NAME, KEY) == (0, 1, 2)
    geneva_jobs.clear()
    with _step_limits(Held, "work", (raised,)):
        seen: dict[str, Any] = {}
        DURING.append(lambda: seen.update(during=assert_consistent(NAME, KEY)))
        _perform(b_id)
        assert seen["during"] == (1, 2, 0)
        assert {c_id, d_id} <= set(published_ids(geneva_jobs))
        _drain_to_idle(geneva_jobs)


# -- housekeeping and degradation ------------------------------------------------------


def test_stuck_scheduled_recovery_leaves_waiters_alone(app, geneva_jobs):
    """R-LIM-18: waiters older than GENEVA_STUCK_SCHEDULED_THRESHOLD, granted or
    not, are never recovered as stuck; an ordinary scheduled execution as old
    is (the threshold was reached)."""
    start = datetime(2030, 1, 1, tzinfo=UTC)
    with clock.frozen(start) as frozen:
        _, [(_, b_id), (_, c_id)] = _holder_and_waiters(geneva_jobs, waiters=2)
        plain_wf, plain_id = first_execution(Unlimited, "plain@example.com")
        before = {i: execution_row(i) for i in (b_id, c_id)}
        frozen.advance(STUCK_SCHEDULED * 4)
        summary = run_housekeeping()
        # A's next step and the unlimited workflow's: the waiters are not.
        assert summary["stuck_scheduled_recovered"] == 2
        assert _ended(plain_id) != ("scheduled", None)
        for execution_id, row in before.items():
            assert execution_row(execution_id) == row
        assert assert_consistent(NAME, KEY) == (0, 1, 1)
        _drain_to_idle(geneva_jobs)
    assert workflow_row(plain_wf)["state"] == "finished"


def test_without_the_unit_a_limited_step_fails_and_pauses(app, without_unit):
    """R-LIM-50: without add_flow_limits a limited step is never run unlimited:
    it fails, the workflow pauses, and the error names `flask geneva install`."""
    without_unit("add_flow_limits")
    workflow_id, execution_id = first_execution(Held, "a@example.com")
    with pytest.raises(StepConfigurationError, match="flask geneva install"):
        perform_step_execution(execution_id, continue_inline=False)
    table = executions_table()
    with db.engine.connect() as connection:
        row = connection.execute(
            sa.select(table.c.state, table.c.outcome, table.c.error_message).where(
                table.c.id == execution_id
            )
        ).one()
    assert (row.state, row.outcome) == ("failed", "failed")
    assert "flask geneva install" in row.error_message
    assert workflow_row(workflow_id)["state"] == "paused"
    assert RUNS == []
