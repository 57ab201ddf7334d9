"""Tracing off: without opentelemetry, and without a tracer provider (R-OTEL-01/02).

Each case runs in a fresh interpreter: the global tracer provider can be set
once per process, and the test suite's own (tests/telemetry/conftest.py) may be
set already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROGRAM = textwrap.dedent(
    """
    import json, sys

    from tests.support.no_opentelemetry import NoOpenTelemetry

    if sys.argv[1] == "absent":
        sys.meta_path.insert(0, NoOpenTelemetry())

    from flask_geneva import Executor, step
    from flask_geneva.telemetry import tracing
    from tests.apps import basic

    class Off(basic.geneva.Workflow):
        _steps = step.repeat(3, lambda wf: None)

    app = basic.create_app(
        f"sqlite:///{sys.argv[2]}",
        TESTING=False,
        SECRET_KEY="off",
        GENEVA_ADMIN_ENABLED=True,
        GENEVA_ADMIN_ACCESS=lambda: True,
    )
    with app.app_context():
        basic.db.create_all()
        user = basic.User(email="off@example.com")
        basic.db.session.add(user)
        basic.db.session.commit()
        workflow = Off.create(hero=user)
        workflow_id = workflow.id
        workflow.pause()
        workflow.resume()
        backend = app.extensions["geneva"].recording_backend
        while backend.enqueued:
            publication = backend.enqueued.pop(0)
            Executor.execute(publication.step_execution_id)
        row = basic.db.session.execute(
            basic.db.text(
                "SELECT state, trace_context FROM geneva_drive_workflows WHERE id = :id"
            ),
            {"id": workflow_id},
        ).one()
    client = app.test_client()
    pages = [
        client.get(url).status_code
        for url in ("/geneva/", "/geneva/workflows/", f"/geneva/workflows/{workflow_id}")
    ]
    cli = app.test_cli_runner().invoke(args=["geneva", "show", str(workflow_id)])
    try:
        from flask_geneva import OpenTelemetryMetrics
        OpenTelemetryMetrics()
        meter = "created"
    except ImportError as error:
        meter = str(error)
    print(json.dumps({
        "pages": pages,
        "cli": [cli.exit_code, "finished" in cli.output],
        "meter": meter,
        "state": row[0],
        "trace_context": row[1],
        "available": tracing.AVAILABLE,
        "tracer": tracing.tracer() is not None,
        "imported": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
    }))
    """
)


def _run(mode: str, tmp_path: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _PROGRAM, mode, str(tmp_path / "off.sqlite3")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.database_independent
def test_without_opentelemetry_nothing_imports_it(tmp_path):
    """With opentelemetry not importable, flask_geneva, three steps, an operator's
    pause and resume, the admin's pages and the CLI run, OpenTelemetryMetrics()
    names the extra to install, nothing of opentelemetry is imported and nothing
    is stored (R-OTEL-01, R-OMET-07)."""
    seen = _run("absent", tmp_path)
    assert seen.pop("pages") == [200, 200, 200]
    assert seen.pop("cli") == [0, True]
    assert "flask-geneva[otel]" in seen.pop("meter")
    assert seen == {
        "state": "finished",
        "trace_context": None,
        "available": False,
        "tracer": False,
        "imported": [],
    }


@pytest.mark.database_independent
def test_without_a_tracer_provider_no_span_is_started(tmp_path):
    """With the API installed but no provider set, no tracer is used and no
    context is stored (R-OTEL-02)."""
    seen = _run("no-provider", tmp_path)
    assert seen["state"] == "finished"
    assert seen["available"] is True
    assert seen["tracer"] is False
    assert seen["trace_context"] is None
