"""Per-app runtime state: the settings validated at ``init_app`` and the task backend.

``app.extensions["geneva"]`` holds a :class:`GenevaState`. Its ``config`` is the
frozen :class:`~flask_geneva.config.GenevaConfig` that ``init_app`` validated
(R-CFG-02): it is never rebuilt from ``app.config`` behind the caller's back.
``geneva.reload_settings(app)`` (:meth:`flask_geneva.Geneva.reload_settings`) is
the one way to apply a later change; a change made without it is reported by a
:class:`~flask_geneva.config.GenevaSettingsChangedWarning` naming the key, once,
at the next geneva operation, and otherwise ignored.

Orchestration code reads the state through :func:`current_state`, or only the
settings through :func:`settings`; both need an active Flask app context.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from flask import Flask
from flask import current_app

from flask_geneva.config import GenevaConfig
from flask_geneva.config import GenevaSettingsChangedWarning
from flask_geneva.config import settings_snapshot
from flask_geneva.dispatch import CeleryBackend
from flask_geneva.dispatch import RecordingBackend
from flask_geneva.dispatch import TaskBackend
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = ["GenevaState", "current_state", "settings"]

_MISSING = object()


class GenevaState:
    """What ``app.extensions["geneva"]`` holds for one app.

    Attributes:
        geneva: The :class:`~flask_geneva.Geneva` extension (models, registry).
        app: The Flask app.
        config: The settings validated at ``init_app`` (or at the last
            :meth:`reload_settings`); frozen (R-CFG-02).
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
        self._snapshot = settings_snapshot(app.config)
        self._warned: set[str] = set()
        self._celery_backend: CeleryBackend | None = None

    def apply_settings(self, config: GenevaConfig) -> None:
        """Use ``config`` from now on; ``app.config`` as it is now is its source.

        Called by :meth:`flask_geneva.Geneva.reload_settings` after validating
        ``config``.

        Args:
            config: Settings validated from the current ``app.config``.
        """
        with self._lock:
            self.config = config
            self._snapshot = settings_snapshot(self.app.config)
            self._warned.clear()

    def changed_settings(self) -> list[str]:
        """Name the ``GENEVA_*`` keys of ``app.config`` changed since the last read.

        A key counts as changed when its value is neither the same object nor
        equal to the one read at ``init_app`` (or the last :meth:`reload_settings`),
        or when it was removed.

        Returns:
            The changed keys in :data:`~flask_geneva.config.DEFAULTS` order; ``[]``
            when ``app.config`` still holds what the settings were built from.
        """
        config = self.app.config
        changed = []
        for key, value in self._snapshot:
            current = config.get(key, _MISSING)
            if current is not value and current != value:
                changed.append(key)
        return changed

    def warn_about_changed_settings(self) -> None:
        """Warn once per key about ``GENEVA_*`` values changed without a reload.

        Issues a :class:`~flask_geneva.config.GenevaSettingsChangedWarning` naming
        each changed key that was not reported yet (R-CFG-02). The change itself
        is not applied.
        """
        fresh = [key for key in self.changed_settings() if key not in self._warned]
        if not fresh:
            return
        self._warned.update(fresh)
        keys = ", ".join(fresh)
        warnings.warn(
            f"app.config[{keys}] changed after geneva.init_app(app); flask_geneva "
            "reads its settings once at init_app and keeps the value it read. Call "
            "geneva.reload_settings(app) to apply the change (R-CFG-02)",
            GenevaSettingsChangedWarning,
            stacklevel=3,
        )

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


def current_state() -> GenevaState:
    """Return the :class:`GenevaState` of the current Flask app.

    Warns (:class:`~flask_geneva.config.GenevaSettingsChangedWarning`, once per
    key) when a ``GENEVA_*`` value of ``app.config`` was changed after
    ``init_app`` without ``geneva.reload_settings(app)`` (R-CFG-02).

    Raises:
        RuntimeError: No app context is active (Flask's own error).
        GenevaConfigurationError: flask_geneva is not registered on the app.
    """
    state: GenevaState | None = current_app.extensions.get("geneva")
    if state is None:
        raise GenevaConfigurationError(
            "flask_geneva is not registered on this app; call geneva.init_app(app)"
        )
    state.warn_about_changed_settings()
    return state


def settings() -> GenevaConfig:
    """Return the frozen settings of the current Flask app (R-CFG-02).

    The one accessor for engine code that has no settings object passed in yet.

    Raises:
        RuntimeError: No app context is active (Flask's own error).
        GenevaConfigurationError: flask_geneva is not registered on the app.
    """
    return current_state().config
