"""Per-app runtime state: the settings validated at ``init_app`` and the task backend.

``app.extensions["geneva"]`` holds a :class:`GenevaState`. Its ``config`` is a
frozen :class:`~flask_geneva.core.config.GenevaConfig`, validated at ``init_app``
(R-CFG-02). A ``GENEVA_*`` value changed in ``app.config`` afterwards is
validated and applied at the start of the next geneva operation, by
:func:`current_state`: the settings are then built again exactly as
``geneva.reload_settings(app)`` (:meth:`flask_geneva.Geneva.reload_settings`)
builds them, through the one function :meth:`GenevaState.reload`. An invalid
value raises :class:`~flask_geneva.exceptions.GenevaConfigurationError` there,
before the operation writes anything, and leaves the settings in force as they
were.

Orchestration code reads the state through :func:`current_state`, or only the
settings through :func:`settings`; both need an active Flask app context.
"""

from __future__ import annotations

import operator
import threading
from typing import Any

from flask import Flask
from flask import current_app

from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.config import config_from_mapping
from flask_geneva.core.config import settings_snapshot
from flask_geneva.core.publications import TaskBackend
from flask_geneva.db.context import EngineContext
from flask_geneva.engine.publishing import RecordingBackend
from flask_geneva.exceptions import GenevaConfigurationError
from flask_geneva.ext import broker_checks
from flask_geneva.ext.celery_publisher import CeleryBackend

__all__ = [
    "GenevaState",
    "current_context",
    "current_state",
    "refuse_celery_backend_without_celery",
    "refuse_eager_celery",
    "settings",
]

_MISSING = object()


class GenevaState:
    """What ``app.extensions["geneva"]`` holds for one app.

    Attributes:
        geneva: The :class:`~flask_geneva.Geneva` extension (models, registry).
        app: The Flask app.
        config: The settings validated at ``init_app``, or at the last change of
            ``app.config`` (:meth:`reload`); frozen and replaced as a whole
            (R-CFG-02).
        celery: The Celery app step tasks are sent through, or None.
        recording_backend: The backend used when ``GENEVA_TASK_BACKEND="recording"``.
    """

    def __init__(
        self, geneva: Any, app: Flask, config: GenevaConfig, celery: Any = None
    ) -> None:
        self.geneva = geneva
        self.app = app
        self.celery = celery
        self.recording_backend = RecordingBackend()
        self.config = config
        self._lock = threading.Lock()
        self._set_snapshot(settings_snapshot(app.config))
        self._testing = app.testing
        self._celery_backend: CeleryBackend | None = None
        self._engine_context: EngineContext | None = None

    def changed_settings(self) -> list[str]:
        """Name the keys of ``app.config`` changed since the settings were built.

        A ``GENEVA_*`` key counts as changed when its value is neither the same
        object nor equal to the one the settings in force were built from (at
        ``init_app`` or the last :meth:`reload`), or when it was removed.
        ``TESTING`` counts too: ``app.testing`` is the default of
        ``GENEVA_ENQUEUE_AFTER_COMMIT``. A value mutated in place (the same
        object) is not seen.

        Returns:
            The changed keys, ``GENEVA_*`` ones in
            :data:`~flask_geneva.core.config.DEFAULTS` order, then ``TESTING``; ``[]``
            when ``app.config`` still holds what the settings were built from.
        """
        config = self.app.config
        try:
            # One C-level read of every key; equal tuples compare item by
            # item, identity first, as the loop below does.
            unchanged = self._read_values(config) == self._values
        except KeyError:  # a key was removed
            unchanged = False
        if unchanged and self.app.testing == self._testing:
            return []
        changed = []
        for key, value in self._snapshot:
            current = config.get(key, _MISSING)
            if current is not value and current != value:
                changed.append(key)
        if self.app.testing != self._testing:
            changed.append("TESTING")
        return changed

    def reload(self) -> GenevaConfig:
        """Validate ``app.config``'s settings again and apply them (R-CFG-02).

        The one implementation behind :meth:`flask_geneva.Geneva.reload_settings`
        and the check at the start of each operation (:func:`current_state`).
        It runs the checks of ``init_app`` that concern the settings: every
        ``GENEVA_*`` value (:func:`~flask_geneva.core.config.config_from_mapping`),
        the celery backend without a Celery app (issue 14) and Celery's eager
        mode (R-TH-21). Then the new frozen object replaces :attr:`config` in one
        assignment: a reader in another thread gets the old or the new object,
        never a mix. With a Celery app, a ``GENEVA_MAX_BROKER_DELAY`` not below
        the broker's visibility timeout is logged as a warning (R-DSP-06).

        Returns:
            The new settings, from now on :attr:`config`.

        Raises:
            GenevaConfigurationError: A value is invalid (every invalid setting is
                named with what is allowed, R-CFG-01/03); the celery backend
                without a Celery app; Celery eager mode without
                ``GENEVA_ALLOW_EAGER``. The settings in force then stay unchanged
                and the next check validates again.
        """
        with self._lock:
            config = self._reload_locked()
        self._check_broker_delay(config)
        return config

    def apply_changed_settings(self) -> None:
        """Apply a change of ``app.config`` made since the settings were built.

        Cheap when nothing changed (one comparison per setting, no validation,
        :attr:`config` stays the same object). Otherwise validates and applies
        as :meth:`reload` does, under the same lock, once even when several
        threads notice the change together.

        Raises:
            GenevaConfigurationError: As :meth:`reload`; raised again at every
                call while ``app.config`` stays invalid.
        """
        if not self.changed_settings():
            return
        with self._lock:
            # Another thread may have applied this change while we waited.
            if not self.changed_settings():
                return
            config = self._reload_locked()
        self._check_broker_delay(config)

    def _set_snapshot(self, snapshot: tuple[tuple[str, Any], ...]) -> None:
        keys = tuple(key for key, _ in snapshot)
        self._snapshot = snapshot
        self._values = tuple(value for _, value in snapshot)
        self._read_values: Any = (
            (lambda config: tuple(config[key] for key in keys))
            if len(keys) < 2
            else operator.itemgetter(*keys)
        )

    def _check_broker_delay(self, config: GenevaConfig) -> None:
        if self.celery is not None:
            broker_checks.warn_if_broker_delay_exceeds_visibility(
                self.celery, config.max_broker_delay
            )

    def _reload_locked(self) -> GenevaConfig:
        # Snapshot first: a change made while validating is seen next time.
        app = self.app
        snapshot = settings_snapshot(app.config)
        testing = app.testing
        config = config_from_mapping(app.config, testing=testing)
        refuse_celery_backend_without_celery(config, self.celery)
        if self.celery is not None:
            refuse_eager_celery(
                self.celery,
                task_backend=config.task_backend,
                allow_eager=config.allow_eager,
            )
        # The config before the snapshot: whoever sees the new snapshot (no
        # change left) also sees the new config.
        self.config = config
        self._set_snapshot(snapshot)
        self._testing = testing
        return config

    def engine_context(self) -> EngineContext:
        """Return the :class:`EngineContext` of the settings in force.

        The same object while the settings and the backend stay the same; a new
        one after a change (R-CFG-02), so an operation that holds one keeps its
        settings to the end.

        Raises:
            GenevaConfigurationError: The backend is ``"celery"`` and no Celery
                app is configured.
        """
        config = self.config
        backend = self.backend
        context = self._engine_context
        if (
            context is None
            or context.settings is not config
            or context.publisher is not backend
        ):
            context = self._engine_context = EngineContext(
                settings=config, publisher=backend, models=self.geneva
            )
        return context

    @property
    def backend(self) -> TaskBackend:
        """The task backend selected by ``GENEVA_TASK_BACKEND``.

        Raises:
            GenevaConfigurationError: The backend is ``"celery"`` and no Celery app
                is configured (read before the commit that would publish).
        """
        config = self.config
        if config.task_backend == "recording":
            return self.recording_backend
        celery = self.celery
        if celery is None:
            # Never whichever Celery app was created last (issue 14).
            raise GenevaConfigurationError(
                "GENEVA_TASK_BACKEND is 'celery' but no Celery app is configured: "
                "pass geneva.init_app(app, celery=celery) or call "
                "geneva.init_celery(celery, app=app)"
            )
        timeout = config.publish_timeout.total_seconds()
        cached = self._celery_backend
        if (
            cached is None
            or cached.celery_app is not celery
            or cached.publish_timeout_seconds != timeout
        ):
            cached = self._celery_backend = CeleryBackend(celery, timeout)
        return cached


def current_context() -> EngineContext:
    """Return the engine context of the current Flask app.

    What the adapters (the public operations, the Celery tasks, the CLI, the
    admin, the model methods) pass to the engine, which binds it to the session
    it works in. The settings are checked for changes first, as
    :func:`current_state` does (R-CFG-02).

    Raises:
        RuntimeError: No app context is active (Flask's own error).
        GenevaConfigurationError: As :func:`current_state`, or the task backend
            is ``"celery"`` without a Celery app.
    """
    return current_state().engine_context()


def current_state() -> GenevaState:
    """Return the :class:`GenevaState` of the current Flask app.

    Called at the start of every geneva operation. When a ``GENEVA_*`` value of
    ``app.config`` (or ``app.testing``) changed since the settings in force
    were built, the settings are validated again and applied first
    (:meth:`GenevaState.reload`, R-CFG-02), so the change takes effect for
    this operation and the later ones; otherwise nothing is validated.

    Raises:
        RuntimeError: No app context is active (Flask's own error).
        GenevaConfigurationError: flask_geneva is not registered on the app; or
            a changed setting is invalid (every invalid key is named with what
            is allowed; the settings in force stay unchanged).
    """
    state: GenevaState | None = current_app.extensions.get("geneva")
    if state is None:
        raise GenevaConfigurationError(
            "flask_geneva is not registered on this app; call geneva.init_app(app)"
        )
    state.apply_changed_settings()
    return state


def settings() -> GenevaConfig:
    """Return the frozen settings of the current Flask app (R-CFG-02).

    The one accessor for engine code that has no settings object passed in yet.

    Raises:
        RuntimeError: No app context is active (Flask's own error).
        GenevaConfigurationError: flask_geneva is not registered on the app.
    """
    return current_state().config


def refuse_celery_backend_without_celery(config: GenevaConfig, celery: Any) -> None:
    """Refuse ``GENEVA_TASK_BACKEND="celery"`` without a Celery app (issue 14).

    Args:
        config: The settings to check.
        celery: The Celery app of the state, or None.

    Raises:
        GenevaConfigurationError: The backend is ``"celery"`` and ``celery`` is None.
    """
    if celery is None and config.task_backend == "celery":
        raise GenevaConfigurationError(
            "no Celery app for flask_geneva's tasks: pass geneva.init_app(app, "
            "celery=celery), store it in app.extensions['celery'] before "
            "init_app, or call geneva.init_celery(celery, app=app) first; "
            "tests without a broker set GENEVA_TASK_BACKEND='recording'"
        )


def refuse_eager_celery(celery: Any, *, task_backend: str, allow_eager: bool) -> None:
    """Refuse Celery's eager mode unless ``GENEVA_ALLOW_EAGER`` (R-TH-21).

    Args:
        celery: A ``celery.Celery`` application.
        task_backend: The validated ``GENEVA_TASK_BACKEND``.
        allow_eager: The validated ``GENEVA_ALLOW_EAGER``.

    Raises:
        GenevaConfigurationError: ``task_always_eager`` is on, the backend is
            ``"celery"`` and eager mode is not allowed.
    """
    if celery.conf.task_always_eager and task_backend == "celery" and not allow_eager:
        raise GenevaConfigurationError(
            "Celery task_always_eager is on: it would run the next step inside "
            "the previous step's transaction. Turn it off, use "
            "GENEVA_TASK_BACKEND='recording' in tests, or set "
            "GENEVA_ALLOW_EAGER=True (R-TH-21)"
        )
