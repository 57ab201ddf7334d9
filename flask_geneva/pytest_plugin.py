"""The pytest plugin, registered by the package's ``pytest11`` entry point (R-TH-20).

Installing flask_geneva makes pytest load it; a ``conftest.py`` that also lists
``pytest_plugins = ["flask_geneva.pytest_plugin"]`` is harmless (the entry point is
named after this module, so pytest sees it registered already). Disable it with
``-p no:flask_geneva.pytest_plugin``.

Provides the ``geneva_jobs`` fixture. It needs pytest-flask's ``app`` fixture (or
any fixture named ``app`` returning the Flask app).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from flask_geneva.testing import RecordingJobs


@pytest.fixture
def geneva_jobs(app: Any) -> Iterator[RecordingJobs]:
    """Switch ``GENEVA_TASK_BACKEND`` to ``"recording"`` for the test (R-TH-20).

    Yields a :class:`~flask_geneva.testing.RecordingJobs`: ``.enqueued``,
    ``.clear()``, ``.drain()``. The switch goes through
    ``geneva.reload_settings(app)`` (R-CFG-02); the previous backend setting is
    restored the same way afterwards.
    """
    state = app.extensions["geneva"]
    previous = app.config.get("GENEVA_TASK_BACKEND", "celery")
    switch = state.config.task_backend != "recording"
    if switch:
        app.config["GENEVA_TASK_BACKEND"] = "recording"
        state.geneva.reload_settings(app)
    state.recording_backend.clear()
    try:
        yield RecordingJobs(state.recording_backend)
    finally:
        state.recording_backend.clear()
        if switch:
            app.config["GENEVA_TASK_BACKEND"] = previous
            state.geneva.reload_settings(app)
