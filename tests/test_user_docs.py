"""User-docs pages that the guide promises (issue 34).

``mkdocs build --strict`` (in .ci/run) checks the links; these tests check that
a page is in the guide's navigation, says what it must, and that its Python
examples are valid Python. The child workflows guide's examples are run.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _nav_pages(config_text):
    """The pages of mkdocs.yml's ``nav:`` block (``- Title: page.md`` lines).

    Read as text: the lowest-versions pass of CI installs no YAML parser.
    """
    nav = config_text.partition("\nnav:\n")[2]
    for line in nav.splitlines():
        if line and not line.startswith(" "):
            break  # the next top-level key
        found = re.search(r":\s*(\S+\.md)\s*$", line)
        if found:
            yield found.group(1)


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_guide_has_a_page_on_steps_running_at_least_once():
    """ "Steps run at least once" is in the guide: when a step runs twice (a worker
    killed after the side effect, before finalize commits) and how to make a
    side effect idempotent with a key that every run of the step shares, shown
    against a payment API's Idempotency-Key (R-RES-38, R-HK-24, R-HK-29)."""
    pages = list(_nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    assert "workflows.md" in pages  # the reader found the nav
    assert "at-least-once.md" in pages
    text = (DOCS / "at-least-once.md").read_text(encoding="utf-8")
    assert text.startswith("# Steps run at least once\n")
    flat = " ".join(text.split())
    assert "after the side effect, before finalize commits" in flat
    assert "Idempotency-Key" in flat
    assert 'idempotency_key=f"geneva-{self.type}-{self.id}-charge"' in flat
    assert "self.current_execution.id" in flat  # why not the execution id
    assert "R-EXE-11" in flat  # broker redeliveries do not run it twice
    blocks = _python_blocks(text)
    assert len(blocks) >= 2
    for block in blocks:
        ast.parse(block)


def test_the_guide_has_a_page_on_limits_and_priorities():
    """ "Limits and priorities" is in the guide: the partner-API example, what
    waiting means, the release on every way out, priorities, the operators'
    command, pages and gauges, and rate limits as coming (R-LIM-40..45)."""
    pages = list(_nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    assert "limits.md" in pages
    text = (DOCS / "limits.md").read_text(encoding="utf-8")
    assert text.startswith("# Limits and priorities\n")
    flat = " ".join(text.split())
    assert (
        'partner_api = Limit("partner-api", concurrency=2, '
        "key=lambda wf: wf.hero.tenant_id)"
    ) in flat
    assert "workflows.md#job-options-and-priorities" in flat
    for needed in (
        "flask geneva limits",
        "Limits** page",
        "geneva_drive.limit_oldest_wait_seconds",
        "limits: 3 keys busy",
        "Rate limits",
        "add_flow_limits",
    ):
        assert needed in flat, needed
    for rule in ("R-LIM-20", "R-LIM-40", "R-LIM-44", "R-LIM-45"):
        assert rule in flat
    blocks = _python_blocks(text)
    assert len(blocks) >= 2
    for block in blocks:
        ast.parse(block)


CHILDREN_MARKER = "<!-- children-guide-example"

CHILDREN_DRIVER = r"""
import json
import sys

import sqlalchemy as sa

import billing_example as billing
from flask_geneva.testing import RecordingJobs
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import run_iterations

resume_children, resume_parent = json.loads(sys.argv[2])
app = billing.create_app(
    SQLALCHEMY_DATABASE_URI=sys.argv[1], GENEVA_TASK_BACKEND="recording"
)
jobs = RecordingJobs(app.extensions["geneva"].recording_backend)
db, geneva = billing.db, billing.geneva
found = {}


def drain():
    jobs.drain(limit=10_000)
    db.session.remove()


def max_result_size(size):
    app.config["GENEVA_MAX_RESULT_SIZE"] = size
    geneva.reload_settings(app)


def start(workflow_class):
    run = billing.BillingRun(month="2026-11")
    db.session.add(run)
    db.session.commit()
    return workflow_class.create(hero=run).id


def seen(workflow_class, workflow_id):
    workflow = workflow_class.get(workflow_id)
    counts = workflow.child_counts
    last = workflow.execution_history[-1]
    return {
        "state": workflow.state,
        "result": workflow.result,
        "total": workflow.hero.total_cents,
        "counts": [counts.started, counts.settled, counts.failed],
        "error": last.error_class_name,
        "children": sorted(child.state for child in workflow.children()),
    }


with app.app_context():
    db.create_all()
    # 1,050 accounts, every 7th without usage: 900 billable, two batches.
    db.session.execute(
        sa.insert(billing.Account),
        [{"usage_cents": (i % 7) * 100} for i in range(1, 1051)],
    )
    db.session.commit()
    billable = db.session.scalars(
        sa.select(billing.Account.id).where(billing.Account.usage_cents > 0)
    ).all()
    expected = db.session.scalar(sa.select(sa.func.sum(billing.Account.usage_cents)))

    # 1. The fan-out: one batch per checkpoint, then everything.
    first = start(billing.MonthlyBilling)
    workflow = billing.MonthlyBilling.get(first)
    execution = run_iterations(workflow, 1)
    found["after_one_batch"] = {
        "children": len(workflow.children()),
        "started": workflow.child_counts.started,
        "cursor": execution.cursor_value,
        "outcome": execution.outcome,
    }
    db.session.remove()
    drain()
    found["fan_out"] = seen(billing.MonthlyBilling, first)
    found["billable"] = [len(billable), billable[499], int(expected)]
    child = billing.MonthlyBilling.get(first).children(limit=1)[0]
    found["child"] = {
        "result": child.result,
        "hero": child.hero.id,
        "parent": child.parent.id,
        "key": child.child_key,
    }
    db.session.remove()

    # 2. Three accounts; the third one's result is too large while the limit is 28.
    db.session.execute(sa.delete(billing.Account).where(billing.Account.id > 3))
    db.session.execute(
        sa.update(billing.Account)
        .where(billing.Account.id == 3)
        .values(usage_cents=123456789)
    )
    db.session.commit()
    max_result_size(28)
    second = start(billing.MonthlyBilling)
    best_effort = start(billing.BestEffortBilling)
    all_or_nothing = start(billing.AllOrNothingBilling)
    drain()
    found["failed"] = seen(billing.MonthlyBilling, second)
    found["best_effort"] = seen(billing.BestEffortBilling, best_effort)
    found["all_or_nothing"] = seen(billing.AllOrNothingBilling, all_or_nothing)
    db.session.remove()

    # 3. The cause fixed: the parent resumed too early pauses again; the guide's
    # order (children, then the parent) finishes it.
    max_result_size(131072)
    billing.MonthlyBilling.get(second).resume()
    drain()
    found["resumed_too_early"] = seen(billing.MonthlyBilling, second)
    exec(resume_children, {"billing": billing.MonthlyBilling.get(second)})
    drain()
    found["children_resumed"] = seen(billing.MonthlyBilling, second)
    exec(resume_parent, {"billing": billing.MonthlyBilling.get(second)})
    drain()
    found["repaired"] = seen(billing.MonthlyBilling, second)

    # 4. Canceling a parent: the dispatcher cancels its children.
    third = start(billing.MonthlyBilling)
    jobs.clear()
    perform_next_step(billing.MonthlyBilling.get(third))
    billing.MonthlyBilling.get(third).cancel()
    db.session.remove()
    found["canceled_before_dispatch"] = seen(billing.MonthlyBilling, third)
    db.session.remove()
    geneva.dispatch_due()
    db.session.remove()
    found["canceled_after_dispatch"] = seen(billing.MonthlyBilling, third)
print(json.dumps(found))
"""


def _children_guide():
    """The guide's runnable module (its first block and the failure classes)
    and its two operator snippets."""
    text = (DOCS / "children.md").read_text(encoding="utf-8")
    start = text.index(CHILDREN_MARKER)
    module, *blocks = _python_blocks(text[start:])
    [failure_classes] = [b for b in blocks if "class BestEffortBilling" in b]
    [resume_children] = [b for b in blocks if "child.resume(" in b]
    [resume_parent] = [b for b in blocks if b.startswith("billing.resume(")]
    return module + "\n\n" + failure_classes, resume_children, resume_parent


def test_the_guide_has_a_page_on_child_workflows():
    """ "Child workflows and results" is in the guide, next to limits: results,
    starting children and their keys, fan-out in batches, waiting, reading,
    failures, the cancel cascade, the operators' views and the install unit
    (SPEC §25)."""
    pages = list(_nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    assert pages.index("children.md") == pages.index("limits.md") + 1
    text = (DOCS / "children.md").read_text(encoding="utf-8")
    assert text.startswith("# Child workflows: fan-out, fan-in and results\n")
    flat = " ".join(text.split())
    for needed in (
        "self.set_result(",
        "GENEVA_MAX_RESULT_SIZE",
        "ResultTooLargeError",
        "CursorSerializationError",
        "start_child(",
        "start_children(",
        'parent_close="abandon"',
        "it.iterate_over_batches(",
        "wait_for_children=True",
        '"any"',
        "over **all** the workflow's children",
        "child_results()",
        "child_counts",
        ".parent",
        "ChildWorkflowFailed",
        'on_child_failure="ignore"',
        "GENEVA_DISPATCH_INTERVAL",
        "flask geneva show ID --children",
        "Children** panel",
        "add_child_workflows",
        "at-least-once.md",
    ):
        assert needed in flat, needed
    for block in _python_blocks(text):
        ast.parse(block)


def test_the_child_workflows_guide_runs(tmp_path):
    """The guide's billing run does what the guide says: 900 children started
    500 per checkpoint, the total summed once all settled; a child whose result
    is too large pauses and the parent pauses with ChildWorkflowFailed, unless
    ``on_child_failure="ignore"`` or a cancel policy; children resumed first,
    then the parent, repair it; a canceled parent's children are canceled by
    the dispatcher (R-CHD-01, R-CHD-12, R-CHD-21, R-CHD-23, R-CHD-31)."""
    module, resume_children, resume_parent = _children_guide()
    (tmp_path / "billing_example.py").write_text(module)
    (tmp_path / "driver.py").write_text(CHILDREN_DRIVER)
    result = subprocess.run(
        [
            sys.executable,
            "driver.py",
            f"sqlite:///{tmp_path / 'billing.sqlite3'}",
            json.dumps([resume_children, resume_parent]),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    billable, last_of_first_batch, expected = found["billable"]
    assert billable == 900
    assert found["after_one_batch"] == {
        "children": 500,
        "started": 500,
        "cursor": last_of_first_batch,
        "outcome": "continued",
    }
    assert found["fan_out"] == {
        "state": "finished",
        "result": {"invoices": 900, "cents": expected},
        "total": expected,
        "counts": [900, 900, 0],
        "error": None,
        "children": ["finished"] * 900,
    }
    child = found["child"]
    assert child["result"] == {
        "account": child["hero"],
        "cents": child["result"]["cents"],
    }
    assert child["key"] == f"InvoiceAccount:Account:{child['hero']}"
    failed = found["failed"]
    assert failed["state"] == "paused"
    assert failed["error"] == "flask_geneva.exceptions.ChildWorkflowFailed"
    assert failed["counts"] == [3, 3, 1]
    assert failed["children"] == ["finished", "finished", "paused"]
    assert found["best_effort"]["state"] == "finished"
    assert found["best_effort"]["total"] == 100 + 200
    assert found["all_or_nothing"]["state"] == "canceled"
    assert found["resumed_too_early"]["state"] == "paused"
    assert found["resumed_too_early"]["counts"] == [3, 3, 1]
    assert found["children_resumed"]["counts"] == [3, 3, 0]
    assert found["children_resumed"]["children"] == ["finished"] * 3
    assert found["repaired"]["state"] == "finished"
    assert found["repaired"]["result"] == {"invoices": 3, "cents": 123456789 + 300}
    assert found["canceled_before_dispatch"]["state"] == "canceled"
    assert found["canceled_before_dispatch"]["children"] == ["ready"] * 3
    assert found["canceled_after_dispatch"]["children"] == ["canceled"] * 3
    assert found["canceled_after_dispatch"]["counts"] == [3, 3, 3]


def test_the_readme_shows_the_guides_fan_out():
    """README.md's child workflows section links the guide and shows its two
    workflow classes word for word, so the guide's test runs them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- children-readme-example")
    [example] = _python_blocks(readme[start:])[:1]
    module, _resume_children, _resume_parent = _children_guide()
    assert example.startswith("class InvoiceAccount(geneva.Workflow):")
    assert example in module
    flat = " ".join(readme.split())
    assert "[Child workflows and results](docs/children.md)" in flat
    assert "add_child_workflows" in flat


def test_the_readmes_schedule_deadline_and_timeout_declare_what_they_say():
    """README.md's schedules, deadlines and step timeouts example runs as
    written against a Geneva of its own, and declares the schedule, the
    class's deadline and the step's timeout it describes (R-SCHED-01,
    R-DL-01, R-DL-03, R-STO-01); the section links the three guides."""
    from datetime import timedelta

    import sqlalchemy as sa
    from flask_sqlalchemy import SQLAlchemy

    from flask_geneva import Geneva
    from flask_geneva import step

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- time-readme-example")
    [example] = _python_blocks(readme[start:])[:1]
    db = SQLAlchemy()
    geneva = Geneva(db)

    class User(db.Model):
        __tablename__ = "readme_time_users"
        id = sa.Column(sa.Integer, primary_key=True)
        active = sa.Column(sa.Boolean, default=True)

    class Digest(geneva.Workflow):
        @step
        def send(self):
            pass

    namespace = {
        "geneva": geneva,
        "Digest": Digest,
        "User": User,
        "sa": sa,
        "step": step,
        "timedelta": timedelta,
    }
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102
    schedule = geneva.schedules["weekly-digest"]
    assert (schedule.cron, schedule.missed) == ("0 9 * * MON", "latest")
    assert str(schedule.zone) == "Europe/Berlin"
    checkout = namespace["Checkout"]
    definitions = checkout.__geneva_definitions__
    assert definitions.deadline == timedelta(days=30)
    assert definitions.on_deadline == "cancel"
    [charge] = [s for s in definitions.steps if s.name == "charge"]
    assert charge.timeout == timedelta(minutes=5)
    flat = " ".join(readme.split())
    for link in (
        "[Schedules](docs/schedules.md)",
        "[Deadlines](docs/deadlines.md)",
        "[Step timeouts](docs/step-timeouts.md)",
    ):
        assert link in flat


LOGGING_DRIVER = r"""
import json
import logging
import sys

from opentelemetry.sdk.trace import TracerProvider

from flask_geneva import step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import User, create_app, db, geneva

exec(sys.argv[2])  # the guide's dictConfig block: JSON lines on stdout
exec(sys.argv[3])  # the guide's Celery block: connects setup_logging


class Signup(geneva.Workflow):
    @step
    def send(self):
        self.logger.info("sending")
        logging.getLogger("app.mailer").info("mail queued")


app = create_app(sys.argv[1])
from celery.signals import setup_logging

setup_logging.send(sender=None, loglevel=logging.INFO, logfile=None, format="", colorize=False)
tracer = TracerProvider().get_tracer("docs")
with app.app_context():
    db.create_all()
    hero = User(email="a@example.com")
    db.session.add(hero)
    db.session.commit()
    with tracer.start_as_current_span("web request") as span:
        workflow = Signup.create(hero=hero)
    speedrun_workflow(workflow)
    context = span.get_span_context()
    print(json.dumps({"done": workflow.id, "trace_id": format(context.trace_id, "032x")}))
"""


def test_the_logging_guide_writes_json_lines_with_the_workflow_fields(tmp_path):
    """The guide's dictConfig, as written, makes every record a JSON line; the
    package's records about the workflow carry workflow_id, workflow_type,
    execution_id, step, hero_type and hero_id, the record of create() in a span
    its trace_id, and an application logger's record in a step the fields through
    the filter; the Celery setup_logging receiver applies the same config
    (R-OLOG-01..03, R-OLOG-06)."""
    pages = list(_nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    assert "logging.md" in pages
    text = (DOCS / "logging.md").read_text(encoding="utf-8")
    config_block, celery_block, text_block = _python_blocks(text)
    assert '"()": "pythonjsonlogger.json.JsonFormatter"' in config_block
    assert "worker_hijack_root_logger = False" in text
    ast.parse(text_block)
    (tmp_path / "driver.py").write_text(LOGGING_DRIVER)
    result = subprocess.run(
        [
            sys.executable,
            "driver.py",
            f"sqlite:///{tmp_path / 'logs.sqlite3'}",
            config_block,
            celery_block,
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    done = lines.pop()
    workflow_id = done["done"]
    ours = [line for line in lines if line.get("workflow_id") == workflow_id]
    assert {line["workflow_type"] for line in ours} == {"Signup"}
    assert {line["hero_type"] for line in ours} == {"User"}
    created = next(line for line in ours if "created with" in line["message"])
    assert created["trace_id"] == done["trace_id"]
    assert created["execution_id"] is None
    sending = next(line for line in ours if line["message"].endswith("sending"))
    assert sending["step"] == "send"
    assert isinstance(sending["execution_id"], int)
    assert "trace_id" not in sending  # no span around the step here
    mailer = next(line for line in lines if line["name"] == "app.mailer")
    assert (mailer["workflow_id"], mailer["step"]) == (workflow_id, "send")
    for line in lines:
        if (
            line["name"].startswith("flask_geneva")
            and f"id={workflow_id} " in line["message"]
        ):
            assert line["workflow_id"] == workflow_id, line
