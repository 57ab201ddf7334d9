"""The cost per child of a fan-out and of a fan-in (SPEC §25).

No broker: the recording backend, each published task run at once, FIFO, in
one process (``Executor.execute``); SQL statements and commits counted with
SQLAlchemy engine events as in ``bench/limits.py``. For each size N:

* **fan-out**: a parent's resumable step starts N children with
  ``start_children`` in batches of 500 (each batch committed with its
  checkpoint, R-CHD-12). Seconds, statements and commits per child.
* **children**: the N children each run one step that sets a result; the same
  body in N top-level workflows is the baseline. The difference per workflow
  is what settling for the parent costs (R-CHD-20: one UPDATE of the
  parent's counts row per child, O(1)).
* **fan-in**: the parent's ``wait_for_children`` step, woken by the last
  settlement, reads every child's result with ``child_results()``.

Usage::

    python bench/children.py                      # SQLite, 1,000 and 10,000
    python bench/children.py --children 1000,10000 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test
    python bench/children.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scratch
from flask_geneva import Executor
from flask_geneva import resumable_step
from flask_geneva import step
from tests.apps import basic

BATCH = 500


class BenchChild(basic.geneva.Workflow):
    """One step: its result is its hero's counter."""

    @step
    def report(self):
        self.set_result({"n": self.hero.counter})


class BenchTopLevel(basic.geneva.Workflow):
    """The same body in a workflow without a parent: the baseline."""

    @step
    def report(self):
        self.set_result({"n": self.hero.counter})


class BenchParent(basic.geneva.Workflow):
    """Starts one child per hero of its run, then sums their results."""

    may_proceed_without_hero = True

    @resumable_step
    def fan_out(self, it):
        prefix = self.read_metadata("prefix")
        heroes = sa.select(basic.User).where(basic.User.email.like(f"{prefix}%"))
        for batch in it.iterate_over_batches(heroes, batch_size=BATCH):
            self.start_children(BenchChild, basic.db.session.scalars(batch.select))

    @step(wait_for_children=True)
    def collect(self):
        results = self.child_results()
        self.set_result(sum(value["n"] for value in results.values()))


class Counter:
    """Statements and commits on one engine while active."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.statements = 0
        self.commits = 0

    def _statement(self, _c: object, _k: object, statement: str, *_: object) -> None:
        if not statement.startswith("BEGIN"):
            self.statements += 1

    def _commit(self, *_args: object) -> None:
        self.commits += 1

    def __enter__(self) -> Counter:
        event.listen(self.engine, "before_cursor_execute", self._statement)
        event.listen(self.engine, "commit", self._commit)
        return self

    def __exit__(self, *_exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._statement)
        event.remove(self.engine, "commit", self._commit)


def _drain(app: Any, execution_ids: list[Any], *, only: set[Any] | None) -> list[Any]:
    """Run ``execution_ids`` and what they publish; publications of executions
    outside ``only`` (when given) are returned instead of run."""
    backend = app.extensions["geneva"].recording_backend
    held: list[Any] = []
    pending = list(execution_ids)
    while pending:
        for execution_id in pending:
            Executor.execute(execution_id, continue_inline=False)
        published = [p.step_execution_id for p in backend.enqueued]
        backend.clear()
        basic.db.session.remove()
        pending = [p for p in published if only is None or p in only]
        held.extend(p for p in published if only is not None and p not in only)
    return held


def _heroes(prefix: str, count: int) -> None:
    with basic.db.engine.begin() as connection:
        connection.execute(
            sa.insert(basic.User.__table__),
            [{"email": f"{prefix}{i}@example.com", "counter": i} for i in range(count)],
        )


def _first_executions(workflow_cls: Any, workflow_ids: list[Any]) -> list[Any]:
    executions = basic.geneva.StepExecution
    return list(
        basic.db.session.scalars(
            sa.select(executions.id)
            .where(executions.workflow_id.in_(workflow_ids))
            .order_by(executions.id)
        )
    )


def _measure(app: Any, size: int) -> dict[str, Any]:
    db = basic.db
    engine = db.engine
    backend = app.extensions["geneva"].recording_backend
    figures: dict[str, Any] = {"children": size}
    # Baseline: the same step in top-level workflows.
    _heroes(f"top{size}-", size)
    heroes = list(
        db.session.scalars(
            sa.select(basic.User).where(basic.User.email.like(f"top{size}-%"))
        )
    )
    top_ids = [BenchTopLevel.create(hero=hero, commit=False).id for hero in heroes]
    db.session.commit()
    backend.clear()
    firsts = _first_executions(BenchTopLevel, top_ids)
    db.session.remove()
    with Counter(engine) as counter:
        started = time.perf_counter()
        _drain(app, firsts, only=None)
        top_seconds = time.perf_counter() - started
    figures["top_level"] = {
        "seconds_per_workflow": top_seconds / size,
        "statements_per_workflow": counter.statements / size,
        "commits_per_workflow": counter.commits / size,
    }
    # Fan-out.
    prefix = f"kid{size}-"
    _heroes(prefix, size)
    parent = BenchParent.create(commit=False)
    parent.write_metadata("prefix", prefix)
    db.session.commit()
    parent_id = parent.id
    fan_out_id = parent.current_execution.id
    backend.clear()
    db.session.remove()
    with Counter(engine) as counter:
        started = time.perf_counter()
        held = _drain(app, [fan_out_id], only={fan_out_id})
        fan_out_seconds = time.perf_counter() - started
    # The chain's successors are the parent's own; run them, hold the children.
    parent_executions = set(
        db.session.scalars(
            sa.select(basic.geneva.StepExecution.id).where(
                basic.geneva.StepExecution.workflow_id == parent_id
            )
        )
    )
    db.session.remove()
    while any(p in parent_executions for p in held):
        mine = [p for p in held if p in parent_executions]
        held = [p for p in held if p not in parent_executions]
        with Counter(engine) as more:
            started = time.perf_counter()
            held.extend(_drain(app, mine, only=set(mine)))
            fan_out_seconds += time.perf_counter() - started
        counter.statements += more.statements
        counter.commits += more.commits
        parent_executions = set(
            db.session.scalars(
                sa.select(basic.geneva.StepExecution.id).where(
                    basic.geneva.StepExecution.workflow_id == parent_id
                )
            )
        )
        db.session.remove()
    children_firsts = [p for p in held if p not in parent_executions]
    collect = [p for p in held if p in parent_executions]
    figures["fan_out"] = {
        "seconds_per_child": fan_out_seconds / size,
        "statements_per_child": counter.statements / size,
        "commits_per_child": counter.commits / size,
    }
    # The collect step parks first (its own delivery).
    _drain(app, collect, only=set(collect))
    # The children: settle for the parent; the last one wakes it.
    with Counter(engine) as counter:
        started = time.perf_counter()
        woken = _drain(app, children_firsts, only=set(children_firsts))
        children_seconds = time.perf_counter() - started
    figures["children_run"] = {
        "seconds_per_child": children_seconds / size,
        "statements_per_child": counter.statements / size,
        "commits_per_child": counter.commits / size,
        "extra_statements_per_child": counter.statements / size
        - figures["top_level"]["statements_per_workflow"],
    }
    with Counter(engine) as counter:
        started = time.perf_counter()
        _drain(app, woken, only=None)
        fan_in_seconds = time.perf_counter() - started
    state = db.session.scalar(
        sa.select(basic.geneva.Workflow.state).where(
            basic.geneva.Workflow.id == parent_id
        )
    )
    result = BenchParent.get(parent_id).result
    db.session.remove()
    figures["fan_in"] = {
        "woken_tasks": len(woken),
        "collect_seconds": fan_in_seconds,
        "collect_statements": counter.statements,
        "parent_state": state,
        "result_ok": result == size * (size - 1) // 2,
    }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", default="1000,10000")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = scratch.database_url(args.database_url, tmp)
    app = basic.create_app(url, TESTING=False)
    dialect = scratch.reset_tables(app)
    print(f"database: {dialect}")
    results = []
    for size in (int(part) for part in args.children.split(",")):
        with app.app_context():
            figures = _measure(app, size)
        results.append(figures)
        top, out, run, fan_in = (
            figures["top_level"],
            figures["fan_out"],
            figures["children_run"],
            figures["fan_in"],
        )
        print(
            f"{size:>6} children: fan-out {out['seconds_per_child'] * 1000:.2f} ms, "
            f"{out['statements_per_child']:.2f} statements, "
            f"{out['commits_per_child']:.3f} commits per child | a child's step "
            f"{run['seconds_per_child'] * 1000:.2f} ms and "
            f"{run['statements_per_child']:.2f} statements (top-level "
            f"{top['seconds_per_workflow'] * 1000:.2f} ms, "
            f"{top['statements_per_workflow']:.2f}): settling "
            f"{run['extra_statements_per_child']:+.2f} statements per child | "
            f"fan-in: woken {fan_in['woken_tasks']}x, collect "
            f"{fan_in['collect_seconds'] * 1000:.0f} ms "
            f"({fan_in['collect_statements']} statements), parent "
            f"{fan_in['parent_state']}, sum ok {fan_in['result_ok']}"
        )
    with app.app_context():
        basic.db.session.remove()
        basic.db.drop_all()
    if args.json:
        Path(args.json).write_text(
            json.dumps({"database": dialect, "runs": results}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
