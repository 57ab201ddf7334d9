"""A database without the ``add_child_workflows`` unit (R-CHD-50, R-DM-32).

Workflows without children run as before: no read names a column of the unit
(the executor's row reads leave them out), and a finished or canceled
workflow writes nothing to a table that does not exist. ``set_result`` is
refused, naming the unit; ``result`` and ``parent`` read None.
"""

from __future__ import annotations

from flask_geneva import step
from tests.apps.basic import geneva
from tests.engine.children import workflows
from tests.engine.children.workflows import Doubler
from tests.support.workflow import make_user


class NoChildrenTwoSteps(geneva.Workflow):
    @step
    def first(self):
        pass

    @step
    def second(self):
        pass


def test_workflows_run_and_end_without_the_unit(app, geneva_jobs, without_unit):
    """R-CHD-50: a workflow runs to its end and another is canceled."""
    without_unit("add_child_workflows")
    finished = NoChildrenTwoSteps.create(hero=make_user("a@example.com"))
    canceled = NoChildrenTwoSteps.create(hero=make_user("b@example.com"))
    canceled.cancel()
    geneva_jobs.drain()
    assert NoChildrenTwoSteps.get(finished.id).state == "finished"
    assert NoChildrenTwoSteps.get(canceled.id).state == "canceled"
    assert NoChildrenTwoSteps.get(finished.id).result is None
    assert NoChildrenTwoSteps.get(finished.id).parent is None
    assert NoChildrenTwoSteps.get(finished.id).child_counts is None


def test_set_result_is_refused_naming_the_unit(app, geneva_jobs, without_unit):
    """R-CHD-50: the step's set_result raises GenevaError naming the unit; its
    policy pauses the workflow."""
    without_unit("add_child_workflows")
    workflows.CHILD_FAILS.clear()
    workflow = Doubler.create(hero=make_user("a@example.com"))
    geneva_jobs.drain()
    workflow = Doubler.get(workflow.id)
    assert workflow.state == "paused"
    execution = workflow.execution_history[-1]
    assert execution.error_class_name == "flask_geneva.exceptions.GenevaError"
    assert "add_child_workflows" in execution.error_message
