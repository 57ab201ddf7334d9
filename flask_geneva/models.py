"""The two tables, their column types, state enums and the model classes (SPEC §2-§4).

:func:`build_models` combines the behaviour mixins here with the host's
``db.Model`` into ``Workflow`` and ``StepExecution`` (``geneva.Workflow`` /
``geneva.StepExecution``). Workflow classes are single-table-inheritance
subclasses of ``geneva.Workflow`` (R-STI-01); a row whose ``type`` matches no
class loads as the base class (R-STI-02).

Optional columns (workflows ``metadata``; executions ``metadata``, ``error_class_name``,
``cursor``, ``continues_from_id``) are mapped *deferred*: no SQL statement mentions
them unless :mod:`flask_geneva.store` has detected that they exist (R-DM-30..35).
"""

from __future__ import annotations

import enum
import json
import logging
import uuid
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextlib import nullcontext
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import NoReturn
from typing import Self

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

from flask_geneva import clock
from flask_geneva.dsl.collect import WorkflowDefinitions
from flask_geneva.dsl.collect import collect_definitions
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.job_options import merge_job_options
from flask_geneva.job_options import validate_job_options

if TYPE_CHECKING:
    from flask_geneva.dsl.definitions import StepDefinition
    from flask_geneva.dsl.ordering import StepCollection

__all__ = [
    "JSONDocument",
    "Outcome",
    "StepExecutionMixin",
    "StepExecutionState",
    "UTCDateTime",
    "WorkflowMixin",
    "WorkflowState",
    "build_models",
]

WORKFLOWS_TABLE = "geneva_drive_workflows"
STEP_EXECUTIONS_TABLE = "geneva_drive_step_executions"


class WorkflowState(enum.StrEnum):
    """Workflow states (SPEC §3.1), stored exactly as spelled."""

    READY = "ready"
    PERFORMING = "performing"
    PAUSED = "paused"
    FINISHED = "finished"
    CANCELED = "canceled"


TERMINAL_WORKFLOW_STATES = (WorkflowState.FINISHED, WorkflowState.CANCELED)


class StepExecutionState(enum.StrEnum):
    """Step execution states (SPEC §4.1), stored exactly as spelled."""

    SCHEDULED = "scheduled"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    SKIPPED = "skipped"


ACTIVE_EXECUTION_STATES = (StepExecutionState.SCHEDULED, StepExecutionState.IN_PROGRESS)


class Outcome(enum.StrEnum):
    """Step execution outcomes (SPEC §4.2)."""

    SUCCESS = "success"
    CONTINUED = "continued"
    REATTEMPTED = "reattempted"
    SKIPPED = "skipped"
    CANCELED = "canceled"
    FAILED = "failed"
    RECOVERED = "recovered"
    WORKFLOW_PAUSED = "workflow_paused"


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A ``DATETIME(6)`` column that stores naive UTC and returns aware UTC.

    Naive datetimes are rejected on write (``ValueError``): every timestamp the
    library handles is aware (R-DM-23). SQLite and MariaDB would otherwise hand back
    naive values, and SQLite string comparison needs one uniform format.
    """

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime())

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {value!r}")
        return clock.ensure_aware(value).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class InvalidJSON(str):
    """Stored JSON text that does not parse; readers treat it as empty (R-SE-32)."""

    __slots__ = ()


class _SQLiteJSONText(sa.Text):
    """Text that SQLite DDL names ``JSON``; values pass through as strings.

    Declaring the column ``JSON`` keeps the schema the install migration writes
    (and ``flask db check`` clean), while decoding stays in
    :class:`JSONDocument`, which turns unparsable text into :class:`InvalidJSON`
    instead of raising while a row loads (R-ADM-31).
    """

    __visit_name__ = "JSON"


class JSONDocument(sa.types.TypeDecorator[Any]):
    """JSON stored as ``jsonb`` on PostgreSQL, ``LONGTEXT`` on MySQL/MariaDB, else TEXT.

    On text columns the value is encoded with :func:`json.dumps` in Python (BTR-14);
    text that does not parse comes back as :class:`InvalidJSON`. Python ``None`` is
    stored as SQL NULL.

    Args:
        sqlite_type_name: ``"TEXT"`` or ``"JSON"``: the column's declared type on
            SQLite. Either way the value is stored as JSON text and decoded here.
    """

    impl = sa.Text
    cache_ok = True

    def __init__(self, *, sqlite_type_name: str = "TEXT") -> None:
        super().__init__()
        self.sqlite_type_name = sqlite_type_name

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.JSONB(none_as_null=True))
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.LONGTEXT())
        if dialect.name == "sqlite" and self.sqlite_type_name == "JSON":
            return dialect.type_descriptor(_SQLiteJSONText())
        return dialect.type_descriptor(sa.Text())

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return json.dumps(value, separators=(",", ":"))

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None or not isinstance(value, str | bytes):
            return value
        if dialect.name == "postgresql":
            return value
        try:
            return json.loads(value)
        except ValueError:
            return InvalidJSON(value)


def _key_type(key_type: str) -> sa.types.TypeEngine[Any]:
    if key_type == "bigint":
        # SQLite autoincrements only INTEGER PRIMARY KEY columns.
        return sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    if key_type == "uuid":
        return sa.Uuid()
    raise StepConfigurationError(
        f"key_type must be 'bigint' or 'uuid', got {key_type!r}"
    )


def _as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


# Attribute names of the base Workflow that a step must not shadow (R-DEF-18).
_RESERVED_EXTRA = frozenset(
    {
        "id",
        "type",
        "hero",
        "hero_type",
        "hero_id",
        "state",
        "meta",
        "metadata",
        "query",
        "registry",
        "steps",
        "logger",
    }
)


class WorkflowMixin:
    """Behaviour of ``geneva.Workflow``: DSL collection, hero, metadata, flow control.

    Subclass ``geneva.Workflow`` (not this mixin) to declare a workflow. Class
    attributes read by the engine: ``__geneva_type__`` (stable STI identity,
    default ``__qualname__``), ``may_proceed_without_hero`` (R-HERO-05),
    ``default_job_options``, ``cancel_conditions``, ``exception_policies``
    (SPEC §15.2).
    """

    __geneva__: ClassVar[Any]
    __geneva_definitions__: ClassVar[WorkflowDefinitions]
    __geneva_type__: ClassVar[str]
    may_proceed_without_hero: ClassVar[bool] = False

    if TYPE_CHECKING:
        # The columns build_models maps, for type checkers (see docs: Typing).
        __mapper_args__: ClassVar[dict[str, Any]]
        id: orm.Mapped[Any]
        type: orm.Mapped[str]
        hero_type: orm.Mapped[str | None]
        hero_id: orm.Mapped[Any]
        state: orm.Mapped[str]
        current_step_name: orm.Mapped[str | None]
        next_step_name: orm.Mapped[str | None]
        allow_multiple: orm.Mapped[bool]
        meta: orm.Mapped[Any]
        started_at: orm.Mapped[datetime | None]
        transitioned_at: orm.Mapped[datetime | None]
        created_at: orm.Mapped[datetime]
        updated_at: orm.Mapped[datetime]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if cls.__dict__.get("_geneva_is_base"):
            super().__init_subclass__(**kwargs)
            return
        identity = cls.__dict__.get("__geneva_type__") or cls.__qualname__
        if not isinstance(identity, str) or not identity:
            raise StepConfigurationError(
                f"__geneva_type__ of {cls.__qualname__} must be a non-empty str, "
                f"got {identity!r}"
            )
        geneva = cls.__geneva__
        existing = geneva.workflow_classes.get(identity)
        if existing is not None:
            raise StepConfigurationError(
                f"workflow type {identity!r} of {cls.__module__}.{cls.__qualname__} is "
                f"already used by {existing.__module__}.{existing.__qualname__}; set a "
                "distinct __geneva_type__ on one of them (R-STI-01)"
            )
        cls.__geneva_type__ = identity
        parent = None
        for base in cls.__mro__[1:]:
            parent = base.__dict__.get("__geneva_definitions__")
            if parent is not None:
                break
        cls.__geneva_definitions__ = collect_definitions(
            cls,
            parent=parent,
            type_name=identity,
            reserved_names=geneva.reserved_names,
        )
        cls.__mapper_args__ = {"polymorphic_identity": identity}
        geneva.workflow_classes[identity] = cls
        super().__init_subclass__(**kwargs)

    # -- class-level API -------------------------------------------------------------

    @classmethod
    def _session(cls) -> orm.Session:
        session: orm.Session = cls.__geneva__.session
        return session

    @classmethod
    def step_collection(cls) -> StepCollection:
        """Return the ordered step collection of this class (R-WF-20)."""
        definitions: WorkflowDefinitions | None = cls.__dict__.get(
            "__geneva_definitions__"
        )
        if definitions is None:
            from flask_geneva.dsl.ordering import StepCollection

            return StepCollection(())
        return definitions.steps

    @classmethod
    def create(
        cls,
        *,
        hero: Any = None,
        allow_multiple: bool = False,
        step_job_options: Mapping[str, Any] | None = None,
        commit: bool = True,
    ) -> Self:
        """Insert a workflow for ``hero`` and schedule its first step (R-WF-10..15).

        Args:
            hero: Any mapped model instance with a primary key, or None.
            allow_multiple: Exempt this row from the one-ongoing-per-hero rule
                (R-UNQ-04).
            step_job_options: Per-instance job options (``queue``, ``priority``,
                ``wait``, ``wait_until``), validated (R-WF-15).
            commit: Commit the session at the end. With False the caller commits and
                task publication waits for that commit (R-WF-14, R-TXN-02). Inside
                a transaction the caller began explicitly (``with
                db.session.begin():`` or ``begin_nested()``) nothing is committed
                either way: the insert joins it and publishes after its commit.

        Returns:
            The new workflow, state ``ready`` (or ``finished`` without steps, R-WF-12).

        Raises:
            DuplicateWorkflowError: An ongoing workflow of this class exists for the
                hero (R-UNQ-02/03); no row is left and nothing is published.
            StepConfigurationError: ``step_job_options`` is invalid.
            sqlalchemy.exc.DBAPIError: A deadlock or serialization failure, raised
                as itself: retried first when the transaction was this call's own.
        """
        from flask_geneva import scheduling

        workflow: Self = scheduling.create_workflow(
            cls._session(),
            cls,
            hero=hero,
            allow_multiple=allow_multiple,
            step_job_options=step_job_options,
            commit=commit,
        )
        return workflow

    @classmethod
    def create_unless_ongoing(
        cls, *, hero: Any = None, **kwargs: Any
    ) -> tuple[Self, bool]:
        """Create a workflow, or return the ongoing one for ``hero`` (SPEC §15.5).

        Returns:
            ``(workflow, True)`` when created, ``(existing, False)`` when an ongoing
            workflow of this class already exists for the hero.
        """
        from flask_geneva.exceptions import DuplicateWorkflowError

        try:
            return cls.create(hero=hero, **kwargs), True
        except DuplicateWorkflowError:
            session = cls._session()
            existing = session.scalars(
                cls.ongoing().where(*cls._hero_criteria(hero)).order_by(cls.id)
            ).first()
            if existing is None:
                raise
            return existing, False

    @classmethod
    def get(cls, workflow_id: Any) -> Self | None:
        """Return the workflow with this id (polymorphic, R-STI-02), or None."""
        return cls._session().get(cls, workflow_id)

    @classmethod
    def ongoing(cls) -> sa.Select[Any]:
        """Return a select of this class's workflows that are not finished/canceled."""
        return sa.select(cls).where(cls.state.not_in(TERMINAL_WORKFLOW_STATES))

    @classmethod
    def with_state(cls, state: str) -> sa.Select[Any]:
        """Return a select of this class's workflows in ``state`` (R-WF-24).

        Raises:
            ValueError: ``state`` is not a workflow state; lists the allowed ones.
        """
        return sa.select(cls).where(cls.state == _workflow_state(state))

    @classmethod
    def for_hero(cls, hero: Any) -> sa.Select[Any]:
        """Return a select of this class's workflows for ``hero`` (R-HERO-04)."""
        return sa.select(cls).where(*cls._hero_criteria(hero))

    @classmethod
    def _hero_criteria(cls, hero: Any) -> list[Any]:
        hero_type, hero_id = cls.__geneva__.hero_reference(hero)
        return [
            cls.hero_type.is_(None)
            if hero_type is None
            else cls.hero_type == hero_type,
            cls.hero_id.is_(None) if hero_id is None else cls.hero_id == hero_id,
        ]

    # -- instance API ----------------------------------------------------------------

    @property
    def steps(self) -> StepCollection:
        """The class's ordered step collection (R-WF-20)."""
        return type(self).step_collection()

    @property
    def hero(self) -> Any:
        """The hero row, or None when unset or deleted (R-HERO-01/02).

        Raises:
            HeroTypeNotFoundError: ``hero_type`` names no mapped class (R-HERO-03).
        """
        return self.__geneva__.load_hero(self.hero_type, self.hero_id)

    @hero.setter
    def hero(self, value: Any) -> None:
        self.hero_type, self.hero_id = self.__geneva__.hero_reference(value)

    @property
    def is_ready(self) -> bool:
        return self.state == WorkflowState.READY

    @property
    def is_performing(self) -> bool:
        return self.state == WorkflowState.PERFORMING

    @property
    def is_paused(self) -> bool:
        return self.state == WorkflowState.PAUSED

    @property
    def is_finished(self) -> bool:
        return self.state == WorkflowState.FINISHED

    @property
    def is_canceled(self) -> bool:
        return self.state == WorkflowState.CANCELED

    @property
    def is_ongoing(self) -> bool:
        """True unless finished or canceled (R-WF-06)."""
        return self.state not in TERMINAL_WORKFLOW_STATES

    @property
    def current_execution(self) -> StepExecutionMixin | None:
        """The execution in ``scheduled``/``in_progress`` state, or None (R-WF-21)."""
        execution_cls = self.__geneva__.StepExecution
        return (
            self._object_session()
            .scalars(
                sa.select(execution_cls)
                .where(execution_cls.workflow_id == self.id)
                .where(execution_cls.state.in_(ACTIVE_EXECUTION_STATES))
                .order_by(execution_cls.created_at.desc(), execution_cls.id.desc())
            )
            .first()
        )

    @property
    def execution_history(self) -> list[StepExecutionMixin]:
        """All executions ordered by ``created_at``, ties by id (R-WF-22)."""
        execution_cls = self.__geneva__.StepExecution
        return list(
            self._object_session().scalars(
                sa.select(execution_cls)
                .where(execution_cls.workflow_id == self.id)
                .order_by(execution_cls.created_at, execution_cls.id)
            )
        )

    @property
    def previous_step_name(self) -> str | None:
        """Name of the step structurally before the current/next one (R-WF-23)."""
        reference = self.current_step_name or self.next_step_name
        if reference:
            previous = self.steps.previous_before(reference)
            return previous.name if previous is not None else None
        if self.state == WorkflowState.FINISHED:
            last = self.steps.last
            return last.name if last is not None else None
        return None

    def _object_session(self) -> orm.Session:
        return orm.object_session(self) or type(self)._session()

    # -- metadata (R-WF-40..44) --------------------------------------------------------

    def _has_metadata_column(self) -> bool:
        from flask_geneva import store

        return store.optional_columns(self._object_session()).workflow_metadata

    def read_metadata(self, key: str) -> Any:
        """Return the JSON value stored under ``key``, or None (R-WF-40)."""
        if not self._has_metadata_column():
            return None
        return _as_dict(self.meta).get(str(key))

    def write_metadata(self, key: str, value: Any) -> None:
        """Merge ``key: value`` into the metadata in memory; no-op without the column.

        ``value`` must be JSON-serialisable. Persisted with the next commit (R-WF-41).
        """
        if not self._has_metadata_column():
            return
        self.meta = {**_as_dict(self.meta), str(key): value}

    @property
    def step_job_options(self) -> dict[str, Any]:
        """Per-instance job options stored in metadata, or ``{}`` (R-WF-42)."""
        stored = self.read_metadata("step_job_options")
        if not isinstance(stored, Mapping):
            return {}
        return validate_job_options(
            _decode_job_options(stored),
            context=f"{self.__geneva_type__}.step_job_options",
        )

    @step_job_options.setter
    def step_job_options(self, value: Mapping[str, Any] | None) -> None:
        validated = validate_job_options(
            value or {}, context=f"{self.__geneva_type__}.step_job_options="
        )
        self.write_metadata(
            "step_job_options", _encode_job_options(validated) if validated else None
        )

    def job_options_for(self, step: StepDefinition) -> dict[str, Any]:
        """Merged job options for ``step`` (class < instance < step, R-JOB-02)."""
        definitions = getattr(type(self), "__geneva_definitions__", None)
        return merge_job_options(
            definitions.default_job_options if definitions is not None else None,
            self.step_job_options,
            step.job_options,
        )

    # -- logging (R-LOG) --------------------------------------------------------------

    @property
    def logger(self) -> logging.LoggerAdapter[Any]:
        """The tagged logger; during a step the execution-tagged one (R-WF-30)."""
        active = self.__dict__.get("_geneva_logger")
        if active is not None:
            return active  # type: ignore[no-any-return]
        from flask_geneva.tagged_logging import workflow_logger

        return workflow_logger(self)

    # -- hooks (R-EXE-60/61) -----------------------------------------------------------

    def before_step_execution(self, execution: Any) -> None:
        """Run before each step body; override in subclasses (R-EXE-33)."""

    def after_step_execution(self, execution: Any) -> None:
        """Run after each step body, also after flow control/errors (R-EXE-36)."""

    def around_step_execution(self, execution: Any) -> AbstractContextManager[Any]:
        """Return a context manager wrapping only the body (R-EXE-34, R-EXE-61)."""
        return nullcontext()

    # -- state changes -------------------------------------------------------------

    def transition_to(self, state: str, **attributes: Any) -> None:
        """Lock the row, set ``state`` and ``attributes``, and persist (R-WF-05).

        No transition validation is done. Entering finished/canceled/paused sets
        ``transitioned_at`` (R-WF-03). Commits the session.
        """
        from flask_geneva import store
        from flask_geneva import transitions

        session = self._object_session()
        store.lock_workflow(session, self.id)
        transitions.apply(
            transitions.TRANSITION_TO,
            clock.now(),
            workflow=self,
            to=_workflow_state(state),
            **attributes,
        )
        session.commit()

    def schedule_next_step(
        self, *, wait: timedelta | int | float | None = None
    ) -> StepExecutionMixin | None:
        """Schedule the step after the current one, or finish (R-SCH-06). Commits.

        Raises:
            InvalidStateError: An execution is still in progress (R-EXT-26).
        """
        from flask_geneva import scheduling

        session = self._object_session()
        self._lock_unless_running("schedule the next step of")
        execution: StepExecutionMixin | None = scheduling.schedule_next_step(
            session, self, wait=wait
        )
        session.commit()
        return execution

    def reschedule_current_step(
        self, *, wait: timedelta | int | float | None = None
    ) -> StepExecutionMixin:
        """Create a new execution of the current step, exactly ``wait`` (R-SCH-07).

        Raises:
            InvalidStateError: An execution is still in progress (R-EXT-26).
            StepNotDefinedError: The current/next step has no definition.
        """
        from flask_geneva import scheduling

        session = self._object_session()
        self._lock_unless_running("reschedule the current step of")
        execution: StepExecutionMixin = scheduling.reschedule_current_step(
            session, self, wait=wait
        )
        session.commit()
        return execution

    def _lock_unless_running(self, action: str) -> None:
        # Lock the row, then refuse while an execution runs: a new one would
        # violate the one-active-execution index (R-EXT-26, R-DM-11).
        from flask_geneva import flow_control
        from flask_geneva import store

        session = self._object_session()
        store.lock_workflow(session, self.id)
        try:
            flow_control.refuse_while_running(session, self, action)
        except BaseException:
            session.rollback()
            raise

    # -- flow control (SPEC §8) ------------------------------------------------------

    def cancel(
        self, *, actor: str | None = None, via: str = "api", commit: bool = True
    ) -> None:
        """Cancel the workflow: in a step raise ``CancelSignal``, else R-EXT-03.

        Raises:
            InvalidStateError: Outside a step, the state is not ready, paused or
                performing; message "Cannot cancel a <state> workflow".
        """
        from flask_geneva import flow_control

        flow_control.cancel(self, actor=actor, via=via, commit=commit)

    def pause(
        self, *, actor: str | None = None, via: str = "api", commit: bool = True
    ) -> None:
        """Pause the workflow: in a step raise ``PauseSignal``, else R-EXT-01/02.

        Raises:
            InvalidStateError: Outside a step, the state is not ready or performing.
        """
        from flask_geneva import flow_control

        flow_control.pause(self, actor=actor, via=via, commit=commit)

    def skip(
        self,
        *,
        actor: str | None = None,
        via: str = "api",
        commit: bool = True,
        expected_step: str | None = None,
    ) -> None:
        """Skip the current step: in a step raise ``SkipSignal``, else R-EXT-04.

        Args:
            expected_step: Skip only if the current step is still this step name
                (a guard against skipping twice from a stale page or a double
                click); None skips whatever step is current (R-EXT-05).

        Raises:
            InvalidStateError: Outside a step, the state is not ready or paused, or
                the current step is not ``expected_step``.
        """
        from flask_geneva import flow_control

        flow_control.skip(
            self, actor=actor, via=via, commit=commit, expected_step=expected_step
        )

    def resume(
        self,
        *,
        rewind: bool = False,
        actor: str | None = None,
        via: str = "api",
        commit: bool = True,
    ) -> StepExecutionMixin | None:
        """Resume a paused workflow atomically (R-EXT-20..27).

        Returns:
            The step execution that will run next (reused, successor or new),
            or None when the last step completed while the workflow was paused
            and resume finished it (R-EXE-42).

        Raises:
            InvalidStateError: The workflow is not paused (checked again under the
                row lock); message "Cannot resume a <state> workflow".
            StepNotDefinedError: ``next_step_name`` has no definition any more; the
                workflow stays paused (R-EXT-24).
        """
        from flask_geneva import flow_control

        resumed: StepExecutionMixin | None = flow_control.resume(
            self, rewind=rewind, actor=actor, via=via, commit=commit
        )
        return resumed

    def recover(
        self,
        execution_id: Any = None,
        *,
        force: bool = False,
        actor: str | None = None,
        via: str = "api",
        commit: bool = True,
    ) -> StepExecutionMixin:
        """Recover the in-progress execution now, as housekeeping would (R-HK-28).

        For an execution whose worker died: applies R-HK-23..27 without waiting
        for ``GENEVA_STUCK_IN_PROGRESS_THRESHOLD``; see
        :func:`flask_geneva.operator_recovery.recover`.

        Args:
            execution_id: The execution expected to be in progress, or None.
            force: Also recover an execution younger than ``GENEVA_RECOVER_GRACE``.

        Returns:
            The recovered step execution.

        Raises:
            InvalidStateError: Nothing is in progress (or not ``execution_id``),
                or without ``force`` the execution is younger than the grace.

        .. versionadded:: 0.2
        """
        from flask_geneva import operator_recovery

        recovered: StepExecutionMixin = operator_recovery.recover(
            self,
            execution_id=execution_id,
            force=force,
            actor=actor,
            via=via,
            commit=commit,
        )
        return recovered

    def reattempt(
        self, *, wait: timedelta | int | float | None = None, rewind: bool = False
    ) -> NoReturn:
        """End the running step and run it again after ``wait`` (R-FC-13).

        Raises:
            ReattemptSignal: Inside a step (caught by the executor).
            InvalidStateError: Outside a step (R-EXT-06).
            ValueError/TypeError: ``wait`` is not a non-negative duration.
        """
        from flask_geneva import flow_control

        flow_control.reattempt(self, wait=wait, rewind=rewind)

    def finish(self) -> NoReturn:
        """Finish the workflow from inside a step (R-FC-14).

        Raises:
            FinishSignal: Inside a step. InvalidStateError: outside (R-EXT-06).
        """
        from flask_geneva import flow_control

        flow_control.finish(self)

    def suspend(self, *, wait: timedelta | int | float | None = None) -> NoReturn:
        """Suspend a resumable step; a successor continues after ``wait`` (R-FC-15).

        Raises:
            SuspendSignal: Inside a resumable step.
            InvalidStateError: Outside a step, or inside a regular step (the message
                mentions ``resumable_step``).
        """
        from flask_geneva import flow_control

        flow_control.suspend(self, wait=wait)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} id={self.id!r} state={self.state!r} "
            f"hero={self.hero_type}#{self.hero_id}>"
        )


def _encode_job_options(options: Mapping[str, Any]) -> dict[str, Any]:
    encoded: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, timedelta):
            encoded[key] = value.total_seconds()
        elif isinstance(value, datetime):
            encoded[key] = value.timestamp()
        else:
            encoded[key] = value
    return encoded


def _decode_job_options(stored: Mapping[str, Any]) -> dict[str, Any]:
    # wait is stored as seconds and wait_until as epoch seconds; validation turns
    # them back into timedelta / aware datetime.
    return dict(stored)


def _workflow_state(state: Any) -> WorkflowState:
    try:
        return WorkflowState(str(state))
    except ValueError:
        allowed = ", ".join(s.value for s in WorkflowState)
        raise ValueError(
            f"unknown workflow state {state!r}; allowed: {allowed}"
        ) from None


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
        created_at: orm.Mapped[datetime]
        updated_at: orm.Mapped[datetime]
        workflow: orm.Mapped[WorkflowMixin]

    @classmethod
    def ready_to_execute(cls) -> sa.Select[Any]:
        """Select executions that are ``scheduled`` and due now (R-SE-46)."""
        return (
            sa.select(cls)
            .where(cls.state == StepExecutionState.SCHEDULED)
            .where(cls.scheduled_for <= clock.now())
        )

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
        from flask_geneva import store

        return store.optional_columns(self._object_session())

    @property
    def metadata_dict(self) -> dict[str, Any]:
        """The metadata as a dict (``{}`` when absent or unparsable, R-SE-32)."""
        if not self._columns().step_execution_metadata:
            return {}
        return _as_dict(self.meta)

    def read_metadata(self, key: str) -> Any:
        """Return the metadata value under ``key`` or None."""
        return self.metadata_dict.get(str(key))

    def write_metadata(self, key: str, value: Any) -> None:
        """Set ``key`` in memory; no-op without the column (R-SE-33)."""
        if not self._columns().step_execution_metadata:
            return
        self.meta = {**_as_dict(self.meta), str(key): value}

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
        from flask_geneva.cursors import deserialize_cursor

        return deserialize_cursor(stored)

    @cursor_value.setter
    def cursor_value(self, value: Any) -> None:
        if not self._columns().resumable:
            return
        from flask_geneva.cursors import dump_cursor
        from flask_geneva.runtime import current_state

        max_size = current_state().config.max_cursor_size
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
        cls = type(self)
        return (
            self._object_session()
            .scalars(
                sa.select(cls).where(cls.continues_from_id == self.id).order_by(cls.id)
            )
            .first()
        )

    @property
    def logger(self) -> logging.LoggerAdapter[Any]:
        """The workflow logger with this execution's tag (R-SE-45)."""
        active = self.__dict__.get("_geneva_logger")
        if active is not None:
            return active  # type: ignore[no-any-return]
        from flask_geneva.tagged_logging import execution_logger

        return execution_logger(self.workflow, self)

    # -- row helpers (R-SE-47); the work is in flask_geneva.step_execution_rows ----

    def start(self) -> bool:
        """Move this execution from ``scheduled`` to ``in_progress`` (R-SE-47).

        Locks the workflow and execution rows, sets ``started_at`` and commits
        (or joins a transaction the caller began explicitly). Runs no step.

        Returns:
            True if it was ``scheduled``; False, changing nothing, otherwise.

        Raises:
            InvalidStateError: The row no longer exists.
        """
        from flask_geneva import step_execution_rows

        return step_execution_rows.start(self)

    def mark_completed(self, outcome: str = "success") -> None:
        """Mark this execution ``completed`` under the row lock and persist (R-SE-47).

        Sets ``completed_at`` and ``finished_at``; no transition validation.

        Raises:
            ValueError: ``outcome`` is not an outcome name; lists the allowed ones.
            InvalidStateError: The row no longer exists.
        """
        from flask_geneva import step_execution_rows

        step_execution_rows.mark(self, StepExecutionState.COMPLETED, outcome)

    def mark_failed(self, error: BaseException, outcome: str = "failed") -> None:
        """Mark this execution ``failed`` and record ``error`` (R-SE-47, R-SE-20).

        Sets ``failed_at`` and ``finished_at``, the error columns and the
        ``"exception"`` metadata; no transition validation.

        Raises:
            ValueError: ``outcome`` is not an outcome name; lists the allowed ones.
            InvalidStateError: The row no longer exists.
        """
        from flask_geneva import step_execution_rows

        step_execution_rows.mark(self, StepExecutionState.FAILED, outcome, error=error)

    def mark_skipped(self, outcome: str = "skipped") -> None:
        """Mark this execution ``skipped`` under the row lock and persist (R-SE-47).

        Sets ``skipped_at`` and ``finished_at``; no transition validation.

        Raises:
            ValueError: ``outcome`` is not an outcome name; lists the allowed ones.
            InvalidStateError: The row no longer exists.
        """
        from flask_geneva import step_execution_rows

        step_execution_rows.mark(self, StepExecutionState.SKIPPED, outcome)

    def mark_canceled(self, outcome: str = "canceled") -> None:
        """Mark this execution ``canceled`` under the row lock and persist (R-SE-47).

        Sets ``canceled_at`` and ``finished_at``; no transition validation.

        Raises:
            ValueError: ``outcome`` is not an outcome name; lists the allowed ones.
            InvalidStateError: The row no longer exists.
        """
        from flask_geneva import step_execution_rows

        step_execution_rows.mark(self, StepExecutionState.CANCELED, outcome)

    def execute(
        self, *, interruptible: bool = True, max_iterations: int | None = None
    ) -> None:
        """Run the executor on this execution (R-SE-44)."""
        from flask_geneva.executor import Executor

        Executor.execute(
            self, interruptible=interruptible, max_iterations=max_iterations
        )

    def __repr__(self) -> str:
        return (
            f"<StepExecution id={self.id!r} workflow_id={self.workflow_id!r} "
            f"step={self.step_name!r} state={self.state!r} outcome={self.outcome!r}>"
        )


class _FallbackPolymorphicMap(dict[Any, Any]):
    """Polymorphic map loading unknown ``type`` values as the base class (R-STI-02)."""

    def __init__(self, base_mapper: orm.Mapper[Any]) -> None:
        super().__init__()
        self.base_mapper = base_mapper

    def __missing__(self, key: Any) -> orm.Mapper[Any]:
        return self.base_mapper


def build_models(
    db: Any, geneva: Any, *, key_type: str = "bigint"
) -> tuple[type[WorkflowMixin], type[StepExecutionMixin]]:
    """Create the ``Workflow`` and ``StepExecution`` models on ``db.Model``.

    Args:
        db: The host's ``flask_sqlalchemy.SQLAlchemy`` instance.
        geneva: The :class:`~flask_geneva.Geneva` extension the models belong to.
        key_type: ``"bigint"`` (default) or ``"uuid"``: type of primary keys and of
            ``hero_id``/``workflow_id``/``continues_from_id`` (R-DM-20..22). Must match
            the schema written by ``flask geneva install``.

    Returns:
        ``(Workflow, StepExecution)``.
    """
    key = _key_type(key_type)
    # UUID keys are generated client-side (R-DM-21); bigint keys autoincrement.
    id_default = uuid.uuid4 if key_type == "uuid" else None
    model_base = db.Model
    now = clock.now

    class Workflow(WorkflowMixin, model_base):  # type: ignore[misc, valid-type]
        """A durable workflow row; subclass it to declare a workflow (SPEC §3)."""

        _geneva_is_base = True
        __geneva__ = geneva
        __tablename__ = WORKFLOWS_TABLE

        id: orm.Mapped[Any] = orm.mapped_column(
            key, primary_key=True, default=id_default
        )
        type: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False)
        hero_type: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        hero_id: orm.Mapped[Any] = orm.mapped_column(key, nullable=True)
        state: orm.Mapped[str] = orm.mapped_column(
            sa.String(255),
            nullable=False,
            default=WorkflowState.READY.value,
            server_default=WorkflowState.READY.value,
        )
        current_step_name: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        next_step_name: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        allow_multiple: orm.Mapped[bool] = orm.mapped_column(
            sa.Boolean, nullable=False, default=False, server_default=sa.false()
        )
        meta: orm.Mapped[Any] = orm.mapped_column(
            "metadata", JSONDocument().evaluates_none(), nullable=True, deferred=True
        )
        started_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        transitioned_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        created_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now()
        )
        updated_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now(), onupdate=lambda: now()
        )

        __mapper_args__ = {"polymorphic_on": "type"}
        __table_args__ = (
            sa.Index("index_geneva_drive_workflows_on_type", "type"),
            sa.Index("index_geneva_drive_workflows_on_state", "state"),
            sa.Index(
                "index_geneva_drive_workflows_on_hero_type_and_hero_id",
                "hero_type",
                "hero_id",
            ),
            sa.Index(
                "index_geneva_drive_workflows_unique_ongoing",
                "type",
                "hero_type",
                "hero_id",
                unique=True,
                postgresql_where=sa.text(
                    "state NOT IN ('finished','canceled') AND allow_multiple = false"
                ),
                sqlite_where=sa.text(
                    "state NOT IN ('finished','canceled') AND allow_multiple = 0"
                ),
                info={"geneva_dialect_specific": True},
            ).ddl_if(dialect=("postgresql", "sqlite")),  # type: ignore[arg-type]  # documented: tuple of names
        )

    # Unknown STI identities load as the base class (R-STI-02, BTR-18). Subclass
    # mappers share this map object, so it must be replaced before any subclass.
    mapper = sa.inspect(Workflow)
    fallback = _FallbackPolymorphicMap(mapper)
    fallback.update(mapper.polymorphic_map)
    mapper.polymorphic_map = fallback
    # Such a row keeps its stored type when the executor or an operator updates it
    # (R-STI-03); SQLAlchemy would warn on flushing an identity it does not know.
    # Subclass mappers copy this validator, so install it before any subclass.
    validate_identity = mapper._validate_polymorphic_identity

    def _validate_identity(
        owner: orm.Mapper[Any], state: orm.InstanceState[Any], dict_: Any
    ) -> None:
        if state.manager.mapper is mapper:
            return
        if validate_identity is not None:
            validate_identity(owner, state, dict_)

    mapper._validate_polymorphic_identity = _validate_identity

    class StepExecution(StepExecutionMixin, model_base):  # type: ignore[misc, valid-type]
        """One attempt at one step: idempotency key and audit record (SPEC §4)."""

        __geneva__ = geneva
        __tablename__ = STEP_EXECUTIONS_TABLE

        id: orm.Mapped[Any] = orm.mapped_column(
            key, primary_key=True, default=id_default
        )
        workflow_id: orm.Mapped[Any] = orm.mapped_column(
            key,
            sa.ForeignKey(f"{WORKFLOWS_TABLE}.id", ondelete="CASCADE"),
            nullable=False,
        )
        step_name: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False)
        state: orm.Mapped[str] = orm.mapped_column(
            sa.String(255),
            nullable=False,
            default=StepExecutionState.SCHEDULED.value,
            server_default=StepExecutionState.SCHEDULED.value,
        )
        outcome: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        scheduled_for: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False
        )
        started_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        completed_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        failed_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        canceled_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        skipped_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        finished_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        error_class_name: orm.Mapped[str | None] = orm.mapped_column(
            sa.String(255).evaluates_none(), deferred=True
        )
        error_message: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
        error_backtrace: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
        job_id: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        meta: orm.Mapped[Any] = orm.mapped_column(
            "metadata", JSONDocument().evaluates_none(), nullable=True, deferred=True
        )
        # evaluates_none(): an unset optional column is left out of the INSERT
        # instead of being sent as NULL, so inserts work where it is absent
        # (R-DM-32, R-DEG-01).
        cursor: orm.Mapped[Any] = orm.mapped_column(
            "cursor",
            JSONDocument(sqlite_type_name="JSON").evaluates_none(),
            nullable=True,
            deferred=True,
        )
        continues_from_id: orm.Mapped[Any] = orm.mapped_column(
            key.evaluates_none(), nullable=True, deferred=True
        )
        created_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now()
        )
        updated_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now(), onupdate=lambda: now()
        )

        workflow: orm.Mapped[Any] = orm.relationship(Workflow, lazy="select")

        __table_args__ = (
            sa.Index(
                "index_geneva_drive_step_executions_on_workflow_id", "workflow_id"
            ),
            sa.Index("index_geneva_drive_step_executions_on_state", "state"),
            sa.Index(
                "index_geneva_drive_step_executions_on_scheduled_for", "scheduled_for"
            ),
            sa.Index(
                "index_geneva_drive_step_executions_scheduled", "state", "scheduled_for"
            ),
            sa.Index(
                "index_geneva_drive_step_executions_on_workflow_and_created_at",
                "workflow_id",
                "created_at",
            ),
            sa.Index(
                "index_geneva_drive_step_executions_on_workflow_id_and_state",
                "workflow_id",
                "state",
            ),
            sa.Index(
                "index_geneva_drive_step_executions_on_finished_at", "finished_at"
            ),
            sa.Index(
                "index_geneva_drive_step_executions_on_continues_from_id",
                "continues_from_id",
            ),
            sa.Index(
                "index_geneva_drive_step_executions_one_active",
                "workflow_id",
                unique=True,
                postgresql_where=sa.text("state IN ('scheduled','in_progress')"),
                sqlite_where=sa.text("state IN ('scheduled','in_progress')"),
                info={"geneva_dialect_specific": True},
            ).ddl_if(dialect=("postgresql", "sqlite")),  # type: ignore[arg-type]  # documented: tuple of names
            sa.Index(
                "index_geneva_drive_step_executions_in_progress_started_at",
                "started_at",
                postgresql_where=sa.text("state = 'in_progress'"),
                sqlite_where=sa.text("state = 'in_progress'"),
                info={"geneva_dialect_specific": True},
            ).ddl_if(dialect=("postgresql", "sqlite")),  # type: ignore[arg-type]  # documented: tuple of names
        )

    return Workflow, StepExecution
