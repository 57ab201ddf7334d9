"""Housekeeping's cleanup reads its rows through indexes (issue 34, R-HK-14).

Each cleanup batch reads the ids of ended workflows' signals, executions and
the workflows themselves (``cleanup_id_selects``, R-HK-12). Once a database
holds many workflows, most of them finished within the retention, a read that
scans a whole table costs a scan of every workflow (or execution) per batch.
The database's own plan (``EXPLAIN``) must name an index for every table the
read touches: on MariaDB/MySQL, where each batch's ids are read by that SELECT
(R-HK-12), the plan as the optimizer chooses it; on PostgreSQL, with sequential
scans discouraged, that an index can serve it.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva.core import clock
from flask_geneva.db.queries.maintenance import cleanup_id_selects
from tests.apps.basic import db
from tests.apps.basic import geneva

WORKFLOWS = 4000
EXECUTIONS_PER_WORKFLOW = 5
RETENTION = timedelta(days=30)
BATCH = 1000


def _fill():
    """WORKFLOWS workflows: a tenth live, a tenth ended before the retention,
    the rest ended within it; each with its executions and one signal."""
    now = clock.now()
    workflows, executions, signals = [], [], []
    for i in range(1, WORKFLOWS + 1):
        live = i % 10 == 0
        old = i % 10 == 1
        ended_at = now - (RETENTION * 2 if old else timedelta(days=1))
        workflows.append(
            {
                "id": i,
                "type": "CountingOneStep",
                "state": "ready" if live else "finished",
                "allow_multiple": True,
                "transitioned_at": None if live else ended_at,
                "created_at": now,
                "updated_at": now,
            }
        )
        signals.append(
            {
                "workflow_id": i,
                "name": "paid",
                "state": "consumed",
                "created_at": now,
                "updated_at": now,
            }
        )
        executions.extend(
            {
                "workflow_id": i,
                "step_name": "only",
                "state": "completed",
                "outcome": "success",
                "scheduled_for": now,
                "created_at": now,
                "updated_at": now,
            }
            for _ in range(EXECUTIONS_PER_WORKFLOW)
        )
    with db.engine.begin() as connection:
        connection.execute(sa.insert(geneva.Workflow.__table__), workflows)
        connection.execute(sa.insert(geneva.StepExecution.__table__), executions)
        connection.execute(sa.insert(geneva.WorkflowSignal.__table__), signals)
    return now - RETENTION


def _selects(cutoff):
    return cleanup_id_selects(
        geneva.Workflow,
        geneva.StepExecution,
        cutoff,
        signal_cls=geneva.WorkflowSignal,
    )


def _sql(select):
    return str(
        select.limit(BATCH).compile(db.engine, compile_kwargs={"literal_binds": True})
    )


def _mysql_plans(cutoff):
    tables = ", ".join(
        model.__table__.name
        for model in (geneva.Workflow, geneva.StepExecution, geneva.WorkflowSignal)
    )
    with db.engine.connect() as connection:
        connection.execute(sa.text(f"ANALYZE TABLE {tables}"))
        return {
            name: connection.execute(sa.text(f"EXPLAIN {_sql(select)}"))
            .mappings()
            .all()
            for name, select in _selects(cutoff).items()
        }


def _postgresql_nodes(plan):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _postgresql_nodes(child)


@pytest.mark.backends("mysql")
def test_mariadb_reads_every_cleanup_batch_through_indexes(app):
    """On MariaDB/MySQL EXPLAIN of each pass's id SELECT names an index for every
    table, the workflows read as a range of ``transitioned_at``, never a full
    scan of a table or an index (R-HK-14, R-HK-12, R-DM-02)."""
    plans = _mysql_plans(_fill())
    assert list(plans) == ["signals", "executions", "workflows"]
    for name, rows in plans.items():
        for row in rows:
            assert row["key"], (name, dict(row))
            assert row["type"] not in ("ALL", "index"), (name, dict(row))
        workflows = next(r for r in rows if r["table"] == "geneva_drive_workflows")
        assert workflows["type"].startswith("range"), (name, dict(workflows))
        assert (
            "index_geneva_drive_workflows_on_transitioned_at_and_id" in workflows["key"]
        )


@pytest.mark.backends("postgresql")
def test_postgresql_can_read_every_cleanup_batch_through_indexes(app):
    """On PostgreSQL, with sequential scans discouraged, each pass's id SELECT
    is served by indexes, the workflows by their ``(transitioned_at, id)`` index: no
    node of its plan scans a table (R-HK-14)."""
    cutoff = _fill()
    with db.engine.begin() as connection:
        connection.execute(sa.text("ANALYZE"))
        connection.execute(sa.text("SET LOCAL enable_seqscan = off"))
        for name, select in _selects(cutoff).items():
            [[plan]] = connection.execute(
                sa.text(f"EXPLAIN (FORMAT JSON) {_sql(select)}")
            ).all()
            plan = json.loads(plan) if isinstance(plan, str) else plan
            nodes = [
                (node["Node Type"], node.get("Index Name"))
                for node in _postgresql_nodes(plan[0]["Plan"])
            ]
            assert "Seq Scan" not in [kind for kind, _ in nodes], (name, nodes)
            indexes = [index for _, index in nodes]
            assert (
                "index_geneva_drive_workflows_on_transitioned_at_and_id" in indexes
            ), (
                name,
                nodes,
            )
