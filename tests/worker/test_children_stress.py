"""Fan-out and fan-in with real worker processes, one of them SIGKILLed mid-fan-out.

Issue 36's proof. By default (PostgreSQL or MariaDB with a broker) a small
run: 150 children, 2 workers. ``GENEVA_TEST_STRESS=1`` makes it the full one,
run on demand (minutes)::

    GENEVA_TEST_STRESS=1 GENEVA_TEST_BROKER_URL=redis://127.0.0.1:6379/15 \\
    GENEVA_TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
    .venv/bin/pytest -p no:xdist -s tests/worker/test_children_stress.py

10,000 children (``GENEVA_TEST_STRESS_CHILDREN``) on 4 workers. The parent's
resumable ``fan_out`` step starts one child per hero, in batches, each
committed with its checkpoint (500 per batch; 50 in the small run). In the second batch the body commits its children
itself and the worker SIGKILLs itself before the checkpoint: the step is
recovered and runs that batch again, which finds the children stored and
creates none (R-CHD-11/12). Children finish concurrently on every worker,
each settling once (R-CHD-20); the parent's ``collect`` step
(``wait_for_children=True``) parks and the last settlement wakes it
(R-CHD-21/22); its body runs once and sums the children's results.

Checked: started == settled == N and failed == 0 in the parent's counts;
N children with N distinct keys, each finished with its step completed once;
the collect step has one execution and its body ran once; the parent's result
is the sum of the children's.
"""

from __future__ import annotations

import os
import signal as os_signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from flask_geneva import resumable_step
from flask_geneva import step
from tests.apps import basic
from tests.worker import heartbeat_worker

STRESS = os.environ.get("GENEVA_TEST_STRESS") == "1"
FLAG_DIR_VARIABLE = "GENEVA_TEST_CHILDREN_FLAGS"
BATCH = 500 if STRESS else 50
KILL_IN_BATCH = 1
PREFIX = "cstress-"

_log_metadata = sa.MetaData()
COLLECT_LOG = sa.Table(
    "children_stress_collect_log",
    _log_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("parent_id", sa.BigInteger, nullable=False),
    sa.Column("children", sa.Integer, nullable=False),
)


class StressChild(basic.geneva.Workflow):
    """Returns its hero's counter."""

    @step
    def report(self):
        self.set_result({"n": self.hero.counter})


class StressFanOut(basic.geneva.Workflow):
    """Starts one StressChild per stress hero, then sums their results."""

    may_proceed_without_hero = True

    @resumable_step
    def fan_out(self, it):
        heroes = sa.select(basic.User).where(basic.User.email.like(f"{PREFIX}%"))
        for number, batch in enumerate(
            it.iterate_over_batches(heroes, batch_size=BATCH)
        ):
            self.start_children(StressChild, basic.db.session.scalars(batch.select))
            flags = os.environ.get(FLAG_DIR_VARIABLE)
            if flags and number == KILL_IN_BATCH:
                armed, killed = Path(flags) / "armed", Path(flags) / "killed"
                if armed.exists() and not killed.exists():
                    # The children are committed, the checkpoint is not.
                    basic.db.session.commit()
                    killed.write_text(str(number))
                    os.kill(os.getpid(), os_signal.SIGKILL)

    @step(wait_for_children=True)
    def collect(self):
        results = self.child_results()
        basic.db.session.execute(
            sa.insert(COLLECT_LOG).values(parent_id=self.id, children=len(results))
        )
        self.set_result(
            {
                "children": len(results),
                "sum": sum(value["n"] for value in results.values()),
            }
        )


@pytest.mark.timeout(3600)
def test_fan_out_and_fan_in_count_every_child_once(
    start_worker, broker_url, worker_database_url, tmp_path, monkeypatch
):
    """Children started in batches by a resumable step, a worker SIGKILLed
    between a batch's commit and its checkpoint, children finishing on every
    worker: each child counted once, the parent woken once (R-CHD-11..13,
    R-CHD-20..22)."""
    if worker_database_url.startswith("sqlite"):
        pytest.skip("several worker processes need PostgreSQL or MariaDB")
    children = int(
        os.environ.get("GENEVA_TEST_STRESS_CHILDREN", "10000" if STRESS else "150")
    )
    workers = 4 if STRESS else 2
    app = heartbeat_worker.build_app(
        broker_url, worker_database_url, tmp_path, monkeypatch, FLAG_DIR_VARIABLE
    )
    app.config["GENEVA_STUCK_IN_PROGRESS_THRESHOLD"] = timedelta(minutes=30)
    app.config["GENEVA_PUBLISH_TIMEOUT"] = timedelta(seconds=10)
    basic.geneva.reload_settings(app)
    with app.app_context():
        engine = basic.db.engine
        _log_metadata.drop_all(engine)
        _log_metadata.create_all(engine)
        with engine.begin() as connection:
            connection.execute(
                sa.insert(basic.User.__table__),
                [
                    {"email": f"{PREFIX}{i}@example.com", "counter": i}
                    for i in range(children)
                ],
            )
        parent_id = StressFanOut.create().id
        basic.db.session.remove()
    (tmp_path / "armed").touch()
    include = ("--include", "tests.worker.test_children_stress")
    started = time.monotonic()
    for index in range(workers):
        start_worker(*include, name=f"worker-{index}")
    workflows = basic.geneva.Workflow.__table__

    def parent_state() -> str:
        with app.app_context(), basic.db.engine.connect() as connection:
            return str(
                connection.execute(
                    sa.select(workflows.c.state).where(workflows.c.id == parent_id)
                ).scalar_one()
            )

    replaced = False
    deadline = time.monotonic() + 1800
    while parent_state() != "finished":
        assert time.monotonic() < deadline, f"parent is {parent_state()}"
        if not replaced and (tmp_path / "killed").exists():
            start_worker(*include, name="worker-replacement")
            replaced = True
        heartbeat_worker.run_housekeeping(app)
        with app.app_context():
            basic.geneva.dispatch_due()
            basic.db.session.remove()
        time.sleep(1.0)
    elapsed = time.monotonic() - started
    assert replaced, "the armed worker was never killed"

    with app.app_context(), basic.db.engine.connect() as connection:
        executions = basic.geneva.StepExecution.__table__
        child_rows = connection.execute(
            sa.select(workflows.c.id, workflows.c.state, workflows.c.child_key).where(
                workflows.c.parent_workflow_id == parent_id
            )
        ).all()
        child_steps = connection.execute(
            sa.select(executions.c.outcome, sa.func.count())
            .join(workflows, workflows.c.id == executions.c.workflow_id)
            .where(workflows.c.parent_workflow_id == parent_id)
            .group_by(executions.c.outcome)
        ).all()
        parent_steps = connection.execute(
            sa.select(executions.c.step_name, executions.c.outcome).where(
                executions.c.workflow_id == parent_id
            )
        ).all()
        counts_table = basic.db.metadata.tables["geneva_drive_child_counts"]
        counts = connection.execute(
            sa.select(counts_table).where(
                counts_table.c.parent_workflow_id == parent_id
            )
        ).one()
        collect_runs = connection.execute(
            sa.select(COLLECT_LOG.c.children).where(
                COLLECT_LOG.c.parent_id == parent_id
            )
        ).all()
        result = connection.execute(
            sa.select(workflows.c.result).where(workflows.c.id == parent_id)
        ).scalar_one()
        _log_metadata.drop_all(connection)
        connection.commit()
    with app.app_context():
        parent_result = StressFanOut.get(parent_id).result
        basic.db.session.remove()

    print(  # noqa: T201 - the figures of the run, shown with -s
        f"\nchildren stress on {worker_database_url.split(':')[0]}: {children} "
        f"children, {workers} workers: {elapsed:.0f} s from the first worker to "
        f"the parent finished ({children / elapsed:.0f} children/s); counts "
        f"started={counts.started} settled={counts.settled} failed={counts.failed}; "
        f"parent steps {sorted((s, o) for s, o in parent_steps)}"
    )
    assert result is not None
    assert len(child_rows) == children
    assert len({row.child_key for row in child_rows}) == children
    assert {row.state for row in child_rows} == {"finished"}
    assert dict(child_steps) == {"success": children}
    assert (counts.started, counts.settled, counts.failed) == (
        children,
        children,
        0,
    )
    assert counts.waiting_execution_id is None
    collect_outcomes = [o for s, o in parent_steps if s == "collect"]
    assert collect_outcomes == ["success"]
    assert collect_runs == [(children,)]
    assert parent_result == {
        "children": children,
        "sum": children * (children - 1) // 2,
    }
    # The killed fan-out execution was recovered and its successors ran on.
    fan_out_outcomes = sorted(o for s, o in parent_steps if s == "fan_out")
    assert "recovered" in fan_out_outcomes
    assert fan_out_outcomes.count("success") == 1
