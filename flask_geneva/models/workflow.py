"""``geneva.Workflow``'s behaviour: DSL collection, queries, hero, metadata (SPEC §3).

:func:`flask_geneva.models.factory.build_models` maps the columns; the methods that
change state are in :class:`flask_geneva.models.workflow_actions.WorkflowActions`, which
this class extends.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextlib import nullcontext
from datetime import datetime
from datetime import timedelta
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Self

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.keys import lookup_key
from flask_geneva.core.tagged_logging import workflow_logger
from flask_geneva.db.column_types import as_dict
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.db.queries import models as model_queries
from flask_geneva.db.states import TERMINAL_WORKFLOW_STATES
from flask_geneva.db.states import WorkflowState
from flask_geneva.db.states import parse_workflow_state
from flask_geneva.dsl.collect import WorkflowDefinitions
from flask_geneva.dsl.collect import collect_definitions
from flask_geneva.dsl.job_options import merge_job_options
from flask_geneva.dsl.job_options import validate_job_options
from flask_geneva.dsl.options import check_stored_name
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.models.workflow_actions import WorkflowActions
from flask_geneva.models.workflow_children import WorkflowChildren

if TYPE_CHECKING:
    from flask_geneva.dsl.definitions import StepDefinition
    from flask_geneva.dsl.ordering import StepCollection
    from flask_geneva.models.step_execution import StepExecutionMixin

__all__ = ["WorkflowMixin"]


class WorkflowMixin(WorkflowChildren, WorkflowActions):
    """Behaviour of ``geneva.Workflow``: DSL collection, hero, metadata, flow control.

    Subclass ``geneva.Workflow`` (not this mixin) to declare a workflow. Class
    attributes read by the engine: ``__geneva_type__`` (stable STI identity,
    default ``__qualname__``, R-STI-05), ``__geneva_abstract__`` (True on a base
    class that declares no steps of its own; not inherited, R-CFG-05),
    ``may_proceed_without_hero`` (R-HERO-05), ``admin_startable`` (False keeps
    the class out of the admin's "Start a workflow" form, R-ADM-200),
    ``default_job_options``, ``cancel_conditions``, ``exception_policies``
    (SPEC §15.2).
    """

    __geneva__: ClassVar[Any]
    __geneva_definitions__: ClassVar[WorkflowDefinitions]
    __geneva_type__: ClassVar[str]
    #: Whether the class or a parent defines ``__init__`` (set per subclass).
    __geneva_defines_init__: ClassVar[bool] = False
    may_proceed_without_hero: ClassVar[bool] = False
    #: Whether operators may start a workflow of this class from the admin
    #: (R-ADM-200); inherited; checked to be a bool at start-up (R-CFG-03).
    admin_startable: ClassVar[bool] = True

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
        deadline_at: orm.Mapped[datetime | None]
        trace_context: orm.Mapped[str | None]
        created_at: orm.Mapped[datetime]
        updated_at: orm.Mapped[datetime]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if cls.__dict__.get("_geneva_is_base"):
            super().__init_subclass__(**kwargs)
            return
        identity = cls.__dict__.get("__geneva_type__", cls.__qualname__)
        # R-STI-05: refused, never a silent fallback to the class name.
        check_stored_name(
            identity,
            what=f"__geneva_type__ of {cls.__qualname__}",
            subject="the workflow type (stored in the workflows' type column)",
            allow_blank=False,
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
        # Seen before the mapper instruments ``__init__`` (it does so after this
        # hook): a class with an ``__init__`` of its own is never built by
        # calling it when a locked row is read; the ORM loads it (R-DM-41).
        cls.__geneva_defines_init__ = "__init__" in cls.__dict__ or any(
            getattr(base, "__geneva_defines_init__", False) for base in cls.__bases__
        )
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
            hero_type, hero_id = cls.__geneva__.hero_reference(hero)
            existing = model_queries.ongoing_workflow_for_hero(
                cls._session(), cls, hero_type, hero_id
            )
            if existing is None:
                raise
            return existing, False

    @classmethod
    def get(cls, workflow_id: Any) -> Self | None:
        """Return the workflow with this id (polymorphic, R-STI-02), or None.

        Args:
            workflow_id: Its key, an int (a UUID with ``key_type="uuid"``), or
                the key's text (``"42"``).

        Returns:
            The workflow, or None when none has that key (an int no key can be,
            0 or beyond 64 bits, included).

        Raises:
            TypeError: ``workflow_id`` is no key nor text (None, a bool, a
                float, bytes); the message names it and the allowed keys
                (R-FLT-72).
            ValueError: Text that is no key (``"abc"``, ``"-1"``).
        """
        key = lookup_key(workflow_id, cls.__geneva__.key_type)
        return None if key is None else cls._session().get(cls, key)

    @classmethod
    def ongoing(cls) -> sa.Select[Any]:
        """Return a select of this class's workflows that are not finished/canceled."""
        return model_queries.ongoing_workflows(cls)

    @classmethod
    def with_state(cls, state: str) -> sa.Select[Any]:
        """Return a select of this class's workflows in ``state`` (R-WF-24).

        Raises:
            ValueError: ``state`` is not a workflow state; lists the allowed ones.
        """
        return model_queries.workflows_in_state(cls, parse_workflow_state(state))

    @classmethod
    def for_hero(cls, hero: Any) -> sa.Select[Any]:
        """Return a select of this class's workflows for ``hero`` (R-HERO-04)."""
        hero_type, hero_id = cls.__geneva__.hero_reference(hero)
        return model_queries.workflows_for_hero(cls, hero_type, hero_id)

    @classmethod
    def _hero_criteria(cls, hero: Any) -> list[Any]:
        hero_type, hero_id = cls.__geneva__.hero_reference(hero)
        return model_queries.hero_criteria(cls, hero_type, hero_id)

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
        return self.__geneva__.load_hero(
            self.hero_type, self.hero_id, self._object_session()
        )

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
        return model_queries.current_execution(  # type: ignore[no-any-return]
            self._object_session(), self.__geneva__.StepExecution, self.id
        )

    @property
    def execution_history(self) -> list[StepExecutionMixin]:
        """All executions ordered by ``created_at``, ties by id (R-WF-22)."""
        return model_queries.execution_history(
            self._object_session(), self.__geneva__.StepExecution, self.id
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
        columns = optional_columns(self._object_session())
        return bool(columns.workflow_metadata)

    def read_metadata(self, key: str) -> Any:
        """Return the JSON value stored under ``key``, or None (R-WF-40)."""
        values = self.__dict__
        loaded = values.get("meta")
        if isinstance(loaded, Mapping):
            # Loaded from the column (or written by write_metadata, which checks
            # it): no need to ask whether the column exists. The executor reads
            # step_job_options this way twice per step.
            return loaded.get(str(key))
        if loaded is None and "meta" in values:
            # Loaded NULL (an absent column is never loaded): nothing stored.
            return None
        if not self._has_metadata_column():
            return None
        return as_dict(self.meta).get(str(key))

    def write_metadata(self, key: str, value: Any) -> None:
        """Merge ``key: value`` into the metadata in memory; no-op without the column.

        ``value`` must be JSON-serialisable. Persisted with the next commit (R-WF-41).
        """
        if not self._has_metadata_column():
            return
        self.meta = {**as_dict(self.meta), str(key): value}

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
        return workflow_logger(self)

    # -- hooks (R-EXE-60/61) -----------------------------------------------------------

    def before_step_execution(self, execution: Any) -> None:
        """Run before each step body; override in subclasses (R-EXE-33)."""

    def after_step_execution(self, execution: Any) -> None:
        """Run after each step body, also after flow control/errors (R-EXE-36)."""

    def around_step_execution(self, execution: Any) -> AbstractContextManager[Any]:
        """Return a context manager wrapping only the body (R-EXE-34, R-EXE-61)."""
        return nullcontext()

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
