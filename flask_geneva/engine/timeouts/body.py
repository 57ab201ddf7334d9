"""How a step body's run ends when its step has a ``timeout`` (R-STO-10..14).

The executor's body stage (:mod:`flask_geneva.engine.executor.body`) asks
:func:`timeout_error` about each body outcome of a step with a timeout. Two
ends are a timeout:

- the body (or a hook around it, or the commit of its writes) raised Celery's
  ``SoftTimeLimitExceeded``, or an exception whose cause or context chain holds
  one (a body that caught it and raised its own error): Celery's soft time
  limit interrupted the run (R-STO-10);
- the body returned normally after its timeout had passed, by geneva's clock
  (:func:`flask_geneva.core.clock.now`): a pool that cannot interrupt a task
  (``solo``, ``threads``), a task published without the limits, or a body that
  swallowed the soft limit's exception (R-STO-11).

Celery is never imported: its exception is recognised by its class's name and
module (``billiard.exceptions``, re-exported by ``celery.exceptions``), so the
engine stays free of the task framework (the import contracts).
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta

from flask_geneva.core.durations import format_interval
from flask_geneva.exceptions import StepTimeout

__all__ = ["is_soft_time_limit", "overran", "timeout_error"]

#: Celery's soft time limit exception: its name and the modules defining it.
_SOFT_LIMIT_NAME = "SoftTimeLimitExceeded"
_SOFT_LIMIT_MODULES = ("billiard.exceptions", "celery.exceptions")
#: How far the cause/context chain is followed.
_CHAIN_DEPTH = 10


def is_soft_time_limit(error: BaseException) -> bool:
    """Whether ``error`` is Celery's ``SoftTimeLimitExceeded`` (or a subclass)."""
    return any(
        cls.__name__ == _SOFT_LIMIT_NAME and cls.__module__ in _SOFT_LIMIT_MODULES
        for cls in type(error).__mro__
    )


def _soft_limit_in_chain(error: BaseException) -> BaseException | None:
    """The soft limit's exception in ``error``'s cause/context chain, or None."""
    seen: BaseException | None = error
    for _ in range(_CHAIN_DEPTH):
        if seen is None:
            return None
        if is_soft_time_limit(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def overran(timeout: timedelta, started_at: datetime, ended_at: datetime) -> bool:
    """Whether the run from ``started_at`` to ``ended_at`` exceeded ``timeout``."""
    return ended_at - started_at > timeout


def timeout_error(
    *,
    step_name: str,
    timeout: timedelta,
    kind: str,
    error: BaseException | None,
    started_at: datetime,
    ended_at: datetime,
    soft_limit_signalled: bool = False,
) -> StepTimeout | None:
    """The :class:`StepTimeout` a body's end amounts to, or None (R-STO-10/11).

    Args:
        step_name: The step.
        timeout: Its ``timeout``.
        kind: How the body ended: ``"completed"``, ``"exception"``,
            ``"flow_control"`` or ``"interrupted"`` (the executor's
            ``BodyResult.kind``).
        error: The captured exception (kind ``"exception"``), else None.
        started_at: When the run began (before the hooks), by geneva's clock.
        ended_at: When it ended, by geneva's clock.
        soft_limit_signalled: The worker received Celery's soft time limit
            signal while the run went on
            (:mod:`flask_geneva.core.soft_time_limits`): the run was
            interrupted even if the body caught the exception and returned, or
            raised an error of its own without chaining it.

    Returns:
        A :class:`StepTimeout` whose ``__cause__`` is Celery's exception (and
        whose traceback is the interrupted body's), when the soft limit ended
        the run; a :class:`StepTimeout` when a body that returned normally ran
        longer than ``timeout``; None otherwise (a flow-control signal, an
        interruption of a resumable step and any other exception keep their
        meaning, R-STO-12).
    """
    limit = format_interval(timeout)
    seconds = timeout.total_seconds()
    soft: BaseException | None = None
    if kind == "exception" and error is not None:
        soft = _soft_limit_in_chain(error)
        if soft is None and not soft_limit_signalled:
            return None  # any other error keeps its meaning (R-STO-12)
    if kind == "exception" and error is not None and soft is not None:
        timed_out = StepTimeout(
            f"step '{step_name}' ran longer than its timeout of {limit}: Celery's "
            "soft time limit interrupted it",
            step_name=step_name,
            timeout_seconds=seconds,
        ).with_traceback(error.__traceback__)
        timed_out.__cause__ = error
        return timed_out
    if soft_limit_signalled and kind in ("completed", "exception"):
        caught = StepTimeout(
            f"step '{step_name}' ran longer than its timeout of {limit}: Celery's "
            "soft time limit interrupted it and the body went on (it caught the "
            "interruption), so its outcome is not used",
            step_name=step_name,
            timeout_seconds=seconds,
        )
        if error is not None:
            caught.__cause__ = error
        return caught
    if kind == "completed" and overran(timeout, started_at, ended_at):
        elapsed = format_interval(ended_at - started_at)
        return StepTimeout(
            f"step '{step_name}' ran {elapsed}, longer than its timeout of {limit}: "
            "its body returned after the timeout, so its outcome is not used (the "
            "worker did not interrupt it: a solo or threads pool, or a task "
            "published without Celery's time limits)",
            step_name=step_name,
            timeout_seconds=seconds,
        )
    return None
