"""The one retry loop of R-EXE-80, transactions.retry_on_conflict, on its own.

The claim, finalize and the operator's operations use it; their retries against
a database are in tests/engine/executor/test_conflict_retries.py and (a real InnoDB
deadlock) test_finalize_deadlock.py. Here the attempt is a plain function that
raises a driver-shaped conflict wrapped as SQLAlchemy wraps it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc

from flask_geneva.core import transactions

# Run once, in the SQLite pass: no database is involved.
pytestmark = pytest.mark.backends("sqlite")

ATTEMPTS = transactions.CONFLICT_ATTEMPTS


def _conflict() -> sa_exc.DBAPIError:
    """A MySQL/MariaDB deadlock (1213) as SQLAlchemy raises it."""
    orig = Exception(1213, "Deadlock found when trying to get lock")
    return sa_exc.OperationalError("UPDATE t SET x = 1", {}, orig)


def _masked_conflict() -> BaseException:
    """The failed ``ROLLBACK TO SAVEPOINT`` raised while handling a deadlock."""
    try:
        raise _conflict()
    except sa_exc.DBAPIError:
        try:
            raise sa_exc.OperationalError(
                "ROLLBACK TO SAVEPOINT sa_savepoint_1",
                {},
                Exception(1305, "SAVEPOINT sa_savepoint_1 does not exist"),
            )
        except sa_exc.DBAPIError as masking:
            return masking


class Loop:
    """An attempt that raises ``errors`` in turn, then returns ``"done"``; and
    the callbacks of retry_on_conflict, each recording its calls in ``calls``.
    """

    def __init__(self, *errors: BaseException | None, allowed: Any = True) -> None:
        self.errors = list(errors)
        self.allowed_answers = allowed
        self.calls: list[tuple[str, Any]] = []
        self.attempts = 0

    def attempt(self) -> str:
        self.attempts += 1
        self.calls.append(("attempt", self.attempts))
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        return "done"

    def allowed(self) -> bool:
        answers = self.allowed_answers
        answer = answers.pop(0) if isinstance(answers, list) else answers
        self.calls.append(("allowed", answer))
        return bool(answer)

    def rollback(self, error: BaseException) -> None:
        self.calls.append(("rollback", error))

    def on_retry(self) -> None:
        self.calls.append(("on_retry", None))

    def on_give_up(self, error: BaseException) -> None:
        self.calls.append(("on_give_up", error))

    def run(self, **options: Any) -> str:
        return transactions.retry_on_conflict(
            self.attempt,
            allowed=self.allowed,
            what="test operation",
            rollback=self.rollback,
            on_retry=self.on_retry,
            on_give_up=self.on_give_up,
            **options,
        )

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The jittered sleeps before each retry, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(transactions.time, "sleep", slept.append)
    return slept


def test_a_conflict_is_rolled_back_and_retried_until_the_attempt_succeeds(
    caplog, sleeps
):
    """Two conflicts, then success: each retry is logged, slept, rolled back and
    then on_retry runs; the result is the third attempt's (R-EXE-80)."""
    first, second = _conflict(), _conflict()
    loop = Loop(first, second)
    with caplog.at_level(logging.WARNING, logger="flask_geneva"):
        assert loop.run() == "done"
    assert loop.calls == [
        ("attempt", 1),
        ("allowed", True),
        ("rollback", first),
        ("on_retry", None),
        ("attempt", 2),
        ("allowed", True),
        ("rollback", second),
        ("on_retry", None),
        ("attempt", 3),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "retrying test operation after the database chose it as a deadlock "
        f"victim ({first.orig}); attempt {n} of {ATTEMPTS} (R-EXE-80)"
        for n in (2, 3)
    ]
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= transactions.CONFLICT_RETRY_DELAY
    assert 0 <= sleeps[1] <= 2 * transactions.CONFLICT_RETRY_DELAY


def test_it_gives_up_after_the_last_attempt_and_raises_the_conflict():
    """A conflict on every attempt: CONFLICT_ATTEMPTS attempts, the last one's
    conflict raised as itself, not rolled back, after on_give_up (R-EXE-80)."""
    conflicts = [_conflict() for _ in range(ATTEMPTS + 1)]
    loop = Loop(*conflicts)
    with pytest.raises(sa_exc.DBAPIError) as raised:
        loop.run()
    last = conflicts[ATTEMPTS - 1]
    assert raised.value is last
    assert loop.attempts == ATTEMPTS
    assert loop.names().count("rollback") == ATTEMPTS - 1
    assert loop.calls[-2:] == [("allowed", True), ("on_give_up", last)]


def test_an_error_other_than_a_conflict_is_raised_at_once():
    """No retry, no rollback of a transaction given up on (it may be the
    caller's); on_give_up sees the error (R-EXE-80)."""
    error = ValueError("not a deadlock")
    loop = Loop(error)
    with pytest.raises(ValueError, match="not a deadlock"):
        loop.run()
    assert loop.calls == [("attempt", 1), ("allowed", True), ("on_give_up", error)]


def test_a_conflict_is_not_retried_when_not_allowed():
    conflict = _conflict()
    loop = Loop(conflict, allowed=False)
    with pytest.raises(sa_exc.DBAPIError) as raised:
        loop.run()
    assert raised.value is conflict
    assert loop.calls == [
        ("attempt", 1),
        ("allowed", False),
        ("on_give_up", conflict),
    ]


def test_allowed_is_read_after_each_failed_attempt():
    """Once user code ran in an attempt, the next conflict is raised (R-EXE-80,
    R-POL-11): ``allowed`` is asked again after every attempt."""
    first, second = _conflict(), _conflict()
    loop = Loop(first, second, allowed=[True, False])
    with pytest.raises(sa_exc.DBAPIError) as raised:
        loop.run()
    assert raised.value is second
    assert loop.attempts == 2


def test_a_conflict_masked_by_a_failed_savepoint_rollback_is_raised_unmasked():
    """Given up on, the conflict in the error's context chain is raised, never
    the failed ROLLBACK TO SAVEPOINT that followed it (R-EXE-80)."""
    masking = _masked_conflict()
    conflict = masking.__context__
    loop = Loop(masking, allowed=False)
    with pytest.raises(sa_exc.DBAPIError) as raised:
        loop.run()
    assert raised.value is conflict
    assert transactions.transaction_conflict(raised.value) is raised.value
    assert loop.calls[-1] == ("on_give_up", masking)


def test_a_masked_conflict_is_retried():
    masking = _masked_conflict()
    loop = Loop(masking)
    assert loop.run() == "done"
    assert loop.names() == ["attempt", "allowed", "rollback", "on_retry", "attempt"]


def test_rollback_always_rolls_back_every_error_before_the_decision():
    """Finalize's mode: the rollback comes first, given up on or not."""
    conflict, error = _conflict(), ValueError("after the retry")
    loop = Loop(conflict, error)
    with pytest.raises(ValueError, match="after the retry"):
        loop.run(rollback_always=True)
    assert loop.calls == [
        ("attempt", 1),
        ("rollback", conflict),
        ("allowed", True),
        ("on_retry", None),
        ("attempt", 2),
        ("rollback", error),
        ("allowed", True),
        ("on_give_up", error),
    ]


def test_rollback_always_catches_a_base_exception():
    """A KeyboardInterrupt out of finalize is rolled back and given up on; by
    default it is not caught at all (nor is the executor's _AlreadyHandled)."""
    interrupt = KeyboardInterrupt()
    loop = Loop(interrupt)
    with pytest.raises(KeyboardInterrupt):
        loop.run(rollback_always=True)
    assert loop.names() == ["attempt", "rollback", "allowed", "on_give_up"]

    loop = Loop(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        loop.run()
    assert loop.names() == ["attempt"]


def test_the_logger_is_asked_for_when_the_retry_is_logged(caplog):
    """The executor tags its logger during an attempt: the retry's warning goes
    to the logger current when it is logged."""
    tagged = logging.getLogger("flask_geneva.test_tagged")
    loggers = iter([tagged])
    loop = Loop(_conflict())
    with caplog.at_level(logging.WARNING):
        assert loop.run(logger=lambda: next(loggers)) == "done"
    assert [r.name for r in caplog.records] == ["flask_geneva.test_tagged"]
