"""Per-app runtime state: the validated config and the task backend.

``app.extensions["geneva"]`` holds a :class:`GenevaState`. Orchestration code reads
it through :func:`current_state`, which needs an active Flask app context.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import Any

from flask import Flask
from flask import current_app

from flask_geneva.config import GenevaConfig
from flask_geneva.config import config_from_mapping
from flask_geneva.dispatch import CeleryBackend
from flask_geneva.dispatch import RecordingBackend
from flask_geneva.dispatch import TaskBackend
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = ["GenevaState", "current_state"]

_CONFIG_KEYS_PREFIX = "GENEVA_"
#: (state, config) fixed for the operation in progress; see GenevaState.pinned_config.
_pinned: contextvars.ContextVar[tuple[Any, GenevaConfig] | None] = (
    contextvars.ContextVar("flask_geneva_pinned_config", default=None)
)


class GenevaState:
    """What ``app.extensions["geneva"]`` holds for one app.

    Attributes:
        geneva: The :class:`~flask_geneva.Geneva` extension (models, registry).
        app: The Flask app.
        celery: The Celery app step tasks are sent through, or None.
        recording_backend: The backend used when ``GENEVA_TASK_BACKEND="recording"``.
    """

    def __init__(self, geneva: Any, app: Flask, celery: Any = None) -> None:
        self.geneva = geneva
        self.app = app
        self.celery = celery
        self.recording_backend = RecordingBackend()
        self._lock = threading.Lock()
        self._config_key: tuple[Any, ...] | None = None
        self._config: GenevaConfig | None = None
        self._celery_backend: CeleryBackend | None = None

    @property
    def config(self) -> GenevaConfig:
        """The validated settings, re-read when ``app.config`` changed (R-CFG-02).

        Inside :meth:`pinned_config` the settings read when the block began are
        returned without checking ``app.config`` again.

        Raises:
            GenevaConfigurationError: A ``GENEVA_*`` value is invalid.
        """
        pinned = _pinned.get()
        if pinned is not None and pinned[0] is self:
            return pinned[1]
        raw = (
            *sorted(
                (k, id(v), repr(v))
                for k, v in self.app.config.items()
                if k.startswith(_CONFIG_KEYS_PREFIX)
            ),
            self.app.testing,
        )
        if raw != self._config_key or self._config is None:
            with self._lock:
                self._config = config_from_mapping(
                    self.app.config, testing=self.app.testing
                )
                self._config_key = raw
        return self._config

    @contextlib.contextmanager
    def pinned_config(self) -> Iterator[GenevaConfig]:
        """Read the settings once and use them for the whole block (R-CFG-02).

        One operation (a step run, say) then sees one set of settings, and the
        change check over ``app.config`` runs once instead of at every read. A
        change made inside the block takes effect for the next operation. Nested
        blocks keep the outer block's settings.

        Yields:
            The :class:`~flask_geneva.config.GenevaConfig` in force.
        """
        pinned = _pinned.get()
        if pinned is not None and pinned[0] is self:
            yield pinned[1]
            return
        config = self.config
        token = _pinned.set((self, config))
        try:
            yield config
        finally:
            _pinned.reset(token)

    @property
    def backend(self) -> TaskBackend:
        """The task backend selected by ``GENEVA_TASK_BACKEND``.

        Raises:
            GenevaConfigurationError: The backend is ``"celery"`` and no Celery app
                is configured (read before the commit that would publish).
        """
        if self.config.task_backend == "recording":
            return self.recording_backend
        celery = self.celery
        if celery is None:
            # Never whichever Celery app was created last (issue 14).
            raise GenevaConfigurationError(
                "GENEVA_TASK_BACKEND is 'celery' but no Celery app is configured: "
                "pass geneva.init_app(app, celery=celery) or call "
                "geneva.init_celery(celery, app=app)"
            )
        timeout = self.config.publish_timeout.total_seconds()
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

    Raises:
        RuntimeError: No app context is active (Flask's own error).
        GenevaConfigurationError: flask_geneva is not registered on the app.
    """
    state = current_app.extensions.get("geneva")
    if state is None:
        raise GenevaConfigurationError(
            "flask_geneva is not registered on this app; call geneva.init_app(app)"
        )
    return state  # type: ignore[no-any-return]
