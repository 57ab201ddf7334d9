"""The Flask-Admin views of the Geneva admin (SPEC §20).

* :class:`OverviewView` (:mod:`~flask_geneva.admin.overview_view`);
* :class:`WorkflowsView`, assembled here from its parts: the list
  (:mod:`~flask_geneva.admin.workflow_list`), a workflow's page
  (:mod:`~flask_geneva.admin.workflow_detail`), its buttons' endpoint
  (:mod:`~flask_geneva.admin.flow_control_actions`), its "Resume at step…"
  form (:mod:`~flask_geneva.admin.resume_at_form`), the bulk endpoint
  (:mod:`~flask_geneva.admin.bulk_actions`) and the "Start a workflow" page
  (:mod:`~flask_geneva.admin.workflow_start`);
* :class:`StepExecutionsView` (:mod:`~flask_geneva.admin.step_executions_view`);
* :class:`SignalsView` (:mod:`~flask_geneva.admin.signals_view`), the workflow
  signals of every workflow, with the workflow page's "Deliver signal…" form
  (:mod:`~flask_geneva.admin.signal_delivery`);
* :class:`LimitsView` (:mod:`~flask_geneva.admin.limits`), the concurrency
  limits' keys and their waiters (R-LIM-45);
* :class:`SchedulesView` (:mod:`~flask_geneva.admin.schedules`), the declared
  schedules with Pause, Resume and Run now (R-SCHED-36, R-SCHED-37).

The pages only read (R-ADM-32): plain selects, no row locks, no writes. The
writing endpoints, e.g. ``POST <workflows>/<id>/action`` and ``POST <workflows>/bulk``,
check the CSRF token (R-ADM-05) and the permission (``GENEVA_ADMIN_CAN_ACT``,
R-ADM-03, or the role, R-ADM-213), then
call each workflow's own flow-control method, one transaction per workflow, with
``via="admin"`` and the actor (R-ADM-21, R-ADM-23, R-ADM-24). The schedules'
``POST <schedules>/action`` checks the same and calls the engine's schedule
operations (R-SCHED-37).
"""

from __future__ import annotations

from flask_geneva.admin.base_view import asset_dir
from flask_geneva.admin.bulk_actions import WorkflowBulkActions
from flask_geneva.admin.flow_control_actions import WorkflowActionEndpoint
from flask_geneva.admin.limits import LimitsView
from flask_geneva.admin.overview_view import OverviewView
from flask_geneva.admin.resume_at_form import WorkflowResumeAt
from flask_geneva.admin.schedules import SchedulesView
from flask_geneva.admin.signal_delivery import WorkflowSignalDelivery
from flask_geneva.admin.signals_view import SignalsView
from flask_geneva.admin.step_executions_view import StepExecutionsView
from flask_geneva.admin.workflow_detail import WorkflowDetailPage
from flask_geneva.admin.workflow_list import WorkflowListPage
from flask_geneva.admin.workflow_start import WorkflowStart

__all__ = [
    "LimitsView",
    "OverviewView",
    "SchedulesView",
    "SignalsView",
    "StepExecutionsView",
    "WorkflowsView",
    "asset_dir",
]


class WorkflowsView(
    WorkflowListPage,
    WorkflowDetailPage,
    WorkflowActionEndpoint,
    WorkflowResumeAt,
    WorkflowSignalDelivery,
    WorkflowBulkActions,
    WorkflowStart,
):
    """The workflows list, a workflow's detail page and its buttons.

    Endpoints (under the view's endpoint, e.g. ``geneva_workflows``): ``index``
    (the list, R-ADM-11), ``detail`` (R-ADM-12), ``action`` (R-ADM-20..22),
    ``resume_at`` (R-EVO-06), ``deliver_signal`` (R-WSIG-68), ``bulk`` and
    ``bulk_get`` (R-ADM-23), ``start_page`` and ``start`` (R-ADM-200).
    """
