"""Registered worker processes and their heartbeat threads (R-WRK-01..04).

A process that executes steps (a Celery prefork child, a ``solo`` or
``threads`` worker) calls :func:`register_worker` once per database: the
worker's row is inserted into ``geneva_drive_workers`` and a daemon thread
updates its ``last_heartbeat_at`` every ``GENEVA_WORKER_HEARTBEAT_INTERVAL``.
The executor writes the worker's id into every execution it claims
(:func:`current_worker_id`, R-WRK-05) and holds the ids it is running in
the registration's set, which the heartbeat thread uses to release the
executions whose run ended without their outcome (:mod:`flask_geneva.
worker_running`, R-WRK-18). A clean shutdown calls
:func:`deregister_workers`, which stops the threads and deletes the rows
(R-WRK-04). A process killed with SIGKILL leaves its row behind; once it has
not heartbeated for ``GENEVA_WORKER_DEAD_AFTER``, recovery treats its
executions as abandoned (:mod:`flask_geneva.engine.operators.housekeeping`).

No Flask, no Celery: the Celery adapter (:mod:`flask_geneva.ext.worker_processes`)
decides when to call these functions; this module is given an
:class:`~flask_geneva.db.context.EngineContext`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from importlib import metadata as importlib_metadata
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import connection_timeouts
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import workers as worker_rows
from flask_geneva.db.context import EngineContext
from flask_geneva.db.context import models_of
from flask_geneva.db.workers import WorkerIdentity
from flask_geneva.engine.workers import bounded_writes
from flask_geneva.engine.workers import running as worker_running
from flask_geneva.models import WORKERS_TABLE

__all__ = [
    "WorkerRegistration",
    "claim_attributes",
    "current_worker_id",
    "deregister_workers",
    "live_worker_of",
    "own_registration",
    "prune_dead_workers",
    "register_worker",
    "registrations",
    "registry_table",
    "running_executions",
    "some_worker_alive",
]

_log = module_logger("flask_geneva.workers")
_lock = threading.Lock()
#: Seconds before a failed heartbeat is tried again (at most one interval).
_HEARTBEAT_RETRY_SECONDS = 1.0
#: The registrations of this process, by database engine.
_registrations: dict[sa.Engine, WorkerRegistration] = {}


class WorkerRegistration:
    """One process's row in ``geneva_drive_workers`` and its heartbeat thread.

    Attributes:
        identity: Who the worker is; ``identity.worker_id`` is its key.
        engine: The host's database engine the row lives in.
        interval_seconds: Seconds between two heartbeats.
        heartbeat_timeout: Seconds a step's heartbeat waits at most when the
            step's session has no context to read ``GENEVA_HEARTBEAT_TIMEOUT``
            from (R-FLT-31).

    The row is written through a pool of its own (:func:`_writer_engine`), so
    that steps holding every connection of the host's pool never delay a
    heartbeat until the worker looks dead (R-WRK-03).
    """

    def __init__(
        self,
        identity: WorkerIdentity,
        engine: sa.Engine,
        table: sa.Table,
        interval_seconds: float,
        execution_table: sa.Table | None = None,
        release_margin: timedelta | None = None,
        heartbeat_timeout: float = 5.0,
    ) -> None:
        self.identity = identity
        self.heartbeat_timeout = heartbeat_timeout
        #: The steps' heartbeats: one write at a time, waited for boundedly
        #: (:mod:`flask_geneva.engine.workers.step_heartbeats`, R-FLT-32).
        self.step_writes = bounded_writes.BoundedWriter(
            f"geneva-step-heartbeat-{identity.worker_id[:8]}"
        )
        #: The executions this process is running (R-WRK-18).
        self.running = worker_running.RunningExecutions()
        self._execution_table = execution_table
        self._release_margin = release_margin
        self.engine = engine
        self._writer = _writer_engine(engine)
        # The process whose writer pool this is (a fork child inherits it).
        self._writer_pid = os.getpid()
        self.interval_seconds = interval_seconds
        self._table = table
        self._stop = threading.Event()
        # Serializes a heartbeat's write with the deregistration, so that a
        # heartbeat in flight during a clean shutdown cannot re-insert the row
        # after it was deleted (R-WRK-04).
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_beat = time.monotonic()
        self._registered = threading.Event()

    @property
    def writes_through_host_pool(self) -> bool:
        """The writes use the host's own pool (an in-memory SQLite database)."""
        return self._writer is self.engine

    @property
    def registered(self) -> bool:
        """The row was written: claims may name this worker (R-WRK-16)."""
        return self._registered.is_set()

    def start(self) -> None:
        """Insert the row and start the daemon heartbeat thread (R-WRK-02/03).

        When the insert fails (the database unreachable), the failure is logged
        and the thread starts anyway: it writes the row at its next heartbeat
        that succeeds. Until then :attr:`registered` is False and claims name no
        worker (R-WRK-16).
        """
        try:
            self.heartbeat()
        except Exception as error:  # noqa: BLE001 - retried by the heartbeat thread
            _log.warning(
                "could not register worker %s (retrying from its heartbeat "
                "thread): %s: %s",
                self.identity.worker_id,
                type(error).__name__,
                error,
            )
        self._thread = threading.Thread(
            target=self._beat,
            name=f"geneva-heartbeat-{self.identity.worker_id[:8]}",
            daemon=True,
        )
        self._thread.start()

    def heartbeat(self) -> None:
        """Record a heartbeat now; insert the row again if it was pruned (R-WRK-03).

        Does nothing once :meth:`stop` was called: a deregistered worker never
        comes back (R-WRK-04).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: The database refused the write.
        """
        with self._write_lock:
            if self._stop.is_set():
                return
            self._last_beat = time.monotonic()
            with self._writer.begin() as connection:
                if not worker_rows.touch_worker(
                    connection, self._table, self.identity.worker_id
                ):
                    worker_rows.insert_worker(connection, self._table, self.identity)
            self._registered.set()

    def due(self) -> bool:
        """Half an interval passed since the last heartbeat."""
        return time.monotonic() - self._last_beat >= self.interval_seconds / 2

    def stop(self, *, delete: bool = True) -> None:
        """Stop the heartbeat thread and delete the row (clean shutdown, R-WRK-04).

        The registration's own writer pool is disposed either way, so no
        connection of it waits for the garbage collector: closed in the
        process that opened it, and only forgotten (``dispose(close=False)``,
        SQLAlchemy's rule after ``fork()``) in a child that inherited it.

        Args:
            delete: Delete the worker's row (False only stops the thread).
        """
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(1.0, self.interval_seconds))
        try:
            if delete:
                self._deregister()
        finally:
            # No heartbeat writes after stop: close the writer's own pool now,
            # not when the garbage collector finds its connections.
            if self._writer is not self.engine:
                self._writer.dispose(close=self._writer_pid == os.getpid())

    def _deregister(self) -> None:
        # Wait (boundedly) for a heartbeat still writing; later ones see _stop.
        locked = self._write_lock.acquire(timeout=max(1.0, self.interval_seconds))
        try:
            with self._writer.begin() as connection:
                worker_rows.delete_worker(
                    connection, self._table, self.identity.worker_id
                )
        except sa.exc.SQLAlchemyError as error:
            _log.warning(
                "could not deregister worker %s: %s", self.identity.worker_id, error
            )
        finally:
            if locked:
                self._write_lock.release()

    def _beat(self) -> None:
        # A failed heartbeat is retried after about a second, not a whole
        # interval, so that a worker writes again as soon as the database is
        # back (R-WRK-03).
        wait = (
            self.interval_seconds
            if self.registered
            else min(_HEARTBEAT_RETRY_SECONDS, self.interval_seconds)
        )
        while not self._stop.wait(wait):
            try:
                self.heartbeat()
            except Exception as error:  # noqa: BLE001 - a failed beat is retried soon
                # A registration never written retries once per interval: the
                # table may be missing until the upgrade (R-WRK-16).
                wait = (
                    min(_HEARTBEAT_RETRY_SECONDS, self.interval_seconds)
                    if self.registered
                    else self.interval_seconds
                )
                _log.warning(
                    "heartbeat of worker %s failed (retrying in %.1f s): %s: %s",
                    self.identity.worker_id,
                    wait,
                    type(error).__name__,
                    error,
                )
            else:
                wait = self.interval_seconds
                self.release_finished()

    def release_finished(self) -> list[Any]:
        """Release this worker's executions whose run ended (R-WRK-18).

        Called by the heartbeat thread after each heartbeat; a failure is
        logged and tried again at the next one. Returns the ids released.
        """
        table, margin = self._execution_table, self._release_margin
        if table is None or margin is None or self._stop.is_set():
            return []
        return worker_running.release_logged(
            self._writer, table, self.identity.worker_id, self.running, margin=margin
        )


def _writer_engine(engine: sa.Engine) -> sa.Engine:
    """An engine for the registration's own writes, with a pool of its own.

    ``Pool.recreate()`` copies the host pool's class and connection arguments
    (public SQLAlchemy API). An in-memory SQLite database is only reachable
    through the host's pool, so it keeps the host engine.
    """
    url = engine.url
    database = url.database or ""
    if url.get_backend_name() == "sqlite" and (
        database in ("", ":memory:") or "mode=memory" in str(url)
    ):
        return engine
    return sa.create_engine(url, pool=engine.pool.recreate())


def register_worker(
    context: EngineContext,
    *,
    node_name: str | None = None,
    queues: Sequence[str] = (),
) -> WorkerRegistration | None:
    """Register this process as a worker of the context's database (R-WRK-02).

    Does nothing (returns None) when the database lacks the worker registry
    (R-WRK-08). Registering the same process again for the same database returns
    the existing registration; a registration inherited through ``fork()`` from
    another process is replaced (the child is a worker of its own). When the
    database cannot be reached (neither to detect the registry nor to insert
    the row), the registration is returned unregistered and its heartbeat
    thread retries until the row is written (R-WRK-16).

    Args:
        context: The settings and models of the app whose database is used.
        node_name: The Celery node name, e.g. ``celery@host``.
        queues: The queues the worker consumes from.

    Returns:
        The running registration (see ``registered``), or None without the
        registry.
    """
    session = context.session
    try:
        if not _registry_detected(session):
            return None
        engine = _engine_of(session)
    finally:
        _rollback_quietly(session)
    table = _registration_table(context)
    with _lock:
        existing = _registrations.get(engine)
        if existing is not None and existing.identity.pid == os.getpid():
            return existing
        registration = WorkerRegistration(
            WorkerIdentity(
                worker_id=str(uuid.uuid4()),
                hostname=socket.gethostname(),
                pid=os.getpid(),
                node_name=node_name,
                queues=tuple(queues),
                library_version=_library_version(),
                dead_after=context.settings.worker_dead_after,
            ),
            engine,
            table,
            context.settings.worker_heartbeat_interval.total_seconds(),
            context.models.StepExecution.__table__,
            context.settings.worker_dead_after,
            context.settings.heartbeat_timeout.total_seconds(),
        )
        registration.start()
        _registrations[engine] = registration
    unbounded = connection_timeouts.unbounded_reads_of(engine)
    if unbounded is not None:
        _log.warning("flask_geneva: %s", unbounded)  # R-FLT-41/42
    _log.info(
        "registered worker %s (pid %d, node %s)%s",
        registration.identity.worker_id,
        registration.identity.pid,
        node_name,
        "" if registration.registered else "; its row is not written yet",
    )
    return registration


def _registration_table(context: EngineContext) -> sa.Table:
    """The workers table to write, with ``dead_after_ms`` only if it exists.

    Detection failed (the database unreachable): without it, so that the row
    is written either way (NULL is judged with each judge's setting, R-WRK-17).
    """
    table = context.models.StepExecution.metadata.tables[WORKERS_TABLE]
    try:
        present = column_detection.optional_columns(context.session).worker_dead_after
    except sa.exc.SQLAlchemyError:
        present = False
    finally:
        _rollback_quietly(context.session)
    return table if present else worker_rows.without_dead_after(table)


def _registry_detected(session: Any) -> bool:
    """Whether the database has the registry; True when it cannot be reached.

    An unreachable database at a worker's start must not leave the worker
    unregistered for its whole life: the registration is made and retried
    (R-WRK-16); should the table turn out to be missing, the heartbeat thread
    logs its failures until the worker restarts after the upgrade.
    """
    try:
        return column_detection.optional_columns(session).worker_registry
    except sa.exc.SQLAlchemyError as error:
        _log.warning(
            "could not detect the worker registry (registering anyway, retried "
            "from the heartbeat thread): %s: %s",
            type(error).__name__,
            error,
        )
        return True


def _rollback_quietly(session: Any) -> None:
    try:
        session.rollback()
    except sa.exc.SQLAlchemyError as error:
        _log.debug("rollback after the registry detection failed: %s", error)


def deregister_workers() -> int:
    """Stop every registration of this process and delete its rows (R-WRK-04).

    Registrations inherited through ``fork()`` are dropped without deleting the
    parent's rows.

    Returns:
        How many rows were deleted.
    """
    with _lock:
        found = list(_registrations.values())
        _registrations.clear()
    deleted = 0
    for registration in found:
        own = registration.identity.pid == os.getpid()
        registration.stop(delete=own)
        deleted += int(own)
    return deleted


def current_worker_id(session: Any) -> str | None:
    """The id of this process's registered worker for ``session``'s database.

    Returns:
        The worker id, or None when this process is no registered worker (a web
        request, a test, a worker without the registry).
    """
    registration = own_registration(session)
    if registration is None or not registration.registered:
        return None  # an unwritten row must not be named: it would look gone
    return registration.identity.worker_id


def claim_attributes(session: Any) -> dict[str, Any] | None:
    """``{"worker_id": ...}`` to write with a claim, or None (R-WRK-05).

    Used by every claim: the prepare phase's and the executor's inline
    continuation's (R-EXE-70), so an execution a registered worker holds is
    always recovered by its liveness, never by its age.

    Returns:
        The attributes when this process is a registered worker and the
        database has the worker registry; None otherwise.
    """
    worker_id = current_worker_id(session)
    if worker_id is None:
        return None
    if not column_detection.optional_columns(session).worker_registry:
        return None
    return {"worker_id": worker_id}


def own_registration(session: Any) -> WorkerRegistration | None:
    """This process's registration for ``session``'s database, or None."""
    if not _registrations:
        return None
    registration = _registrations.get(_engine_of(session))
    if registration is None or registration.identity.pid != os.getpid():
        return None
    return registration


def running_executions(session: Any) -> worker_running.RunningExecutions | None:
    """The running set of this process's registration, or None (R-WRK-18)."""
    registration = own_registration(session)
    return None if registration is None else registration.running


def registrations() -> list[WorkerRegistration]:
    """This process's running registrations (for tests and ``flask geneva status``)."""
    with _lock:
        return [r for r in _registrations.values() if r.identity.pid == os.getpid()]


def registry_table(session: orm.Session) -> sa.Table | None:
    """The workers table if the database has the worker registry, else None.

    Without the ``add_worker_registry`` unit recovery uses age alone (R-WRK-08).
    """
    if not column_detection.optional_columns(session).worker_registry:
        return None
    execution_cls = models_of(session).StepExecution
    table: sa.Table = execution_cls.metadata.tables[WORKERS_TABLE]
    if not column_detection.optional_columns(session).worker_dead_after:
        return worker_rows.without_dead_after(table)  # R-WRK-17
    return table


def some_worker_alive(session: orm.Session, *, config: GenevaConfig) -> bool:
    """Whether some worker may consume a publication now (R-FLT-20, R-WRK-14).

    True without the registry, and with an empty one (no evidence either
    way); otherwise whether the newest heartbeat of any worker is at most
    ``GENEVA_WORKER_DEAD_AFTER`` old by the database's clock. Reads in the
    session's transaction (the caller ends it).

    Args:
        session: A session bound to the app's models.
        config: The validated settings.
    """
    table = registry_table(session)
    if table is None:
        return True
    age = worker_rows.newest_heartbeat_age(session.connection(), table)
    return age is None or age <= config.worker_dead_after


def prune_dead_workers(session: orm.Session, *, config: GenevaConfig) -> int:
    """Delete dead workers that hold no ``in_progress`` execution (R-WRK-07).

    Returns:
        The number of worker rows deleted (0 without the registry).
    """
    workers = registry_table(session)
    if workers is None:
        session.rollback()
        return 0
    execution_table = models_of(session).StepExecution.__table__
    deleted = worker_rows.prune_dead_workers(
        session.connection(),
        workers,
        execution_table,
        dead_after=config.worker_dead_after,
    )
    session.commit()
    return deleted


def live_worker_of(
    session: orm.Session, execution: Any, *, config: GenevaConfig
) -> tuple[str, Any] | None:
    """The live worker holding ``execution``: ``(worker id, last heartbeat)``.

    None when the registry is absent, the execution names no worker, its
    worker is gone from the registry, or it is dead: it missed its heartbeats
    for ``GENEVA_WORKER_DEAD_AFTER`` by the database's clock while another
    worker heartbeated after it (R-WRK-06, R-WRK-14, R-WRK-15). The read runs
    in the session's current transaction.
    """
    workers = registry_table(session)
    if workers is None:
        return None
    worker_id = execution.worker_id
    if worker_id is None:
        return None
    liveness = worker_rows.worker_liveness(
        session.connection(), workers, worker_id, config.worker_dead_after
    )
    if liveness is None or not liveness[1]:
        return None
    return worker_id, liveness[0]


def _engine_of(session: Any) -> sa.Engine:
    bind = session.get_bind()
    return bind.engine if isinstance(bind, sa.Connection) else bind


def _library_version() -> str:
    try:
        return importlib_metadata.version("flask-geneva")
    except importlib_metadata.PackageNotFoundError:
        return "unknown"
