"""The engine runs without Flask: an EngineContext built by hand (issue 15).

The test's body runs in a thread of its own, where no Flask app or request
context exists (Flask's contexts are context variables, and a new thread starts
with none), on a plain SQLAlchemy ``Session`` rather than ``db.session``. The
engine gets its settings, publisher and models only from the
``EngineContext`` it is handed.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from flask import has_app_context
from sqlalchemy import orm

from flask_geneva import step
from flask_geneva.core.config import config_from_mapping
from flask_geneva.db.context import EngineContext
from flask_geneva.engine.executor.step import execute_step
from flask_geneva.engine.operators.housekeeping import run_housekeeping
from flask_geneva.engine.publishing import RecordingBackend
from flask_geneva.engine.workflow_creation import create_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva

CALLS: list[str] = []


class EngineOnlyWorkflow(geneva.Workflow):
    @step
    def first(self) -> None:
        CALLS.append(f"first:{self.hero.email}")

    @step(wait=None)
    def second(self) -> None:
        CALLS.append("second")


def _run_in_a_bare_thread(body: Any) -> dict[str, Any]:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = body()
        except BaseException as error:  # noqa: BLE001 - re-raised in the test
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if "error" in outcome:
        raise outcome["error"]
    return outcome


def test_a_workflow_runs_to_the_end_with_a_hand_built_context(app, user):
    """Create, two steps and housekeeping run on a plain Session, outside any Flask context, with the context passed in (issue 15, R-CFG-02)."""
    CALLS.clear()
    engine = db.engine
    user_id = user.id
    db.session.remove()  # the test's own session holds no lock meanwhile
    settings = config_from_mapping({"GENEVA_TASK_BACKEND": "recording"}, testing=True)
    publisher = RecordingBackend()

    def body() -> dict[str, Any]:
        assert not has_app_context()
        with orm.Session(engine) as session:
            models = SimpleNamespace(
                Workflow=geneva.Workflow,
                StepExecution=geneva.StepExecution,
                key_type=geneva.key_type,
                workflow_classes=geneva.workflow_classes,
                session=session,
            )
            context = EngineContext(
                settings=settings, publisher=publisher, models=models
            )
            context.bind(session)
            hero = session.get(User, user_id)
            workflow = create_workflow(
                session,
                EngineOnlyWorkflow,
                hero=hero,
                allow_multiple=False,
                step_job_options=None,
                commit=True,
            )
            for _ in range(2):
                execution_id = publisher.enqueued[-1].step_execution_id
                execute_step(context, execution_id)
            summary = run_housekeeping(context)
            session.refresh(workflow)
            return {
                "state": workflow.state,
                "steps": [e.step_name for e in workflow.execution_history],
                "summary": summary,
                "published": len(publisher.enqueued),
            }

    result = _run_in_a_bare_thread(body)["value"]
    assert CALLS == ["first:hero@example.com", "second"]
    assert result["state"] == "finished"
    assert result["steps"] == ["first", "second"]
    assert result["published"] == 2
    assert set(result["summary"]) == {
        "workflows_cleaned_up",
        "step_executions_cleaned_up",
        "stuck_in_progress_recovered",
        "stuck_scheduled_recovered",
    }


def test_an_unbound_session_is_refused_with_a_clear_error(app):
    """An engine call with a session no context was bound to names the fix, never reads Flask (issue 15)."""
    from flask_geneva.db.context import context_of
    from flask_geneva.exceptions import GenevaConfigurationError

    engine = db.engine

    def body() -> str | None:
        with orm.Session(engine) as session:
            try:
                context_of(session)
            except GenevaConfigurationError as error:
                return str(error)
        return None

    message = _run_in_a_bare_thread(body)["value"]
    assert message is not None
    assert "EngineContext.bind" in message
