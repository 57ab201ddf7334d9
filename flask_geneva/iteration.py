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

from flask_geneva.cursors import deserialize_cursor
from flask_geneva.cursors import dump_cursor
from flask_geneva.durations import coerce_duration
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import StepInterrupt
from flask_geneva.models import WorkflowState
from flask_geneva.runtime import current_state

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

    Process-wide; the Celery ``worker_shutting_down`` signal sets it too (R-INT-03).
    """
    _worker_exit.set()


def clear_worker_exit() -> None:
    """Forget a process-wide exit request (tests, or a worker that keeps running)."""
    _worker_exit.clear()


def worker_exit_requested() -> bool:
    """True once :func:`request_worker_exit` was called in this process."""
    return _worker_exit.is_set()


def request_exit() -> None:
    """Ask the resumable step running in this context to stop at its next checkpoint."""
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
        self.checkpoint()

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

        Raises:
            StepInterrupt: ``should_interrupt`` said so (R-INT-01).
            InvalidStateError: Called inside a user-opened nested transaction.
        """
        self.iterations += 1
        self._commit()
        reason = self.should_interrupt(self.iterations)
        if reason is not None:
            self.interrupt_reason = reason
            raise StepInterrupt(None, reason)

    def skip_to(self, value: Any, *, wait: Any = None) -> None:
        """Set the cursor and end this execution; a successor continues after ``wait``.

        Always interrupts, even when the executor is not interruptible (R-IT-05).

        Raises:
            StepInterrupt: Always.
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

    def _commit(self) -> None:
        session = self._session
        if session.in_nested_transaction():
            raise InvalidStateError(
                "checkpoint() cannot run inside a nested transaction (begin_nested); "
                "end the savepoint before the checkpoint"
            )
        # Keep the body's objects loaded: they hold exactly what was just written.
        previous = session.expire_on_commit
        session.expire_on_commit = False
        try:
            session.commit()
        finally:
            session.expire_on_commit = previous

    # -- interruption (R-INT-01) -----------------------------------------------------

    def should_interrupt(self, iterations: int) -> str | None:
        """Return why the step should stop now, or None (R-INT-01).

        Reasons in order: ``max_iterations``, ``max_runtime``, ``worker_shutdown``,
        ``workflow_paused``/``workflow_canceled``. Always None when not interruptible.
        """
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
        # A separate column query: never refresh the workflow the body uses (R-INT-05).
        state = self._session.scalar(
            sa.select(self._workflow_cls.state).where(
                self._workflow_cls.id == self._workflow_id
            )
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

        With a non-primary-key ``cursor_column`` the cursor is the pair
        ``[value, primary key]`` and rows are ordered by both, so rows sharing a
        value are never skipped or repeated.
        """
        for entity in self._keyset_rows(query, cursor_column, batch_size):
            yield entity
            self.set(self._cursor_for(entity, cursor_column))

    def iterate_over_batches(
        self, query: sa.Select[Any], *, batch_size: int, cursor_column: str = "id"
    ) -> Iterator[Batch]:
        """Yield a :class:`Batch` per ``batch_size`` rows; checkpoint each (R-IT-23)."""
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
                self._session.scalars(statement.order_by(*order).limit(batch_size))
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
    return IterableStep(
        name=step.name,
        cursor=deserialize_cursor(stored) if stored is not None else None,
        resumed=execution.resuming,
        session=run.session,
        execution=execution,
        workflow=workflow,
        interruptible=run.interruptible,
        max_iterations=run.max_iterations
        if run.max_iterations is not None
        else step.max_iterations,
        max_runtime=step.max_runtime,
        max_cursor_size=current_state().config.max_cursor_size,
    )
