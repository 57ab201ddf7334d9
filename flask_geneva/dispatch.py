"""Task publication: after commit, through a small backend seam (SPEC §6.2, R-TXN).

A publication is ``(task name, step execution id, task id, queue, priority, eta)``.
When deferral is active (``GENEVA_ENQUEUE_AFTER_COMMIT`` and not inside
:func:`inline_enqueue`) it is kept in ``session.info`` and sent from the session's
``after_commit`` event of the outermost transaction; a rollback discards it
(R-TXN-02/03). The Celery message only wakes a worker: the execution row is the
truth and duplicate deliveries are harmless (R-EXE-11).

Backends: :class:`CeleryBackend` (``GENEVA_TASK_BACKEND = "celery"``) and
:class:`RecordingBackend` (``"recording"``, for tests, R-TH-20).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva.publications import DEFERRED_JOB_ID
from flask_geneva.publications import DISPATCH_DUE_TASK
from flask_geneva.publications import HOUSEKEEPING_TASK
from flask_geneva.publications import PERFORM_STEP_TASK
from flask_geneva.publications import Publication
from flask_geneva.publications import TaskBackend

__all__ = [
    "DEFERRED_JOB_ID",
    "DISPATCH_DUE_TASK",
    "HOUSEKEEPING_TASK",
    "PERFORM_STEP_TASK",
    "BrokerPaused",
    "CeleryBackend",
    "Publication",
    "RecordingBackend",
    "TaskBackend",
    "holds_eta",
    "inline_enqueue",
    "request_publication",
    "run_eager_queue",
]

logger = logging.getLogger("flask_geneva")

_PENDING_KEY = "geneva_pending_publications"
_FAILED_KEY = "geneva_failed_publications"
_inline = contextvars.ContextVar("geneva_inline_enqueue", default=False)
_ignore_pause = contextvars.ContextVar("geneva_ignore_broker_pause", default=False)


def bound_broker_timeouts(celery_app: Any, publish_timeout_seconds: float) -> None:
    """Give ``celery_app`` the broker timeouts that bound a publication (R-DSP-07).

    A Celery app without :func:`flask_geneva.celery_defaults` (the web process of
    the README's quick start, say) would block a publication on a hung broker for
    as long as the operating system keeps the socket open. Each timeout the host
    left unset gets a quarter of ``publish_timeout_seconds``:
    ``broker_connection_timeout`` while still at Celery's default, and
    ``broker_transport_options`` ``socket_timeout`` / ``socket_connect_timeout``
    (Redis) where the host's options lack them. Settings the host chose are kept.
    Connections the app opened before keep their old timeouts.

    Args:
        celery_app: The host's Celery application.
        publish_timeout_seconds: ``GENEVA_PUBLISH_TIMEOUT`` in seconds.
    """
    from celery.app.defaults import DEFAULTS as CELERY_DEFAULTS

    broker_timeout = publish_timeout_seconds / 4
    conf = celery_app.conf
    updates: dict[str, Any] = {}
    current = conf.get("broker_connection_timeout")
    if current == CELERY_DEFAULTS.get("broker_connection_timeout"):
        updates["broker_connection_timeout"] = broker_timeout
    options = dict(conf.get("broker_transport_options") or {})
    if not {"socket_timeout", "socket_connect_timeout"} <= options.keys():
        options.setdefault("socket_timeout", broker_timeout)
        options.setdefault("socket_connect_timeout", broker_timeout)
        updates["broker_transport_options"] = options
    if updates:
        conf.update(updates)


class CeleryBackend:
    """Publishes through ``celery_app.send_task`` by task name, bounded in time.

    Each publication uses Celery's own publish retry (one reconnect and retry, so
    a pooled connection the broker dropped is replaced) and passes
    ``publish_timeout_seconds`` as kombu's publish timeout. How long one broker
    operation may block comes from the Celery app's broker settings
    (``broker_connection_timeout``, ``broker_transport_options`` ``socket_timeout``
    and ``socket_connect_timeout``): :func:`flask_geneva.celery_defaults` sets them
    so that a publication, retry included, stays within
    ``GENEVA_PUBLISH_TIMEOUT``. A publication that took longer is logged.

    After a failed publication the broker is not tried again for
    ``publish_timeout_seconds``: publications in that pause fail at once
    (:class:`BrokerPaused`) and go to the dispatcher like any failure, so a run
    that publishes row after row (housekeeping, say) is not blocked once per row
    by a hung broker. The dispatcher tries the broker regardless
    (:func:`trying_the_broker`): it is the retry, and stops at its first failure.

    Args:
        celery_app: The host's Celery application.
        publish_timeout_seconds: ``GENEVA_PUBLISH_TIMEOUT`` in seconds.
    """

    def __init__(self, celery_app: Any, publish_timeout_seconds: float = 5.0) -> None:
        self.celery_app = celery_app
        self.publish_timeout_seconds = publish_timeout_seconds
        self._paused_until = 0.0
        bound_broker_timeouts(celery_app, publish_timeout_seconds)

    @property
    def holds_eta(self) -> bool:
        """False under Celery eager mode, which runs a task at once, eta or not."""
        return not self.celery_app.conf.task_always_eager

    def publish(self, publication: Publication) -> None:
        """Send one publication.

        Raises:
            BrokerPaused: A publication failed less than
                ``publish_timeout_seconds`` ago; the broker was not tried.
            Exception: Whatever Celery/kombu raised (e.g.
                ``kombu.exceptions.OperationalError``); the caller,
                :func:`request_publication`, never lets it reach its own caller.
        """
        if self.celery_app.conf.task_always_eager:
            # R-TH-21: never run a task inside the commit that published it.
            _eager.queue.append((self.celery_app, publication))
            return
        timeout = self.publish_timeout_seconds
        options: dict[str, Any] = {
            "task_id": publication.task_id,
            "retry": True,
            "retry_policy": _publish_retry_policy(timeout),
            "timeout": timeout,
            "confirm_timeout": timeout,
        }
        if publication.queue is not None:
            options["queue"] = publication.queue
        if publication.priority is not None:
            options["priority"] = publication.priority
        if publication.eta is not None:
            options["eta"] = publication.eta
        started = time.monotonic()
        if started < self._paused_until and not _ignore_pause.get():
            raise BrokerPaused(
                f"not sent: a publication failed less than {timeout:g}s ago "
                "(GENEVA_PUBLISH_TIMEOUT)"
            )
        try:
            self.celery_app.send_task(
                publication.task_name,
                args=[_jsonable_id(publication.step_execution_id)],
                **options,
            )
        except Exception:
            self._paused_until = time.monotonic() + timeout
            raise
        finally:
            elapsed = time.monotonic() - started
            if elapsed > timeout:
                logger.warning(
                    "publishing %s took %.1fs, longer than GENEVA_PUBLISH_TIMEOUT "
                    "(%.1fs): give the Celery app the broker timeouts of "
                    "flask_geneva.celery_defaults()",
                    publication.task_id,
                    elapsed,
                    timeout,
                )


class BrokerPaused(Exception):
    """A publication not tried because the previous one failed moments ago."""


def _publish_retry_policy(timeout_seconds: float) -> dict[str, float]:
    """Celery's ``retry_policy`` for one publication: one quick reconnect and retry."""
    return {
        "max_retries": 1,
        "interval_start": 0,
        "interval_step": min(0.2, timeout_seconds / 10),
        "interval_max": min(0.2, timeout_seconds / 10),
    }


class _EagerQueue(threading.local):
    def __init__(self) -> None:
        self.queue: list[tuple[Any, Publication]] = []
        self.draining = False


_eager = _EagerQueue()


def run_eager_queue() -> int:
    """Run tasks published under Celery eager mode, iteratively (R-TH-21).

    Only with ``GENEVA_ALLOW_EAGER = True``: eager publications are queued (per
    thread) instead of running inside the commit that sent them, and run here one
    after the other, including those they publish in turn; a nested call while
    draining returns at once (no recursion). flask_geneva calls it after its own
    commits (workflow creation, executor runs, flow control); call it yourself after
    committing a transaction you own.

    Returns:
        The number of tasks run.
    """
    if _eager.draining:
        return 0
    _eager.draining = True
    ran = 0
    try:
        while _eager.queue:
            celery_app, publication = _eager.queue.pop(0)
            celery_app.tasks[publication.task_name].apply(
                args=[_jsonable_id(publication.step_execution_id)],
                task_id=publication.task_id,
            )
            ran += 1
    finally:
        _eager.draining = False
    return ran


def holds_eta(backend: TaskBackend) -> bool:
    """True if ``backend`` keeps a publication with an eta until that time.

    A backend without a ``holds_eta`` attribute is taken to hold it. Celery's
    eager mode does not (R-TH-21): scheduling then leaves a publication with a
    future eta to the dispatcher instead (R-EXE-18, R-DSP-01).
    """
    return bool(getattr(backend, "holds_eta", True))


class RecordingBackend:
    """Records publications instead of sending them (R-TH-20).

    ``enqueued`` lists the :class:`Publication` objects in order; :meth:`clear`
    empties it. ``drain`` lives in :mod:`flask_geneva.testing`.
    """

    def __init__(self) -> None:
        self.enqueued: list[Publication] = []

    def publish(self, publication: Publication) -> None:
        self.enqueued.append(publication)

    def clear(self) -> None:
        """Forget every recorded publication."""
        self.enqueued.clear()


def _jsonable_id(value: Any) -> Any:
    return value if isinstance(value, int | str) else str(value)


@contextlib.contextmanager
def inline_enqueue() -> Iterator[None]:
    """Publish immediately inside this block, even within a transaction (R-TXN-05).

    Applies to the current thread/async context only, nests, and restores the
    previous mode on exit (also on exceptions).

    Warning:
        With Redis or RabbitMQ the broker does not take part in the database
        transaction: a worker may receive the task before the row is committed.
        The task's lookup retry (R-JOB-20) softens this; prefer the default
        after-commit publication (R-TXN-07).
    """
    token = _inline.set(True)
    try:
        yield
    finally:
        _inline.reset(token)


@contextlib.contextmanager
def trying_the_broker() -> Iterator[None]:
    """Publish inside the block even while a failure paused the backend.

    For :func:`flask_geneva.dispatcher.dispatch_due`, which retries the
    executions that failed and ends its pass at its own first failure.
    """
    token = _ignore_pause.set(True)
    try:
        yield
    finally:
        _ignore_pause.reset(token)


def deferral_active(enqueue_after_commit: bool) -> bool:
    """True iff publications wait for the commit (R-TXN-05)."""
    return enqueue_after_commit and not _inline.get()


def request_publication(
    session: orm.Session, publication: Publication, *, backend: TaskBackend, defer: bool
) -> None:
    """Publish now, or after the session's outermost commit when ``defer`` (R-TXN-02).

    Publications requested while no transaction is open are sent at once. Sending
    never raises: a failed or timed-out publication is logged, counted and its
    execution left for the dispatcher (:mod:`flask_geneva.outbox`). A deferred
    publication belongs to the innermost transaction open at request time: a
    savepoint that rolls back discards it, a savepoint that is released hands it to
    its parent, and only the root commit sends it (R-TXN-03).
    """
    if defer and session.in_transaction():
        pending: list[_Pending] = session.info.setdefault(_PENDING_KEY, [])
        pending.append(_Pending(_innermost_transaction(session), backend, publication))
        return
    # Inside an open transaction (deferral off) a failure is recorded in it.
    _publish_all(
        session, [(backend, publication)], committed=not session.in_transaction()
    )


@dataclasses.dataclass
class _Pending:
    transaction: orm.SessionTransaction | None
    backend: TaskBackend
    publication: Publication


def _innermost_transaction(session: orm.Session) -> orm.SessionTransaction | None:
    return session.get_nested_transaction() or session.get_transaction()


def _send(backend: TaskBackend, publication: Publication) -> BaseException | None:
    """Publish one publication; return the error instead of raising it (issue 14)."""
    logger.debug(
        "publishing %s(%s) task_id=%s queue=%s eta=%s",
        publication.task_name,
        publication.step_execution_id,
        publication.task_id,
        publication.queue,
        publication.eta,
    )
    try:
        backend.publish(publication)
    except Exception as error:  # noqa: BLE001 - the committed row is the outbox
        return error
    return None


def _publish_all(
    session: orm.Session,
    entries: list[tuple[TaskBackend, Publication]],
    *,
    committed: bool,
) -> None:
    """Send ``entries`` in order; hand failures to :mod:`flask_geneva.outbox`.

    Never raises: the rows are written, the message only wakes a worker. After the
    first failure the remaining publications are not attempted (a hung broker would
    block the caller once per message); they are left for the dispatcher with it.
    """
    failed: list[tuple[Publication, BaseException]] = []
    for backend, publication in entries:
        if failed:
            failed.append((publication, failed[0][1]))
            continue
        error = _send(backend, publication)
        if error is not None:
            failed.append((publication, error))
    if failed:
        from flask_geneva import outbox

        session.info[_FAILED_KEY] = session.info.get(_FAILED_KEY, 0) + len(failed)
        outbox.publications_failed(session, failed, committed=committed)


def take_failed_count(session: orm.Session) -> int:
    """How many publications of ``session`` failed since the last call (and reset).

    The dispatcher uses it to count what it really published and to end its pass
    while the broker is unreachable (R-DSP-02).
    """
    return int(session.info.pop(_FAILED_KEY, 0))


@event.listens_for(orm.Session, "after_commit")
def _after_commit(session: orm.Session) -> None:
    # SQLAlchemy fires after_commit for released savepoints too (R-TXN-03): those
    # hand their publications to the enclosing transaction; only the root sends.
    pending: list[_Pending] | None = session.info.get(_PENDING_KEY)
    if not pending:
        return
    committed = _innermost_transaction(session)
    if committed is not None and committed.nested:
        for entry in pending:
            if entry.transaction is committed:
                entry.transaction = committed.parent
        return
    session.info.pop(_PENDING_KEY, None)
    # Already after the commit: never defer a second time (R-TXN-06).
    _publish_all(
        session,
        [(entry.backend, entry.publication) for entry in pending],
        committed=True,
    )


@event.listens_for(orm.Session, "after_transaction_end")
def _after_transaction_end(
    session: orm.Session, transaction: orm.SessionTransaction
) -> None:
    # Publications still attached to an ending transaction were not handed on by
    # a commit: that transaction (or savepoint) rolled back and its rows do not
    # exist (R-TXN-02). A root transaction takes everything left with it.
    pending: list[_Pending] | None = session.info.get(_PENDING_KEY)
    if not pending:
        return
    if transaction.parent is None:
        session.info.pop(_PENDING_KEY, None)
        return
    kept = [entry for entry in pending if entry.transaction is not transaction]
    if kept:
        session.info[_PENDING_KEY] = kept
    else:
        session.info.pop(_PENDING_KEY, None)
