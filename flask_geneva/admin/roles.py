"""The admin's actions and the built-in role map (R-ADM-210..212).

Every page view and every POST of the admin is one named action, asked about
with a target (:data:`ACTION_TARGETS`). With ``GENEVA_ADMIN_CURRENT_ROLE`` the
user's role decides through :data:`ROLE_ACTIONS`; with
``GENEVA_ADMIN_AUTHORIZE`` the host's callable decides, and may call
:func:`role_allows` for the parts it keeps. Pure: no request, no settings
(:mod:`flask_geneva.admin.access` asks per request).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "ACTION_TARGETS",
    "ADMIN",
    "OPERATOR",
    "ROLES",
    "ROLE_ACTIONS",
    "SCHEDULE_ACTIONS",
    "VIEW",
    "VIEWER",
    "WORKFLOW_ACTIONS",
    "role_allows",
]

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
#: The roles ``GENEVA_ADMIN_CURRENT_ROLE`` may name, least allowed first.
ROLES = (VIEWER, OPERATOR, ADMIN)

#: Seeing any admin page (the overview, the lists, a workflow, an execution,
#: the limits, the schedules).
VIEW = "view"
#: The actions on one workflow: the buttons of its page (R-ADM-20, R-ADM-51,
#: R-HK-28), "Resume at step…" (R-EVO-06) and "Deliver signal…" (R-WSIG-68).
WORKFLOW_ACTIONS = (
    "pause",
    "resume",
    "resume_rewind",
    "cancel",
    "skip",
    "run_now",
    "recover",
    "resume_at",
    "deliver_signal",
)
#: The Schedules page's buttons (R-SCHED-37).
SCHEDULE_ACTIONS = ("schedule_pause", "schedule_resume", "schedule_run_now")

#: Each action and what it is asked about with (the ``target`` argument of
#: ``GENEVA_ADMIN_AUTHORIZE``).
ACTION_TARGETS: Mapping[str, str] = {
    VIEW: "None",
    "start": "the workflow class (shown in the form only when allowed)",
    **dict.fromkeys(WORKFLOW_ACTIONS, "the workflow (a model instance)"),
    "bulk": "None (each checked workflow is then asked its own action)",
    "bulk_all": "None (each matching workflow is then asked its own action)",
    **dict.fromkeys(SCHEDULE_ACTIONS, "the schedule's name (str)"),
}

_OPERATOR_ACTIONS = frozenset(
    {
        VIEW,
        "start",
        "pause",
        "resume",
        "resume_rewind",
        "cancel",
        "skip",
        "run_now",
        "resume_at",
        "deliver_signal",
        "bulk",
    }
)
#: What each role may do (R-ADM-212). A viewer sees every page and acts on
#: nothing; an operator starts workflows, steers one workflow at a time or the
#: checked rows, and delivers signals; an admin also recovers a running step
#: (which may run the step twice if its worker still lives), acts on every
#: workflow matching a filter at once, and pauses, resumes or runs schedules,
#: whose effect reaches every workflow they start.
ROLE_ACTIONS: Mapping[str, frozenset[str]] = {
    VIEWER: frozenset({VIEW}),
    OPERATOR: _OPERATOR_ACTIONS,
    ADMIN: _OPERATOR_ACTIONS | {"recover", "bulk_all", *SCHEDULE_ACTIONS},
}


def role_allows(role: str | None, action: str) -> bool:
    """Whether the role map lets ``role`` do ``action`` (R-ADM-212).

    Args:
        role: One of :data:`ROLES`, or None (no role: nothing, not even view).
        action: A key of :data:`ACTION_TARGETS`.

    Returns:
        True when :data:`ROLE_ACTIONS` lists the action for the role.

    Raises:
        ValueError: ``action`` is not an admin action (names the allowed ones).
    """
    if action not in ACTION_TARGETS:
        raise ValueError(
            f"unknown admin action {action!r}; the actions are "
            f"{', '.join(ACTION_TARGETS)}"
        )
    return role is not None and action in ROLE_ACTIONS.get(role, frozenset())
