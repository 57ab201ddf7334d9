"""A signal to a workflow whose class or parked step the code no longer defines
(issue 34, R-WSIG-72; SPEC §3.5, §5.6).

Such a workflow was parked under an older deploy. Waking its execution would
only fail it and pause the workflow (R-STI-03, R-EVO-07): the signal is stored
pending and wakes nothing, so the workflow stays as it was until an operator
continues it (``resume_at``) or a deploy defines the step again. A rename is
followed and a gravestone is skipped, as the executor does elsewhere (R-EVO-02,
R-EVO-04).
"""

from __future__ import annotations

import pytest

from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import signal_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


class UndefSigShipping(geneva.Workflow):
    @step
    def order(self):
        pass

    step.removed("collect")

    @step(wait_for="go")
    def ship(self):
        pass

    step.renamed("dispatch", to="ship")


def _parked_at(user, geneva_jobs, stored_step):
    """A workflow parked at ``ship``, its execution row carrying ``stored_step``."""
    workflow = UndefSigShipping.create(hero=user)
    geneva_jobs.drain()
    parked = execution_rows(workflow.id)[-1]
    assert (parked["step_name"], parked["state"]) == ("ship", "waiting")
    update_execution(parked["id"], step_name=stored_step)
    geneva_jobs.clear()
    return workflow, parked["id"]


def _assert_stored_and_nothing_woken(workflow_id, delivery, geneva_jobs):
    assert delivery.duplicate is False
    assert delivery.woken == ()
    [signal] = signal_rows(workflow_id)
    assert (signal["state"], signal["step_name"]) == ("pending", None)
    assert execution_rows(workflow_id)[-1]["state"] == "waiting"
    assert geneva_jobs.enqueued == []
    geneva_jobs.drain()
    assert workflow_row(workflow_id)["state"] == "ready"
    assert execution_rows(workflow_id)[-1]["state"] == "waiting"


def test_a_signal_to_an_undefined_step_is_stored_and_wakes_nothing(user, geneva_jobs):
    """The parked execution's step is neither a step, a rename nor a gravestone:
    the signal stays pending, the execution parked, the workflow ready; once an
    operator continues at a defined step, that step claims it (R-WSIG-72,
    R-EVO-06, R-EVO-07)."""
    workflow, _ = _parked_at(user, geneva_jobs, "vanished")
    delivery = workflow.signal("go", {"n": 1})
    _assert_stored_and_nothing_woken(workflow.id, delivery, geneva_jobs)
    workflow.pause()
    workflow.resume_at("ship")
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "finished"
    assert signal_rows(workflow.id)[0]["state"] == "consumed"


def test_a_signal_to_a_workflow_of_an_undefined_class_wakes_nothing(user, geneva_jobs):
    """No class is registered for the stored type: the signal is stored pending
    and the execution stays parked (R-WSIG-72, R-STI-02, R-STI-03)."""
    workflow_id = _parked_at(user, geneva_jobs, "ship")[0].id
    update_workflow(workflow_id, type="UndefSigRemovedClass")
    db.session.expunge_all()
    gone = geneva.Workflow.get(workflow_id)
    assert type(gone) is geneva.Workflow
    delivery = gone.signal("go")
    _assert_stored_and_nothing_woken(workflow_id, delivery, geneva_jobs)


def test_a_renamed_step_still_claims_and_wakes(user, geneva_jobs):
    """A stored old name of a renamed step means the new step: its matcher
    claims the signal and wakes the execution (R-WSIG-72, R-EVO-04)."""
    workflow, parked_id = _parked_at(user, geneva_jobs, "dispatch")
    delivery = workflow.signal("go")
    assert delivery.woken == (parked_id,)
    assert signal_rows(workflow.id)[0]["state"] == "claimed"
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "finished"


@pytest.mark.parametrize(
    ("stored_step", "runs"),
    [
        # A gravestone: the executor skips it and schedules the next step
        # (R-EVO-02).
        ("collect", ("collect", "skipped")),
        # A defined step that declares no wait_for any more: it runs.
        ("order", ("order", "completed")),
    ],
)
def test_a_gravestone_or_a_step_without_wait_for_is_woken_without_a_signal(
    user, geneva_jobs, stored_step, runs
):
    """The parked execution is woken without claiming the signal; after it, the
    next step claims the pending signal at its gate (R-WSIG-72, R-EVO-02)."""
    workflow, parked_id = _parked_at(user, geneva_jobs, stored_step)
    delivery = workflow.signal("go")
    assert delivery.woken == (parked_id,)
    assert signal_rows(workflow.id)[0]["state"] == "pending"
    geneva_jobs.drain()
    assert [(r["step_name"], r["state"]) for r in execution_rows(workflow.id)] == [
        ("order", "completed"),
        runs,
        ("ship", "completed"),
    ]
    assert signal_rows(workflow.id)[0]["state"] == "consumed"
