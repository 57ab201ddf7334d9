"""Executor overhead: N workflows x 10 steps, no broker (issue: engine core).

Prints steps/s, SQL statements per step and commits per step, counted with
SQLAlchemy engine events. Usage::

    python bench/step_overhead.py --workflows 200
    python bench/step_overhead.py --body writes-hero  # what each step's body does
    python bench/step_overhead.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test
    python bench/step_overhead.py --track-modifications  # SQLALCHEMY_TRACK_MODIFICATIONS
    python bench/step_overhead.py --inline-continuation  # as the Celery task runs steps
    python bench/step_overhead.py --json out.json  # also write the figures as JSON

``--body`` says what each of the ten steps does (issue 40; the peers in
``bench/peers/`` run the same bodies): ``noop`` nothing; ``reads-hero`` reads
its hero row (one SELECT through the session, never the identity map's copy);
``writes-hero`` reads its hero row and increments its ``counter`` column through
the session, without committing (the executor commits it, R-EXE-38);
``io`` sleeps 5 ms, standing for an HTTP call. After ``writes-hero`` the run
checks that every hero's counter went up once per step.

``--inline-continuation`` runs each delivered step as the Celery task does, with
inline continuation (R-EXE-70): a completed step claims the next one in its own
finalize transaction, so a 10-step workflow needs one delivery.

The target for a regular step is <= 3 commits and <= 10 statements; with inline
continuation, 1 commit and <= 4 statements (issue 16).

The measured loop is bracketed by two ``os.getppid()`` calls: under
``valgrind --tool=callgrind --dump-before=getppid`` the loop's instructions are a
dump of their own (``bench/instructions.py`` runs that).
"""

from __future__ import annotations

import argparse
import json
import os
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
from flask_geneva import step
from tests.apps import basic

STEPS = 10
#: The bodies ``--body`` chooses from (the peers take the same names).
BODIES = ("noop", "reads-hero", "writes-hero", "io")
#: The ``io`` body's sleep, in seconds: an HTTP call's round trip.
IO_SECONDS = 0.005


def _noop(_workflow: Any) -> None:
    """Nothing."""


def _reads_hero(workflow: Any) -> None:
    """Read the hero row: one SELECT, never the identity map's copy."""
    hero = basic.db.session.get(basic.User, workflow.hero_id, populate_existing=True)
    assert hero is not None


def _writes_hero(workflow: Any) -> None:
    """Read the hero row and increment its counter through the session."""
    hero = basic.db.session.get(basic.User, workflow.hero_id, populate_existing=True)
    assert hero is not None
    hero.counter = hero.counter + 1


def _io(_workflow: Any) -> None:
    """Wait as an HTTP call would."""
    time.sleep(IO_SECONDS)


_BODY_FUNCTIONS = {
    "noop": _noop,
    "reads-hero": _reads_hero,
    "writes-hero": _writes_hero,
    "io": _io,
}
#: The body the steps run, set by ``--body``.
_body = [_noop]


class BenchTenNoOpSteps(basic.geneva.Workflow):
    """Ten steps running the body ``--body`` chose (no-op by default)."""

    _steps = step.repeat(STEPS, lambda wf: _body[0](wf))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=200)
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--track-modifications",
        action="store_true",
        help="run with SQLALCHEMY_TRACK_MODIFICATIONS=True (host session listeners)",
    )
    parser.add_argument(
        "--inline-continuation",
        action="store_true",
        help="continue inline as the Celery task does (R-EXE-70); default: one "
        "step per delivery",
    )
    parser.add_argument(
        "--inline-budget",
        type=float,
        default=None,
        help="GENEVA_INLINE_CONTINUATION_BUDGET in seconds (default: the library's); "
        "bench/instructions.py passes 3600 so that a run slowed down by callgrind "
        "continues exactly as a fast one",
    )
    parser.add_argument(
        "--body",
        choices=BODIES,
        default="noop",
        help="what each step's body does (default: noop)",
    )
    parser.add_argument(
        "--json", default=None, help="also write the figures to this JSON file"
    )
    args = parser.parse_args()
    _body[0] = _BODY_FUNCTIONS[args.body]

    tmp = tempfile.TemporaryDirectory()
    url = scratch.database_url(args.database_url, tmp)
    extra = {}
    if args.inline_budget is not None:
        extra["GENEVA_INLINE_CONTINUATION_BUDGET"] = args.inline_budget
    app = basic.create_app(
        url,
        TESTING=False,
        SQLALCHEMY_TRACK_MODIFICATIONS=args.track_modifications,
        **extra,
    )
    scratch.reset_tables(app)
    with app.app_context():
        users = [basic.User(email=f"u{i}@example.com") for i in range(args.workflows)]
        basic.db.session.add_all(users)
        basic.db.session.commit()
        workflows = [BenchTenNoOpSteps.create(hero=user) for user in users]
        execution_ids = [w.current_execution.id for w in workflows]
        basic.db.session.remove()
        engine = basic.db.engine
        app.extensions["geneva"].recording_backend.clear()

        counts = {"statements": 0, "commits": 0}

        @event.listens_for(engine, "before_cursor_execute")
        def _count_statement(
            _conn: object, _cursor: object, statement: str, *_: object
        ) -> None:
            # BEGIN IMMEDIATE (SQLite) is transaction control, counted with commits.
            if not statement.startswith("BEGIN"):
                counts["statements"] += 1

        @event.listens_for(engine, "commit")
        def _count_commit(*_args: object) -> None:
            counts["commits"] += 1

        backend = app.extensions["geneva"].recording_backend
        deliveries = 0
        started = time.perf_counter()
        cpu_started = time.process_time()
        pending = list(execution_ids)
        os.getppid()  # callgrind marker: the measured loop starts (see docstring)
        while pending:
            next_round = []
            for execution_id in pending:
                Executor.execute(execution_id, continue_inline=args.inline_continuation)
                deliveries += 1
            for publication in backend.enqueued:
                next_round.append(publication.step_execution_id)
            backend.clear()
            pending = next_round
            basic.db.session.remove()
        os.getppid()  # callgrind marker: the measured loop ends
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started

        finished = basic.db.session.scalar(
            sa.select(sa.func.count())
            .select_from(basic.geneva.Workflow)
            .where(basic.geneva.Workflow.state == "finished")
        )
        steps_run = basic.db.session.scalar(
            sa.select(sa.func.count()).select_from(basic.geneva.StepExecution)
        )
        counters = basic.db.session.scalar(sa.select(sa.func.sum(basic.User.counter)))
        dialect = engine.dialect.name
        basic.db.session.remove()
        basic.db.drop_all()
    if args.body == "writes-hero" and counters != steps_run:
        raise SystemExit(
            f"the heroes' counters add up to {counters}, not to the {steps_run} steps run"
        )
    print(f"database:            {dialect}")
    print(f"body:                {args.body}")
    print(f"track modifications: {args.track_modifications}")
    print(f"workflows finished:  {finished}/{args.workflows}")
    print(f"inline continuation: {args.inline_continuation}")
    print(f"steps run:           {steps_run}")
    print(f"deliveries:          {deliveries}")
    print(f"steps/s:             {steps_run / elapsed:,.0f}")
    print(f"CPU per step:        {cpu / steps_run * 1000:.2f} ms (this process)")
    print(f"statements per step: {counts['statements'] / steps_run:.2f}")
    print(f"commits per step:    {counts['commits'] / steps_run:.2f}")
    if args.json:
        figures = {
            "database": dialect,
            "workflows": args.workflows,
            "body": args.body,
            "inline_continuation": args.inline_continuation,
            "steps": steps_run,
            "deliveries": deliveries,
            "seconds": elapsed,
            "steps_per_second": steps_run / elapsed,
            "cpu_ms_per_step": cpu / steps_run * 1000,
            "statements_per_step": counts["statements"] / steps_run,
            "commits_per_step": counts["commits"] / steps_run,
        }
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
