"""``geneva.StepExecution``: predicates, metadata, cursors, row helpers (SPEC §4).

:func:`flask_geneva.models.factory.build_models` maps the columns. The row helpers
(``start``, ``mark_*``) and ``execute`` are defined here once and pass their
arguments to the engine operations registered in :mod:`flask_geneva.models.services`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Self

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.cursors import deserialize_cursor
from flask_geneva.core.cursors import dump_cursor
from flask_geneva.core.tagged_logging import execution_logger
from flask_geneva.db.column_types import InvalidJSON
from flask_geneva.db.column_types import as_dict
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.db.queries import models as model_queries
from flask_geneva.db.states import Outcome
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import parse_outcome
from flask_geneva.models.services import model_engine

if TYPE_CHECKING:
    from flask_geneva.dsl.definitions import StepDefinition
    from flask_geneva.dsl.ordering import StepCollection
    from flask_geneva.models.workflow import WorkflowMixin

__all__ = ["StepExecutionMixin"]


class StepExecutionMixin:
    """Behaviour of ``geneva.StepExecution``: predicates, metadata, error recording."""

    __geneva__: ClassVar[Any]

    if TYPE_CHECKING:
        # The columns build_models maps, for type checkers (see docs: Typing).
        id: orm.Mapped[Any]
        workflow_id: orm.Mapped[Any]
        step_name: orm.Mapped[str]
        state: orm.Mapped[str]
        outcome: orm.Mapped[str | None]
        scheduled_for: orm.Mapped[datetime]
        started_at: orm.Mapped[datetime | None]
        completed_at: orm.Mapped[datetime | None]
        failed_at: orm.Mapped[datetime | None]
        canceled_at: orm.Mapped[datetime | None]
        skipped_at: orm.Mapped[datetime | None]
        finished_at: orm.Mapped[datetime | None]
        error_class_name: orm.Mapped[str | None]
        error_message: orm.Mapped[str | None]
        error_backtrace: orm.Mapped[str | None]
        job_id: orm.Mapped[str | None]
        meta: orm.Mapped[Any]
        cursor: orm.Mapped[Any]
        continues_from_id: orm.Mapped[Any]
        worker_id: orm.Mapped[str | None]
        signal_id: orm.Mapped[Any]
        waiting_since: orm.Mapped[datetime | None]
        wait_deadline: orm.Mapped[datetime | None]
        created_at: orm.Mapped[datetime]
        updated_at: orm.Mapped[datetime]
        workflow: orm.Mapped[WorkflowMixin]

    @orm.validates("outcome")
    def _validate_outcome(self, key: str, value: Any) -> Any:
        """Refuse an outcome that is not NULL nor one of SPEC §4.2 (R-SE-04).

        ``step_name`` and ``scheduled_for`` are required by their NOT NULL columns.

        Raises:
            ValueError: ``value`` is not an outcome; lists the allowed ones.
        """
        # The engine assigns Outcome members: only other values need parsing.
        if value is not None and not isinstance(value, Outcome):
            parse_outcome(value)
        return value

    @classmethod
    def ready_to_execute(cls) -> sa.Select[Any]:
        """Select executions that are ``scheduled`` and due now (R-SE-46)."""
        return model_queries.ready_to_execute(cls, clock.now())

    def _object_session(self) -> orm.Session:
        session = orm.object_session(self)
        if session is None:
            session = self.__geneva__.session
        return session

    @property
    def is_scheduled(self) -> bool:
        return self.state == StepExecutionState.SCHEDULED

    @property
    def is_in_progress(self) -> bool:
        return self.state == StepExecutionState.IN_PROGRESS

    @property
    def is_completed(self) -> bool:
        return self.state == StepExecutionState.COMPLETED

    @property
    def is_failed(self) -> bool:
        return self.state == StepExecutionState.FAILED

    @property
    def is_canceled(self) -> bool:
        return self.state == StepExecutionState.CANCELED

    @property
    def is_skipped(self) -> bool:
        return self.state == StepExecutionState.SKIPPED

    @property
    def is_overdue(self) -> bool:
        """True if still scheduled and its ``scheduled_for`` has passed."""
        return self.is_scheduled and self.scheduled_for <= clock.now()

    @property
    def step_definition(self) -> StepDefinition | None:
        """The step of the workflow's class with this name, or None (R-SE-43)."""
        collection: StepCollection = type(self.workflow).step_collection()
        return collection.named(self.step_name)

    # -- metadata (R-SE-30..33) ----------------------------------------------------

    def _columns(self) -> Any:
        return optional_columns(self._object_session())

    @property
    def metadata_dict(self) -> dict[str, Any]:
        """The metadata as a dict (``{}`` when absent or unparsable, R-SE-32)."""
        if not self._columns().step_execution_metadata:
            return {}
        return as_dict(self.meta)

    def read_metadata(self, key: str) -> Any:
        """Return the metadata value under ``key`` or None."""
        return self.metadata_dict.get(str(key))

    def write_metadata(self, key: str, value: Any) -> None:
        """Set ``key`` in memory; no-op without the column (R-SE-33)."""
        if not self._columns().step_execution_metadata:
            return
        self.meta = {**as_dict(self.meta), str(key): value}

    @property
    def reattempt_reason(self) -> str | None:
        """Why this execution was reattempted, or None (R-SE-31)."""
        value = self.read_metadata("reattempt_reason")
        return value if isinstance(value, str) else None

    @property
    def exception_info(self) -> dict[str, Any] | None:
        """``{"class", "message", "backtrace"}`` of the recorded error, or None."""
        value = self.read_metadata("exception")
        return value if isinstance(value, dict) else None

    # -- chains (R-SE-40..42) -------------------------------------------------------

    @property
    def resuming(self) -> bool:
        """True iff the resumable columns exist and this continues another (R-SE-41)."""
        return bool(self._columns().resumable) and self.continues_from_id is not None

    @property
    def cursor_value(self) -> Any:
        """The deserialized cursor, or None (R-SE-42, R-CUR-04).

        None when the resumable columns are absent (R-DEG-02) or nothing is stored.
        Assigning serializes the value (R-CUR-01..03), checks its size against
        ``GENEVA_MAX_CURSOR_SIZE`` (R-CUR-10, R-CUR-11) and sets the ``cursor``
        column in memory (persisted with the next commit); without the resumable
        columns the assignment is a silent no-op. Each read returns a new object,
        so mutate it and assign it back to store a change.

        Raises:
            CursorSerializationError: On assignment, a value of an unsupported
                type (R-CUR-03).
            CursorTooLargeError: On assignment, the serialized cursor exceeds
                ``GENEVA_MAX_CURSOR_SIZE``; the stored cursor is unchanged.

        .. versionadded:: 0.6
        """
        if not self._columns().resumable:
            return None
        stored = self.cursor
        if stored is None or isinstance(stored, InvalidJSON):
            return None
        return deserialize_cursor(stored)

    @cursor_value.setter
    def cursor_value(self, value: Any) -> None:
        if not self._columns().resumable:
            return
        max_size = model_engine().max_cursor_size()
        self.cursor = (
            dump_cursor(value, max_size=max_size) if value is not None else None
        )

    @property
    def continues_from(self) -> Self | None:
        """The predecessor execution, or None (R-SE-40)."""
        if not self._columns().resumable or self.continues_from_id is None:
            return None
        return self._object_session().get(type(self), self.continues_from_id)

    @property
    def successor(self) -> Self | None:
        """The execution continuing this one, or None (R-SE-40)."""
        if not self._columns().resumable:
            return None
        return model_queries.successor_of(  # type: ignore[no-any-return]
            self._object_session(), type(self), self.id
        )

    @property
    def logger(self) -> logging.LoggerAdapter[Any]:
        """The workflow logger with this execution's tag (R-SE-45)."""
        active = self.__dict__.get("_geneva_logger")
        if active is not None:
            return active  # type: ignore[no-any-return]
        return execution_logger(self.workflow, self)

    # -- row helpers (R-SE-47); the work is in engine.step_execution_rows ----

    def start(self) -> bool:
        """Move this execution from ``scheduled`` to ``in_progress`` (R-SE-47).

        Locks the workflow and execution rows, sets ``started_at`` and commits
        (or joins a transaction the caller began explicitly). Runs no step.

        Returns:
            True if it was ``scheduled``; False, changing nothing, otherwise.

        Raises:
            InvalidStateError: The row no longer exists.
        """
        started: bool = model_engine().start_execution(self)
        return started

    def mark_completed(self, outcome: str = "success") -> None:
        """Mark this execution ``completed`` under the row lock and persist (R-SE-47).

        Sets ``completed_at`` and ``finished_at``; no transition validation.

        Raises:
            ValueError: ``outcome`` is not an outcome name; lists the allowed ones.
            InvalidStateError: The row no longer exists.
        """
        model_engine().mark_execution(self, StepExecutionState.COMPLETED, outcome)

    def mark_failed(self, error: BaseException, outcome: str = "failed") -> None:
        """Mark this execution ``failed`` and record ``error`` (R-SE-47, R-SE-20).

        Sets ``failed_at`` and ``finished_at``, the error columns and the
        ``"exception"`` metadata; no transition validation.

        Raises:
            ValueError: ``outcome`` is not an outcome name; lists the allowed ones.
            InvalidStateError: The row no longer exists.
        """
        model_engine().mark_execution(
            self, StepExecutionState.FAILED, outcome, error=error
        )

    def mark_skipped(self, outcome: str = "skipped") -> None:
        """Mark this execution ``skipped`` under the row lock and persist (R-SE-47).

        Sets ``skipped_at`` and ``finished_at``; no transition validation.

        Raises:
            ValueError: ``outcome`` is not an outcome name; lists the allowed ones.
            InvalidStateError: The row no longer exists.
        """
        model_engine().mark_execution(self, StepExecutionState.SKIPPED, outcome)

    def mark_canceled(self, outcome: str = "canceled") -> None:
        """Mark this execution ``canceled`` under the row lock and persist (R-SE-47).

        Sets ``canceled_at`` and ``finished_at``; no transition validation.

        Raises:
            ValueError: ``outcome`` is not an outcome name; lists the allowed ones.
            InvalidStateError: The row no longer exists.
        """
        model_engine().mark_execution(self, StepExecutionState.CANCELED, outcome)

    def execute(
        self, *, interruptible: bool = True, max_iterations: int | None = None
    ) -> None:
        """Run the executor on this execution (R-SE-44)."""
        model_engine().execute(
            self, interruptible=interruptible, max_iterations=max_iterations
        )

    def __repr__(self) -> str:
        return (
            f"<StepExecution id={self.id!r} workflow_id={self.workflow_id!r} "
            f"step={self.step_name!r} state={self.state!r} outcome={self.outcome!r}>"
        )
