"""Resumable steps: the ``it`` object, checkpoints and interruption (SPEC §10).

A resumable step body receives an :class:`IterableStep`. Each checkpoint stores the
serialized cursor on the running execution and commits the session, so the body's
writes for the items processed so far and the cursor become durable together
(R-IT-10, BTR-07). At a checkpoint the step may be interrupted (R-INT-01): the
execution then completes with outcome ``continued`` and a successor execution
carries the cursor on (R-RES-04, R-RES-20).
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
from collections.abc import Iterable
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.cursors import deserialize_cursor
from flask_geneva.core.cursors import dump_cursor
from flask_geneva.core.durations import coerce_duration
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.engine.workers import step_heartbeats
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import StepInterrupt
from flask_geneva.models import WorkflowState

__all__ = [
    "Batch",
    "IterableStep",
    "request_exit",
    "request_worker_exit",
    "worker_exit_requested",
]

_worker_exit = threading.Event()
_context_exit: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "geneva_exit_requested", default=False
)


def request_worker_exit() -> None:
    """Ask every resumable step in this process to stop at its next checkpoint.

    Sets a process-wide flag read by every interruptible checkpoint (R-INT-01c,
    R-INT-03): the running executions complete ``continued`` and their successors
    carry the cursor on. Safe to call from a signal handler or another thread;
    :func:`flask_geneva.ext.tasks.connect_worker_shutdown` calls it when Celery's
    ``worker_shutting_down`` signal fires. The flag stays set until
    :func:`clear_worker_exit`.

    .. versionadded:: 0.6
    """
    _worker_exit.set()


def clear_worker_exit() -> None:
    """Forget a process-wide exit request (tests, or a worker that keeps running).

    .. versionadded:: 0.6
    """
    _worker_exit.clear()


def worker_exit_requested() -> bool:
    """Return True once :func:`request_worker_exit` was called in this process.

    .. versionadded:: 0.6
    """
    return _worker_exit.is_set()


def request_exit() -> None:
    """Ask the resumable step running in this context to stop at its next checkpoint.

    A per-context flag (a ``contextvars`` variable, R-INT-03): it affects only the
    step running in the calling thread or task, e.g. a body that decides to yield
    the worker. The executor clears it when the next resumable body starts.

    .. versionadded:: 0.6
    """
    _context_exit.set(True)


@dataclasses.dataclass(frozen=True)
class Batch:
    """One batch of :meth:`IterableStep.iterate_over_batches` (R-IT-23).

    Attributes:
        ids: Primary keys of the batch's rows, in keyset order.
        select: A ``select()`` of the batch's entities.
        where: A SQL predicate matching exactly the batch's rows, usable in bulk
            ``update()``/``delete()``.
    """

    ids: list[Any]
    select: sa.Select[Any]
    where: sa.ColumnElement[bool]


class IterableStep:
    """The ``it`` argument of a resumable step body (R-IT-01..24).

    Attributes:
        name: The step name.
        resumed: True when this execution continues an earlier one (R-RES-03).
        advanced: True once the cursor was changed in this execution.
        iterations: Checkpoints taken in this execution (R-INT-02).
    """

    def __init__(
        self,
        *,
        name: str,
        cursor: Any,
        resumed: bool,
        session: orm.Session,
        execution: Any,
        workflow: Any,
        interruptible: bool,
        max_iterations: int | None,
        max_runtime: timedelta | None,
        max_cursor_size: int | None,
    ) -> None:
        self.name = name
        self._cursor = cursor
        self.resumed = resumed
        self.advanced = False
        self.iterations = 0
        self._session = session
        self._execution = execution
        self._workflow_cls = type(workflow).__geneva__.Workflow
        self._workflow_id = workflow.id
        self._interruptible = interruptible
        self._max_iterations = max_iterations
        self._max_runtime = max_runtime
        self._max_cursor_size = max_cursor_size
        self._started = time.monotonic()
        self.interrupt_reason: str | None = None

    @property
    def cursor(self) -> Any:
        """The current cursor value (None on a first run)."""
        return self._cursor

    @property
    def runtime_seconds(self) -> float:
        """Seconds since the body started."""
        return time.monotonic() - self._started

    # -- cursor changes ---------------------------------------------------------------

    def set(self, value: Any) -> None:
        """Set the cursor to ``value`` and checkpoint (R-IT-02).

        Raises:
            CursorSerializationError: ``value`` has an unsupported type (R-CUR-03).
            CursorTooLargeError: The serialized cursor exceeds
                ``GENEVA_MAX_CURSOR_SIZE``; the stored cursor keeps its old value.
            StepInterrupt: The step should stop here (R-INT-01).
        """
        self._persist(value)
        self._checkpoint()

    def advance(self) -> None:
        """Increment an ``int`` cursor by one and checkpoint (R-IT-03).

        Raises:
            TypeError: The cursor is not an int (None must be ``set()`` first).
        """
        if isinstance(self._cursor, bool) or not isinstance(self._cursor, int):
            raise TypeError(
                f"advance() needs an int cursor, got {self._cursor!r}; "
                "initialise it with it.set(0)"
            )
        self.set(self._cursor + 1)

    def checkpoint(self) -> None:
        """Count an iteration, make the cursor durable, maybe interrupt (R-IT-04).

        The cursor stored is the current value of :attr:`cursor`, however it was
        changed: a value changed in place (``it.cursor["last_id"] = 7``) is
        serialized and size-checked here like one given to :meth:`set` (R-IT-10).
        The cursor, the body's pending writes and the interruption check share one
        transaction: the state of the workflow row is read after they are flushed
        and before the commit, so a checkpoint costs a single commit.

        Raises:
            StepInterrupt: One of the conditions of :meth:`should_interrupt` holds
                (R-INT-01); the checkpoint is committed first.
            InvalidStateError: Called inside a user-opened nested transaction
                (``session.begin_nested()``); nothing is committed.
            CursorSerializationError: The cursor now holds an unsupported type
                (R-CUR-03); nothing is stored.
            CursorTooLargeError: The serialized cursor now exceeds
                ``GENEVA_MAX_CURSOR_SIZE``; the stored cursor keeps its old value.
        """
        self._check_not_nested()
        self._persist_in_place_changes()
        self._checkpoint()

    def _checkpoint(self) -> None:
        """Count an iteration, commit, maybe interrupt; the cursor is already set."""
        self._check_not_nested()
        self.iterations += 1
        reason = self._interrupt_reason(self.iterations)
        self._commit()
        # A checkpoint proves progress: it counts as a heartbeat (R-WRK-11).
        step_heartbeats.heartbeat_if_due(self._session)
        if reason is not None:
            self.interrupt_reason = reason
            raise StepInterrupt(None, reason)

    def skip_to(self, value: Any, *, wait: Any = None) -> None:
        """Set the cursor and end this execution; a successor continues after ``wait``.

        The cursor and the body's writes are committed (no iteration is counted),
        then the step always interrupts, even when the executor is not
        interruptible (R-IT-05): the execution completes ``continued`` and a
        successor carrying the cursor is scheduled ``wait`` after now (R-RES-20).
        Use it to wait for a rate limit or an external system.

        Args:
            value: The new cursor (see
            :func:`flask_geneva.core.cursors.serialize_cursor`).
            wait: Delay before the successor is due: ``timedelta`` or seconds; None
                for at once.

        Raises:
            StepInterrupt: Always (after the commit).
            ValueError: ``wait`` is negative or not a duration; nothing is stored.
            CursorSerializationError: ``value`` has an unsupported type (R-CUR-03).
            CursorTooLargeError: The serialized cursor exceeds
                ``GENEVA_MAX_CURSOR_SIZE`` (R-CUR-10, R-CUR-11).
        """
        delay = coerce_duration(wait, name="wait")
        self._persist(value)
        self._commit()
        self.interrupt_reason = "skip_to"
        raise StepInterrupt(delay, "skip_to")

    def _persist(self, value: Any) -> None:
        stored = dump_cursor(value, max_size=self._max_cursor_size)
        self._cursor = deserialize_cursor(stored)
        self.advanced = True
        self._execution.cursor = stored

    def _persist_in_place_changes(self) -> None:
        # The body may have changed the cursor object in place: compare what it
        # serializes to with the stored column, and write only a real change.
        stored = dump_cursor(self._cursor, max_size=self._max_cursor_size)
        if stored != self._execution.cursor:
            self.advanced = True
            self._execution.cursor = stored

    def _check_not_nested(self) -> None:
        if self._session.in_nested_transaction():
            raise InvalidStateError(
                "checkpoint() cannot run inside a nested transaction (begin_nested); "
                "end the savepoint before the checkpoint"
            )

    def _commit(self) -> None:
        self._check_not_nested()
        session = self._session
        # Keep the body's objects loaded: they hold exactly what was just written.
        previous = session.expire_on_commit
        session.expire_on_commit = False
        try:
            session.commit()
        finally:
            session.expire_on_commit = previous

    # -- interruption (R-INT-01) -----------------------------------------------------

    def should_interrupt(self, iterations: int) -> bool:
        """Return True if the step should stop at this checkpoint (R-INT-01).

        Always False when the executor runs non-interruptibly (test helpers).
        Otherwise True if, in this order: ``iterations`` reached ``max_iterations``
        (the executor's override, else the step option); the body ran longer than
        ``max_runtime``; a worker shutdown or :func:`request_exit` was requested
        (R-INT-03); or the workflow row is ``paused`` or ``canceled`` in the
        database (R-INT-04). The state is read with a separate column query and
        the workflow instance the body uses is never refreshed (R-INT-05). The
        query runs in the session's current transaction, which stays open.

        Args:
            iterations: Checkpoints taken in this execution (R-INT-02).
        """
        return self._interrupt_reason(iterations) is not None

    def _interrupt_reason(self, iterations: int) -> str | None:
        """The first interruption reason that holds, or None (R-INT-01, R-PDR-03)."""
        if not self._interruptible:
            return None
        if self._max_iterations is not None and iterations >= self._max_iterations:
            return "max_iterations"
        if (
            self._max_runtime is not None
            and self.runtime_seconds > self._max_runtime.total_seconds()
        ):
            return "max_runtime"
        if worker_exit_requested() or _context_exit.get():
            return "worker_shutdown"
        # A column query: never refresh the workflow the body uses (R-INT-05).
        state = engine_queries.workflow_state(
            self._session, self._workflow_cls, self._workflow_id
        )
        if state == WorkflowState.PAUSED:
            return "workflow_paused"
        if state == WorkflowState.CANCELED:
            return "workflow_canceled"
        return None

    # -- iterators ---------------------------------------------------------------------

    def iterate_over(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield items from index ``cursor or 0``; checkpoint after each (R-IT-20).

        The collection must be stable between runs. A ``break`` or an exception in
        the loop body does not checkpoint the current item.

        Raises:
            TypeError: ``iterable`` is not iterable.
        """
        try:
            iterator = iter(iterable)
        except TypeError:
            raise TypeError(
                f"iterate_over() needs an iterable, got {type(iterable).__name__}"
            ) from None
        start = self._cursor if isinstance(self._cursor, int) else 0
        for index, item in enumerate(iterator):
            if index < start:
                continue
            yield item
            self.set(index + 1)

    def iterate_over_records(
        self,
        query: sa.Select[Any],
        *,
        cursor_column: str = "id",
        batch_size: int = 1000,
    ) -> Iterator[Any]:
        """Yield the query's entities in keyset order, checkpointing each (R-IT-21/22).

        Rows are read ``batch_size`` at a time with keyset pagination (``WHERE
        column > cursor ORDER BY column LIMIT batch_size``; the query's own
        ``ORDER BY`` is replaced), starting after the stored cursor when resuming.
        After the loop body finished with an entity, the cursor is set to its
        ``cursor_column`` value and a checkpoint commits it with the body's writes.
        With a non-primary-key ``cursor_column`` the cursor is the pair
        ``[value, primary key]``, the predicate ``(column > v) OR (column = v AND
        pk > id)`` and the order ``(column, pk)``, so rows sharing a value are
        never skipped or repeated (R-IT-22). Rows inserted behind the cursor while
        iterating are not visited.

        Args:
            query: A ``select()`` of one mapped entity with a single-column primary
                key, e.g. ``select(User).where(User.active)``.
            cursor_column: Attribute name to order and resume by; must not be NULL
                in any selected row.
            batch_size: Rows fetched per query, a positive int.

        Yields:
            The entities, in ``(cursor_column[, pk])`` order.

        Raises:
            TypeError: ``query`` does not select one mapped entity with a
                single-column primary key.
            ValueError: ``batch_size`` is not a positive int, or the entity has no
                attribute ``cursor_column``.
            StepInterrupt: A checkpoint decided to stop (R-INT-01).
        """
        for entity in self._keyset_rows(query, cursor_column, batch_size):
            yield entity
            self.set(self._cursor_for(entity, cursor_column))

    def iterate_over_batches(
        self, query: sa.Select[Any], *, batch_size: int, cursor_column: str = "id"
    ) -> Iterator[Batch]:
        """Yield a :class:`Batch` per ``batch_size`` rows; checkpoint each (R-IT-23).

        Same keyset order and resumption as :meth:`iterate_over_records`. After the
        loop body finished with a batch, the cursor is set to the cursor value of
        the batch's last row and a checkpoint commits it with the body's writes
        (for example a bulk ``update(Model).where(batch.where)``).

        Args:
            query: A ``select()`` of one mapped entity with a single-column primary
                key.
            batch_size: Rows per batch, a positive int.
            cursor_column: Attribute name to order and resume by.

        Yields:
            :class:`Batch` objects; the last one may be smaller.

        Raises:
            TypeError, ValueError, StepInterrupt: As
                :meth:`iterate_over_records` raises them.
        """
        entity_cls, pk = self._entity_and_pk(query)
        batch: list[Any] = []
        for entity in self._keyset_rows(query, cursor_column, batch_size):
            batch.append(entity)
            if len(batch) == batch_size:
                yield self._batch(entity_cls, pk, batch)
                self.set(self._cursor_for(batch[-1], cursor_column))
                batch = []
        if batch:
            yield self._batch(entity_cls, pk, batch)
            self.set(self._cursor_for(batch[-1], cursor_column))

    def _batch(self, entity_cls: Any, pk: Any, rows: list[Any]) -> Batch:
        ids = [getattr(row, pk.key) for row in rows]
        where = pk.in_(ids)
        return Batch(ids=ids, select=sa.select(entity_cls).where(where), where=where)

    @staticmethod
    def _entity_and_pk(query: sa.Select[Any]) -> tuple[Any, Any]:
        description = query.column_descriptions[0]
        entity_cls = description.get("entity")
        if entity_cls is None:
            raise TypeError(
                "iterate over a select() of one mapped entity, e.g. select(User)"
            )
        mapper = sa.inspect(entity_cls)
        if len(mapper.primary_key) != 1:
            raise TypeError(f"{entity_cls.__name__} needs a single-column primary key")
        return entity_cls, getattr(entity_cls, mapper.primary_key[0].key)

    def _cursor_for(self, entity: Any, cursor_column: str) -> Any:
        _, pk = self._entity_and_pk_cached
        value = getattr(entity, cursor_column)
        if cursor_column == pk.key:
            return value
        return [value, getattr(entity, pk.key)]

    def _keyset_rows(
        self, query: sa.Select[Any], cursor_column: str, batch_size: int
    ) -> Iterator[Any]:
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or batch_size < 1
        ):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        entity_cls, pk = self._entity_and_pk(query)
        self._entity_and_pk_cached = (entity_cls, pk)
        column = getattr(entity_cls, cursor_column, None)
        if column is None:
            raise ValueError(
                f"{entity_cls.__name__} has no column {cursor_column!r} to iterate by"
            )
        on_pk = cursor_column == pk.key
        position = self._cursor
        while True:
            statement = query
            if position is not None:
                if on_pk:
                    statement = statement.where(column > position)
                else:
                    value, last_id = position
                    statement = statement.where(
                        sa.or_(column > value, sa.and_(column == value, pk > last_id))
                    )
            order = (column,) if on_pk else (column, pk)
            rows = list(
                self._session.scalars(
                    statement.order_by(None).order_by(*order).limit(batch_size)
                )
            )
            if not rows:
                return
            yield from rows
            last = rows[-1]
            position = (
                getattr(last, cursor_column)
                if on_pk
                else [getattr(last, cursor_column), getattr(last, pk.key)]
            )
            if len(rows) < batch_size:
                return

    # -- misc (R-IT-06) ------------------------------------------------------------

    def to_tuple(self) -> tuple[str, Any]:
        """``(name, cursor)``."""
        return (self.name, self._cursor)

    @property
    def description(self) -> str:
        """``"at '<name>', cursor <repr(cursor)>"``."""
        return f"at '{self.name}', cursor {self._cursor!r}"


def build_iterable_step(
    run: Any, workflow: Any, execution: Any, step: Any
) -> IterableStep:
    """Create the ``it`` object for an executor run (R-RES-03)."""
    _context_exit.set(False)
    stored = execution.cursor
    cursor = deserialize_cursor(stored) if stored is not None else None
    if execution.resuming:
        run.logger.info(
            "resuming step %r from cursor %r (continues execution %s)",
            step.name,
            cursor,
            execution.continues_from_id,
        )
    return IterableStep(
        name=step.name,
        cursor=cursor,
        resumed=execution.resuming,
        session=run.session,
        execution=execution,
        workflow=workflow,
        interruptible=run.interruptible,
        max_iterations=run.max_iterations
        if run.max_iterations is not None
        else step.max_iterations,
        max_runtime=step.max_runtime,
        max_cursor_size=run.settings.max_cursor_size_bytes,
    )
