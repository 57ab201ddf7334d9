"""Task publication: after commit, through a small backend seam (SPEC §6.2, R-TXN).

A publication is ``(task name, step execution id, task id, queue, priority, eta)``.
When deferral is active (``GENEVA_ENQUEUE_AFTER_COMMIT`` and not inside
:func:`inline_enqueue`) it is kept in ``session.info`` and sent from the session's
``after_commit`` event of the outermost transaction; a rollback discards it
(R-TXN-02/03). The Celery message only wakes a worker: the execution row is the
truth and duplicate deliveries are harmless (R-EXE-11).

Backends: the Celery publisher
(:class:`flask_geneva.ext.celery_publisher.CeleryBackend`,
``GENEVA_TASK_BACKEND = "celery"``) and :class:`RecordingBackend`
(``"recording"``, for tests, R-TH-20). This module imports no Celery: the
engine requests publications here, the Celery adapter sends them.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from collections.abc import Mapping
from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva.core import log_fields
from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.publications import PERFORM_STEP_TASK
from flask_geneva.core.publications import Publication
from flask_geneva.core.publications import TaskBackend
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.core.transaction_scoped import TransactionScoped
from flask_geneva.core.transaction_scoped import innermost_transaction

__all__ = [
    "RecordingBackend",
    "broker_pause_ignored",
    "holds_eta",
    "inline_enqueue",
    "request_publication",
    "step_timeout",
    "time_limits",
]

logger = module_logger("flask_geneva")

#: Deferred publications, each owned by the transaction that requested it.
#: A publication waiting for the commit: its backend, and the log fields of its
#: execution (R-OLOG-02) for the records of its sending.
_Entry = tuple[TaskBackend, Publication, log_fields.Fields | None]

_pending: TransactionScoped[_Entry] = TransactionScoped("geneva_pending_publications")
_FAILED_KEY = "geneva_failed_publications"
_inline = contextvars.ContextVar("geneva_inline_enqueue", default=False)
_ignore_pause = contextvars.ContextVar("geneva_ignore_broker_pause", default=False)


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


def broker_pause_ignored() -> bool:
    """True inside :func:`trying_the_broker`: a publisher tries even while paused."""
    return _ignore_pause.get()


@contextlib.contextmanager
def trying_the_broker() -> Iterator[None]:
    """Publish inside the block even while a failure paused the backend.

    For :func:`flask_geneva.engine.operators.dispatcher.dispatch_due`, which retries the
    executions that failed and ends its pass at its own first failure.
    """
    token = _ignore_pause.set(True)
    try:
        yield
    finally:
        _ignore_pause.reset(token)


def left_to_dispatcher(
    eta: datetime | None, now: datetime, *, config: GenevaConfig, backend: TaskBackend
) -> bool:
    """Whether a task due at ``eta`` is left to the dispatcher (R-DSP-01).

    So it is when ``eta`` is more than ``GENEVA_MAX_BROKER_DELAY`` ahead of
    ``now``, or when ``backend`` cannot hold a task until its eta (Celery eager
    mode would run it at once, R-EXE-18); never for a task due now (None).
    """
    return eta is not None and (
        eta - now > config.max_broker_delay or not holds_eta(backend)
    )


def step_publication(
    config: GenevaConfig,
    *,
    step_execution_id: Any,
    task_id: str,
    queue: str | None,
    priority: int | None,
    eta: datetime | None,
    timeout: timedelta | None = None,
) -> Publication:
    """The publication that runs one step execution (R-JOB-08, R-STO-03).

    Args:
        config: The settings: the default queue for ``queue`` None, and
            ``GENEVA_PRIORITY_MAPPER``, applied to a priority that is set.
        step_execution_id: The execution (None when it is not inserted yet).
        task_id: The broker task id (also the execution's ``job_id``).
        queue: The merged ``queue`` job option, or None.
        priority: The merged ``priority`` job option, or None when unset.
        eta: When the task may run (aware UTC), or None for now.
        timeout: The step's ``timeout``, or None: the task then carries
            Celery's soft time limit (the timeout) and hard time limit (the
            timeout plus ``GENEVA_STEP_TIMEOUT_GRACE``), R-STO-03.
    """
    limits = time_limits(timeout, config.step_timeout_grace)
    if priority is not None and config.priority_mapper is not None:
        priority = config.priority_mapper(priority)
    return Publication(
        task_name=PERFORM_STEP_TASK,
        step_execution_id=step_execution_id,
        task_id=task_id,
        queue=queue or config.default_queue,
        priority=priority,
        eta=eta,
        soft_time_limit=None if limits is None else limits[0],
        time_limit=None if limits is None else limits[1],
    )


def step_timeout(
    workflow_classes: Mapping[str, Any],
    workflow_type: str | None,
    step_name: str | None,
) -> timedelta | None:
    """The ``timeout`` of a stored execution's step, for its publication (R-STO-03).

    For the publications that start from rows rather than a step definition
    (a limit's grant, R-LIM-13; a child wait's wake, R-CHD-22): their
    statements read the workflow's ``type`` and the execution's
    ``step_name`` with the rest, and this looks the step up in memory.

    Args:
        workflow_classes: ``{type identity: class}`` of the declared workflows
            (``GenevaModels.workflow_classes``).
        workflow_type: The workflow row's ``type``, or None when not read.
        step_name: The execution's ``step_name``, or None when not read.

    Returns:
        The step's ``timeout``; None without one, or when the class or the
        step is not defined (any more) here.
    """
    if workflow_type is None or step_name is None:
        return None
    workflow_cls = workflow_classes.get(workflow_type)
    if workflow_cls is None:
        return None
    step = workflow_cls.step_collection().named(step_name)
    return None if step is None else step.timeout


def time_limits(
    timeout: timedelta | None, grace: timedelta
) -> tuple[float, float] | None:
    """Celery's ``(soft_time_limit, time_limit)`` in seconds for a step (R-STO-03).

    Args:
        timeout: The step's ``timeout``, or None.
        grace: ``GENEVA_STEP_TIMEOUT_GRACE``.

    Returns:
        ``(timeout, timeout + grace)`` in seconds, or None without a timeout.
    """
    if timeout is None:
        return None
    soft = timeout.total_seconds()
    return soft, soft + grace.total_seconds()


def deferral_active(enqueue_after_commit: bool) -> bool:
    """True iff publications wait for the commit (R-TXN-05)."""
    return enqueue_after_commit and not _inline.get()


def request_publication(
    session: orm.Session,
    publication: Publication,
    *,
    backend: TaskBackend,
    defer: bool,
    fields: log_fields.Fields | None = None,
) -> None:
    """Publish now, or after the session's outermost commit when ``defer`` (R-TXN-02).

    Publications requested while no transaction is open are sent at once. Sending
    never raises: a failed or timed-out publication is logged, counted and its
    execution left for the dispatcher (:mod:`flask_geneva.engine.outbox`). A deferred
    publication belongs to the innermost transaction open at request time: a
    savepoint that rolls back discards it, a savepoint that is released hands it to
    its parent, and only the root commit sends it (R-TXN-03).

    The records of the sending carry ``fields`` (the execution's log fields),
    by default those current at the request (R-OLOG-02).
    """
    entry = (backend, publication, fields or log_fields.current_fields())
    if defer and session.in_transaction():
        _pending.add(session, entry)
        return
    # Inside an open transaction (deferral off) a failure is recorded in it.
    _publish_all(session, [entry], committed=not session.in_transaction())


def _send(
    backend: TaskBackend, publication: Publication, fields: log_fields.Fields | None
) -> BaseException | None:
    """Publish one publication; return the error instead of raising it (issue 14)."""
    if fields is None:
        return _send_as_is(backend, publication)
    with log_fields.logging_about(fields):
        return _send_as_is(backend, publication)


def _send_as_is(backend: TaskBackend, publication: Publication) -> BaseException | None:
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
    entries: list[_Entry],
    *,
    committed: bool,
) -> None:
    """Send ``entries`` in order; hand failures to :mod:`flask_geneva.engine.outbox`.

    Never raises: the rows are written, the message only wakes a worker. After the
    first failure the remaining publications are not attempted (a hung broker would
    block the caller once per message); they are left for the dispatcher with it.
    """
    failed: list[tuple[Publication, BaseException]] = []
    for backend, publication, fields in entries:
        if failed:
            failed.append((publication, failed[0][1]))
            continue
        error = _send(backend, publication, fields)
        if error is not None:
            failed.append((publication, error))
    if failed:
        from flask_geneva.engine import outbox

        session.info[_FAILED_KEY] = session.info.get(_FAILED_KEY, 0) + len(failed)
        outbox.publications_failed(session, failed, committed=committed)


def failed_count(session: orm.Session) -> int:
    """How many publications of ``session`` failed since :func:`take_failed_count`
    last reset it, without resetting it."""
    return int(session.info.get(_FAILED_KEY, 0))


def take_failed_count(session: orm.Session) -> int:
    """How many publications of ``session`` failed since the last call (and reset).

    The dispatcher uses it to count what it really published and to end its pass
    while the broker is unreachable (R-DSP-02).
    """
    return int(session.info.pop(_FAILED_KEY, 0))


@event.listens_for(orm.Session, "after_commit")
def _after_commit(session: orm.Session) -> None:
    # A released savepoint hands its publications to its parent (R-TXN-03,
    # TransactionScoped); only the root's commit sends them.
    if session not in _pending:
        return
    committed = innermost_transaction(session)
    if committed is not None and committed.nested:
        return
    # Already after the commit: never defer a second time (R-TXN-06).
    _publish_all(session, _pending.take(session), committed=True)
