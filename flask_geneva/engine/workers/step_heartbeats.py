"""The heartbeats a step asks for: ``self.heartbeat()`` and a checkpoint's (R-WRK-11).

Both write this process's worker row at once, through the registration's own
pool and never the step's session, and neither raises for the write nor waits
for it longer than ``GENEVA_HEARTBEAT_TIMEOUT`` (R-FLT-31..33): the write runs
in a thread of its own (:mod:`flask_geneva.engine.workers.bounded_writes`) and
a failure or a write still unanswered at the timeout is logged as a WARNING
while the step goes on. The registration's heartbeat thread keeps writing as
before (R-WRK-03).
"""

from __future__ import annotations

from typing import Any

from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db.context import bound_context
from flask_geneva.engine.workers import bounded_writes
from flask_geneva.engine.workers.registry import WorkerRegistration
from flask_geneva.engine.workers.registry import own_registration

__all__ = ["bounded_heartbeat", "heartbeat_if_due", "heartbeat_now"]

_log = module_logger("flask_geneva.workers")


def heartbeat_now(session: Any) -> bool:
    """Write this process's heartbeat for ``session``'s database now (R-WRK-11).

    Never raises for the write, and never waits for it longer than
    ``GENEVA_HEARTBEAT_TIMEOUT`` of the session's app (R-FLT-31): a liveness
    write must not fail or freeze the step that asked for it. A failure (a
    database blip) or a write still unanswered at the timeout (a network cut)
    is logged as a warning; the heartbeat thread keeps trying. The step's own
    session and transaction are not used.

    Args:
        session: The step's session (it names the database and the settings).

    Returns:
        True if written; False when this process is no registered worker, the
        database refused the write, or it did not answer in time.
    """
    registration = own_registration(session)
    if registration is None:
        return False
    return bounded_heartbeat(registration, _heartbeat_timeout(session, registration))


def heartbeat_if_due(session: Any) -> bool:
    """Heartbeat if half an interval passed since the last one (a checkpoint).

    A resumable step's checkpoint counts as a heartbeat (R-WRK-11) without
    writing more than about two heartbeats per interval. Bounded and never
    raised as :func:`heartbeat_now` (R-FLT-33): the checkpoint itself already
    committed.

    Returns:
        True if a heartbeat was written.
    """
    registration = own_registration(session)
    if registration is None or not registration.due():
        return False
    return bounded_heartbeat(
        registration,
        _heartbeat_timeout(session, registration),
        what="checkpoint heartbeat",
    )


def bounded_heartbeat(
    registration: WorkerRegistration, timeout: float, *, what: str = "heartbeat"
) -> bool:
    """Write ``registration``'s heartbeat, waiting at most ``timeout`` seconds.

    The write runs in a daemon thread of its own (R-FLT-31/32); a failure or
    the timeout is logged as a WARNING naming ``what``, never raised. An
    in-memory SQLite database (reachable only through the host's pool from
    this thread, and no network in between) is written here directly.

    Args:
        registration: This process's registration.
        timeout: Seconds, more than 0.
        what: How the log names the write.

    Returns:
        True if the heartbeat was written.
    """
    worker = registration.identity.worker_id
    if registration.writes_through_host_pool:
        try:
            registration.heartbeat()
        except Exception as error:  # noqa: BLE001 - never fail a step for it
            _log.warning(
                "%s of worker %s failed (the step goes on): %s: %s",
                what,
                worker,
                type(error).__name__,
                error,
            )
            return False
        return True
    result = registration.step_writes.write(registration.heartbeat, timeout)
    if result.outcome == bounded_writes.TIMED_OUT:
        _log.warning(
            "%s of worker %s got no answer from the database within %.1f s "
            "(GENEVA_HEARTBEAT_TIMEOUT): the step goes on; the write ends on its "
            "own",
            what,
            worker,
            timeout,
        )
    elif result.error is not None:
        _log.warning(
            "%s of worker %s failed (the step goes on): %s: %s",
            what,
            worker,
            type(result.error).__name__,
            result.error,
        )
    return result.written


def _heartbeat_timeout(session: Any, registration: WorkerRegistration) -> float:
    """``GENEVA_HEARTBEAT_TIMEOUT`` of the session's app, else the registration's."""
    context = bound_context(session)
    if context is None:
        return registration.heartbeat_timeout
    return float(context.settings.heartbeat_timeout.total_seconds())
