"""What the engine is given: settings, a publisher and the models (issue 15).

The engine (executor, scheduling, flow control, housekeeping, the dispatcher,
the outbox) imports neither Flask nor Celery. Whoever calls it, the Flask
extension, the Celery tasks, the CLI, the admin or a test, builds one
:class:`EngineContext` and passes it in, together with a session. The entry
point binds the context to that session (:meth:`EngineContext.bind`); code
deeper in the same operation finds it on the session it was given
(:func:`context_of`), so a publication requested inside a transaction, or
sent after its commit, uses the settings and publisher of the operation that
requested it.

The settings in a context are the frozen object validated at ``init_app``
(R-CFG-02); a context is replaced as a whole, never changed, so an operation
keeps the settings it started with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from typing import Protocol

from sqlalchemy import orm

from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.publications import TaskBackend
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = [
    "EngineContext",
    "GenevaModels",
    "bound_context",
    "context_of",
    "models_of",
]

#: ``Session.info`` key of the context bound to a session.
_CONTEXT_KEY = "geneva_context"
#: ``Session.info`` key of the models a session works on.
_MODELS_KEY = "geneva"


class GenevaModels(Protocol):
    """The models the engine writes: what :class:`flask_geneva.Geneva` provides.

    Attributes:
        Workflow: The workflow base model class (single-table inheritance root).
        StepExecution: The step execution model class.
        key_type: ``"bigint"`` or ``"uuid"``: the primary key type.
        workflow_classes: ``{type identity: class}`` of every declared workflow.
        schedules: ``{name: Schedule}`` of the declared schedules (R-SCHED-01).
    """

    Workflow: Any
    StepExecution: Any
    key_type: str
    workflow_classes: dict[str, Any]

    @property
    def schedules(self) -> Mapping[str, Any]:
        """The declared schedules by name."""
        ...

    @property
    def session(self) -> orm.Session:
        """The host's current session for these models."""
        ...


@dataclasses.dataclass(frozen=True, eq=False)
class EngineContext:
    """The settings, publisher and models one engine operation runs with.

    Built by an adapter (the Flask extension builds one per app and settings
    version: :meth:`flask_geneva.ext.app_state.GenevaState.engine_context`) and passed
    to the engine's entry points. Immutable: new settings mean a new context.

    Attributes:
        settings: The validated, frozen settings (R-CFG-02).
        publisher: Sends task publications (a Celery app or a recording list);
            the engine requests them through :mod:`flask_geneva.engine.publishing`.
        models: The models and session the engine works on.
    """

    settings: GenevaConfig
    publisher: TaskBackend
    models: GenevaModels

    @property
    def session(self) -> orm.Session:
        """The models' current session, bound to this context."""
        return self.bind(self.models.session)

    def bind(self, session: orm.Session) -> orm.Session:
        """Bind this context and its models to ``session`` and return it.

        Code called later with ``session`` finds them through
        :func:`context_of` and :func:`models_of`. Binding again replaces the
        previous context: each operation binds the one it runs with.

        Args:
            session: The session the operation works in.

        Returns:
            ``session``.
        """
        info = session.info
        info[_CONTEXT_KEY] = self
        info[_MODELS_KEY] = self.models
        return session

    def run_queued_tasks(self) -> int:
        """Run what the publisher queued instead of sending (Celery eager mode).

        Only a publisher with a ``run_queued`` method queues anything (the
        Celery adapter under ``GENEVA_ALLOW_EAGER``, R-TH-21); the engine calls
        this after its own commits.

        Returns:
            How many queued tasks ran.
        """
        run_queued = getattr(self.publisher, "run_queued", None)
        return int(run_queued()) if run_queued is not None else 0


def bound_context(session: orm.Session) -> EngineContext | None:
    """Return the :class:`EngineContext` bound to ``session``, or None."""
    context: EngineContext | None = session.info.get(_CONTEXT_KEY)
    return context


def context_of(session: orm.Session) -> EngineContext:
    """Return the :class:`EngineContext` bound to ``session``.

    Raises:
        GenevaConfigurationError: No context was bound: an engine function was
            called with a session no entry point bound (call it through the
            extension, or bind a context with :meth:`EngineContext.bind`).
    """
    context: EngineContext | None = session.info.get(_CONTEXT_KEY)
    if context is None:
        raise GenevaConfigurationError(
            "this session has no flask_geneva engine context: call the engine "
            "through the extension (geneva.* or a workflow's methods) or bind "
            "one with EngineContext.bind(session)"
        )
    return context


def models_of(session: orm.Session) -> Any:
    """Return the models (``.Workflow``, ``.StepExecution``) bound to ``session``.

    Raises:
        GenevaConfigurationError: No models were bound to ``session``.
    """
    models = session.info.get(_MODELS_KEY)
    if models is None:
        raise GenevaConfigurationError(
            "this session is not bound to flask_geneva's models: call the engine "
            "through the extension or bind an EngineContext to it"
        )
    return models
