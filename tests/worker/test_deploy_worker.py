"""Workflows started by the old code finish under a deploy that removed and renamed
steps, run by a real ``celery worker`` (issue 19, R-EVO-02, R-EVO-04).

The test process runs the old class; the worker loads the new one
(tests/worker/deploy_new_code.py, same ``__geneva_type__``). Executions the old
code scheduled and published before the deploy are in the broker when the new
worker starts: one of the removed step, one of the renamed step.
"""

from __future__ import annotations

import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import step
from tests.apps import basic
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import worker_test_app


class OldDeployedSignup(basic.geneva.Workflow):
    """The signup before the deploy."""

    __geneva_type__ = "DeployedSignup"

    @step
    def create_account(self):
        self.hero.counter += 1

    @step
    def charge_card(self):
        self.hero.counter += 10

    @step
    def email_receipt(self):
        self.hero.counter += 100

    @step
    def welcome(self):
        self.hero.counter += 10000


def _scheduled_execution(workflow_id):
    table = basic.geneva.StepExecution.__table__
    return basic.db.session.scalar(
        sa.select(table.c.id)
        .where(table.c.workflow_id == workflow_id)
        .where(table.c.state == "scheduled")
    )


def _run_old_steps(workflow_id, count):
    """Run ``count`` steps with the old code in this process (publishing the next)."""
    for _ in range(count):
        execution_id = _scheduled_execution(workflow_id)
        basic.db.session.rollback()
        Executor.execute(execution_id)
        basic.db.session.remove()


def test_a_deploy_with_a_removed_and_a_renamed_step_strands_nothing(
    start_worker, broker_url, worker_database_url
):
    """The new worker skips the removed step's execution and runs the renamed one
    as the new step; both workflows finish (R-EVO-02, R-EVO-04).
    """
    app = worker_test_app(broker_url, worker_database_url)
    with app.app_context():
        heroes = [basic.User(email=f"deploy-{i}@example.com") for i in range(2)]
        basic.db.session.add_all(heroes)
        basic.db.session.commit()
        at_removed = OldDeployedSignup.create(hero=heroes[0]).id
        at_renamed = OldDeployedSignup.create(hero=heroes[1]).id
        hero_ids = [hero.id for hero in heroes]
        basic.db.session.remove()
        # The old code runs until the deploy: one workflow's charge_card and the
        # other's email_receipt are scheduled and in the broker.
        _run_old_steps(at_removed, 1)
        _run_old_steps(at_renamed, 2)

    start_worker("--include", "tests.worker.deploy_new_code")

    def states():
        with app.app_context():
            table = basic.geneva.Workflow.__table__
            found = dict(
                basic.db.session.execute(
                    sa.select(table.c.id, table.c.state).where(
                        table.c.id.in_([at_removed, at_renamed])
                    )
                ).all()
            )
            basic.db.session.remove()
            return found

    wait_for(lambda: set(states().values()) == {"finished"}, timeout=90)
    with app.app_context():
        table = basic.geneva.StepExecution.__table__

        def executions(workflow_id):
            return [
                (row.step_name, row.state, row.outcome)
                for row in basic.db.session.execute(
                    sa.select(table)
                    .where(table.c.workflow_id == workflow_id)
                    .order_by(table.c.created_at, table.c.id)
                )
            ]

        assert executions(at_removed) == [
            ("create_account", "completed", "success"),
            ("charge_card", "skipped", "skipped"),
            ("send_receipt", "completed", "success"),
            ("welcome", "completed", "success"),
        ]
        assert executions(at_renamed) == [
            ("create_account", "completed", "success"),
            ("charge_card", "completed", "success"),
            ("email_receipt", "completed", "success"),
            ("welcome", "completed", "success"),
        ]
        counters = [basic.db.session.get(basic.User, i).counter for i in hero_ids]
        # The removed step's body never ran; the renamed one ran the new body.
        assert counters == [11001, 11011]
        basic.db.session.remove()
        for engine in basic.db.engines.values():
            engine.dispose()
