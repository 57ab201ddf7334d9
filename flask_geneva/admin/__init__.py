"""The Geneva admin UI on Flask-Admin 2.x (SPEC §20).

Two ways to mount it (R-ADM-01):

* :func:`register_admin` adds the views to a host's own ``flask_admin.Admin``, in
  the menu category "Workflows";
* ``geneva.init_app(app, admin=True)`` (or ``GENEVA_ADMIN_ENABLED = True``) calls
  :func:`init_standalone_admin`, which creates a dedicated ``Admin`` at
  ``GENEVA_ADMIN_URL`` (default ``/geneva``).

Access needs ``GENEVA_ADMIN_ACCESS`` outside debug/testing (R-ADM-02); buttons need
``GENEVA_ADMIN_CAN_ACT`` (R-ADM-03).

The admin is a layer above the engine and the extension: nothing outside this
package imports it. ``init_app`` finds :func:`init_standalone_admin` through the
entry point ``admin`` of the group ``flask_geneva.integrations``
(:mod:`flask_geneva.ext.integrations`), so the engine never loads Flask-Admin.
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from flask_geneva.admin import dependency as _dependency  # noqa: F401  (first)
from flask_geneva.admin.views import LimitsView
from flask_geneva.admin.views import OverviewView
from flask_geneva.admin.views import SchedulesView
from flask_geneva.admin.views import SignalsView
from flask_geneva.admin.views import StepExecutionsView
from flask_geneva.admin.views import WorkflowsView
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = [
    "CATEGORY",
    "LimitsView",
    "OverviewView",
    "SchedulesView",
    "SignalsView",
    "StepExecutionsView",
    "WorkflowsView",
    "init_standalone_admin",
    "register_admin",
]

#: Menu category of the Geneva views in a host's admin (R-ADM-01).
CATEGORY = "Workflows"


def register_admin(admin: Any, geneva: Any) -> list[Any]:
    """Add the Geneva views to a host's ``flask_admin.Admin`` (R-ADM-01).

    The views live under ``<admin url>/geneva/`` in the menu category "Workflows"
    (the signals list at ``geneva/signals``, R-WSIG-69; the limits at
    ``geneva/limits``, R-LIM-45; the schedules at ``geneva/schedules``,
    R-SCHED-36).
    The host's ``Admin`` may be bound to an app already or later with
    ``admin.init_app(app)``.

    Args:
        admin: The host's ``flask_admin.Admin``.
        geneva: The :class:`~flask_geneva.Geneva` extension whose rows are shown.

    Returns:
        The view instances added (overview first).

    .. versionadded:: 0.1
    """
    overview = OverviewView(
        geneva,
        name="Overview",
        category=CATEGORY,
        endpoint="geneva_overview",
        url="geneva",
    )
    workflows = WorkflowsView(
        geneva,
        name="Workflows",
        category=CATEGORY,
        endpoint="geneva_workflows",
        url="geneva/workflows",
    )
    executions = StepExecutionsView(
        geneva,
        name="Step executions",
        category=CATEGORY,
        endpoint="geneva_step_executions",
        url="geneva/step-executions",
    )
    signals = SignalsView(
        geneva,
        name="Signals",
        category=CATEGORY,
        endpoint="geneva_signals",
        url="geneva/signals",
    )
    limits = LimitsView(
        geneva,
        name="Limits",
        category=CATEGORY,
        endpoint="geneva_limits",
        url="geneva/limits",
    )
    schedules = SchedulesView(
        geneva,
        name="Schedules",
        category=CATEGORY,
        endpoint="geneva_schedules",
        url="geneva/schedules",
    )
    views = [overview, workflows, executions, signals, limits, schedules]
    _link(*views)
    for view in views:
        admin.add_view(view)
    return views


def _link(*views: Any) -> None:
    overview, workflows, executions, signals, limits, schedules = views
    for view in views:
        view.overview_endpoint = overview.endpoint
        view.workflows_endpoint = workflows.endpoint
        view.executions_endpoint = executions.endpoint
        view.signals_endpoint = signals.endpoint
        view.limits_endpoint = limits.endpoint
        view.schedules_endpoint = schedules.endpoint


def init_standalone_admin(app: Flask, geneva: Any) -> Any:
    """Create a dedicated ``Admin`` with the Geneva views at ``GENEVA_ADMIN_URL``.

    The overview is the admin's index page (``/geneva/``); the workflows list is
    ``/geneva/workflows/``, a workflow ``/geneva/workflows/<id>`` and the step
    executions list ``/geneva/step-executions/`` (R-ADM-01); the workflow
    signals list ``/geneva/signals/`` (R-WSIG-69); the limits
    ``/geneva/limits/`` (R-LIM-45); the schedules ``/geneva/schedules/``
    (R-SCHED-36).

    Args:
        app: The Flask app (``geneva.init_app`` has registered on it).
        geneva: The :class:`~flask_geneva.Geneva` extension.

    Returns:
        The ``flask_admin.Admin`` created.

    Raises:
        GenevaConfigurationError: The app already has an ``Admin`` with the
            endpoint ``geneva`` or at the same URL.

    .. versionadded:: 0.1
    """
    from flask_admin import Admin
    from flask_admin.theme import Bootstrap4Theme

    url = app.extensions["geneva"].config.admin.url
    for existing in app.extensions.get("admin", []):
        if existing.endpoint == "geneva" or existing.url == url:
            raise GenevaConfigurationError(
                f"an Admin with endpoint 'geneva' or URL {url!r} is already "
                "registered on this app; use register_admin(admin, geneva) to add "
                "the Geneva views to it, or change GENEVA_ADMIN_URL"
            )
    overview = OverviewView(
        geneva,
        name="Overview",
        endpoint="geneva",
        url=url,
        static_folder="static",  # Flask-Admin's own assets, served by the index
    )
    workflows = WorkflowsView(
        geneva, name="Workflows", endpoint="geneva_workflows", url="workflows"
    )
    executions = StepExecutionsView(
        geneva,
        name="Step executions",
        endpoint="geneva_step_executions",
        url="step-executions",
    )
    signals = SignalsView(
        geneva, name="Signals", endpoint="geneva_signals", url="signals"
    )
    limits = LimitsView(geneva, name="Limits", endpoint="geneva_limits", url="limits")
    schedules = SchedulesView(
        geneva, name="Schedules", endpoint="geneva_schedules", url="schedules"
    )
    _link(overview, workflows, executions, signals, limits, schedules)
    admin = Admin(
        app,
        name="Geneva",
        url=url,
        endpoint="geneva",
        index_view=overview,
        theme=Bootstrap4Theme(fluid=True),  # the full window width (R-ADM-42)
    )
    admin.add_view(workflows)
    admin.add_view(executions)
    admin.add_view(signals)
    admin.add_view(limits)
    admin.add_view(schedules)
    return admin
