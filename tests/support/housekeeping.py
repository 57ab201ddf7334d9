"""Helpers for the housekeeping suites: put rows into stuck or old states."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import pytest

from flask_geneva.testing import speedrun_workflow
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow

#: A fixed instant the suites freeze the clock at.
T0 = datetime(2030, 5, 1, 10, 0, tzinfo=UTC)


#: ``GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER`` of the cleanup suites
#: (:func:`retention_settings`).
RETENTION = timedelta(days=30)


@pytest.fixture(name="app_config")
def retention_settings() -> dict[str, Any]:
    """The ``app_config`` of a cleanup suite: finished workflows are deleted after
    :data:`RETENTION`."""
    return {"GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER": RETENTION}


def finished_workflow(email: str) -> Any:
    """The id of a new workflow (:class:`EmptyTwoSteps`) of a new hero ``email``,
    run to ``finished``."""
    workflow = EmptyTwoSteps.create(hero=make_user(email))
    speedrun_workflow(workflow)
    assert workflow.state == "finished"
    return workflow.id


def make_in_progress(workflow: Any, started_at: datetime) -> Any:
    """Mark the workflow's scheduled execution in_progress since ``started_at``.

    The workflow becomes ``performing`` with ``current_step_name`` set, as after an
    executor claim whose worker then died (R-EXE-17, R-EXE-35).
    """
    execution = workflow.current_execution
    update_execution(execution.id, state="in_progress", started_at=started_at)
    update_workflow(
        workflow.id, state="performing", current_step_name=execution.step_name
    )
    return execution.id


class RecordingMetrics:
    """A GENEVA_METRICS hook that remembers every gauge call (R-MET-06)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, dict[str, str] | None]] = []

    def gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        self.calls.append((name, value, tags))

    def value(self, name: str, workflow: str | None = None) -> float:
        """The last value sent for ``name`` with that workflow tag (None = total)."""
        tags = None if workflow is None else {"workflow": workflow}
        found = [v for n, v, t in self.calls if n == name and t == tags]
        if not found:
            raise AssertionError(f"gauge {name} {tags} was not emitted: {self.calls}")
        return found[-1]


class RecordingReporter:
    """A GENEVA_ERROR_REPORTER that remembers what it was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[BaseException, dict[str, Any]]] = []

    def __call__(
        self,
        error: BaseException,
        *,
        handled: bool,
        context: dict[str, Any],
        source: str,
    ) -> None:
        self.calls.append((error, context))
