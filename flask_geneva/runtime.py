"""Per-app runtime state: the validated config and the task backend.

``app.extensions["geneva"]`` holds a :class:`GenevaState`. Orchestration code reads
it through :func:`current_state`, which needs an active Flask app context.
"""

from __future__ import annotations

import threading
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

    @property
    def config(self) -> GenevaConfig:
        """The validated settings, re-read when ``app.config`` changed (R-CFG-02).

        Raises:
            GenevaConfigurationError: A ``GENEVA_*`` value is invalid.
        """
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

    @property
    def backend(self) -> TaskBackend:
        """The task backend selected by ``GENEVA_TASK_BACKEND``."""
        if self.config.task_backend == "recording":
            return self.recording_backend
        celery = self.celery
        if celery is None:
            from celery import current_app as current_celery

            celery = current_celery
        return CeleryBackend(celery)


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
