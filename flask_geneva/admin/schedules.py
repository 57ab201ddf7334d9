"""The Schedules page and its buttons (R-SCHED-36, R-SCHED-37).

``GET <schedules>/``: one row per declared schedule, by name: its class, cron
expression, zone and ``missed`` policy, paused or not (since when), the next
:data:`NEXT_FIRES` fire times, each in the schedule's zone (written on the
server) and in the operator's (the exact time of R-ADM-40, which the
UTC / local switch rewrites, R-ADM-41), the last fire with its outcome and
error, and the :data:`RECENT_FIRES` latest fires (kind, state, started and
skipped counts, error). Below, the latest operator actions on the schedules
(R-SCHED-35). Reads through :func:`~flask_geneva.engine.schedules.schedule_overview`
and :func:`~flask_geneva.engine.schedules.recent_fires` only (R-ADM-32).

``POST <schedules>/action``: Pause, Resume or Run now, checked like every
admin button (CSRF, R-ADM-05: 400; ``GENEVA_ADMIN_CAN_ACT``, R-ADM-03, or the
role's ``schedule_pause`` / ``schedule_resume`` / ``schedule_run_now``,
R-ADM-213: 403),
then one engine operation (:mod:`flask_geneva.engine.schedules.operations`)
with ``via="admin"`` and the actor (R-ADM-04); Run now with ``process=False``,
so the request never runs a fan-out: the next dispatcher run does. A refusal
(a lost race, a state that changed, an undeclared name, the missing unit) is
a flash message, never a 500.

Without the ``add_schedules`` unit the page says how to install it and shows
the declared schedules without buttons.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

from flask import flash
from flask import redirect
from flask import request
from flask import url_for
from flask_admin import expose

from flask_geneva.admin.access import can_act
from flask_geneva.admin.access import current_actor
from flask_geneva.admin.access import per_action
from flask_geneva.admin.access import permits
from flask_geneva.admin.access import require
from flask_geneva.admin.base_view import GenevaView
from flask_geneva.admin.csrf import action_form
from flask_geneva.admin.flow_control_actions import validated_action_form
from flask_geneva.engine.schedules import pause_schedule
from flask_geneva.engine.schedules import recent_fires
from flask_geneva.engine.schedules import resume_schedule
from flask_geneva.engine.schedules import run_schedule_now
from flask_geneva.engine.schedules import schedule_overview
from flask_geneva.engine.schedules.operations import ScheduleOverview
from flask_geneva.exceptions import GenevaError
from flask_geneva.ext.app_state import current_context

__all__ = [
    "ACTIONS",
    "NEXT_FIRES",
    "NOT_INSTALLED_NOTE",
    "RECENT_ACTIONS",
    "RECENT_FIRES",
    "ScheduleButton",
    "SchedulesView",
    "schedule_buttons",
    "zone_time",
]

#: The buttons of a schedule's row: action -> label.
ACTIONS = {"pause": "Pause", "resume": "Resume", "run_now": "Run now"}
#: How many next fire times a row shows.
NEXT_FIRES = 5
#: How many latest fires a row shows.
RECENT_FIRES = 5
#: How many latest operator actions the page lists (all schedules).
RECENT_ACTIONS = 20
#: What the page says where the ``add_schedules`` unit is missing.
NOT_INSTALLED_NOTE = (
    "Schedules are not installed in this database: run `flask geneva install` "
    "and then `flask db upgrade` to add them (install unit add_schedules). "
    "Until then no schedule fires, and they cannot be paused, resumed or run now."
)
_MAX_SHOWN = 80  # characters of an undeclared posted name in the flash
_READ_ONLY = "read-only: GENEVA_ADMIN_CAN_ACT does not allow you to act"


@dataclasses.dataclass(frozen=True)
class ScheduleButton:
    """One button of a schedule's row, enabled or with the reason it is not."""

    action: str
    label: str
    enabled: bool
    reason: str


def schedule_buttons(
    overview: ScheduleOverview,
    *,
    acting: bool,
    allowed: Callable[[str], bool] | None = None,
) -> list[ScheduleButton]:
    """Pause, Resume and Run now for one schedule (R-SCHED-37).

    Pause is enabled while the schedule runs, Resume while it is paused, Run
    now always (a paused schedule may be run now, R-SCHED-32); none for an
    operator who may not act (R-ADM-03), each then disabled with the reason.

    Args:
        overview: The schedule as read for the page.
        acting: Whether ``GENEVA_ADMIN_CAN_ACT`` allows this operator to act.
        allowed: Under roles, whether the user may use a button (``"pause"``,
            ``"resume"``, ``"run_now"``); the others are left out (R-ADM-213).
    """
    possible = {
        "pause": (not overview.paused, "not possible: the schedule is paused"),
        "resume": (overview.paused, "not possible: the schedule is not paused"),
        "run_now": (True, ""),
    }
    buttons = []
    for action, label in ACTIONS.items():
        if allowed is not None and not allowed(action):
            continue
        enabled, reason = possible[action]
        if enabled and not acting:
            enabled, reason = False, _READ_ONLY
        buttons.append(
            ScheduleButton(action, label, enabled, "" if enabled else reason)
        )
    return buttons


def zone_time(moment: datetime | None, overview: ScheduleOverview) -> str:
    """``"Mon 2026-03-30 09:00 CEST"``: a time in the schedule's own zone."""
    if moment is None:
        return ""
    local = moment.astimezone(overview.schedule.zone)
    return local.strftime("%a %Y-%m-%d %H:%M %Z")


def _allowed_for(name: str) -> Callable[[str], bool] | None:
    """Under roles, which of a schedule's buttons the user may use (R-ADM-213)."""
    if not per_action():
        return None
    return lambda action: permits(f"schedule_{action}", name)


class SchedulesView(GenevaView):
    """``GET <schedules>/`` and ``POST <schedules>/action`` (R-SCHED-36, R-SCHED-37)."""

    @expose("/")
    def index(self) -> str:
        """Render every declared schedule with its fires and buttons."""
        context = current_context()
        session = self.session
        installed = bool(self._columns().schedules)
        overviews = schedule_overview(context, session, count=NEXT_FIRES)
        acting = can_act()
        rows = []
        actions: list[dict[str, Any]] = []
        for overview in overviews:
            name = overview.schedule.name
            fires = (
                recent_fires(context, session, name, limit=RECENT_FIRES)
                if installed and overview.stored
                else []
            )
            rows.append(
                {
                    "view": overview,
                    "fires": fires,
                    "buttons": schedule_buttons(
                        overview, acting=acting, allowed=_allowed_for(name)
                    )
                    if installed
                    else [],
                }
            )
            actions.extend(
                {"schedule": name, **entry} for entry in overview.operator_actions
            )
        actions.sort(key=lambda entry: str(entry.get("at") or ""), reverse=True)
        return self.render(
            "geneva/admin/schedules.html",
            installed=installed,
            not_installed_note="" if installed else NOT_INSTALLED_NOTE,
            rows=rows,
            actions=actions[:RECENT_ACTIONS],
            action_form=action_form(),
            zone_time=zone_time,
            next_fires=NEXT_FIRES,
        )

    @expose("/action", methods=("POST",))
    def action(self) -> Any:
        """Pause, resume or run a schedule now, then back to the page (R-SCHED-37)."""
        _, action = validated_action_form(ACTIONS, what="schedule action")
        name = request.form.get("schedule", "")
        require(f"schedule_{action}", name)  # R-ADM-03, R-ADM-213
        label = ACTIONS[action]
        if name not in self.geneva.schedules:
            # Refused here, the posted name cut short: a forged or stale form
            # must not put kilobytes into the flash (the session cookie).
            shown = name if len(name) <= _MAX_SHOWN else name[:_MAX_SHOWN] + "…"
            flash(
                f"Schedule {shown!r}: {label} refused: no such schedule is "
                "declared (it may have been removed since the page was shown)",
                "error",
            )
            return redirect(url_for(f"{self.endpoint}.index"), code=303)
        context = current_context()
        session = self.session
        session.commit()  # end the reading transaction before locking
        actor = current_actor()
        try:
            if action == "run_now":
                result = run_schedule_now(
                    context, session, name, process=False, actor=actor, via="admin"
                )
                message = (
                    f"Schedule {name!r}: {label} done: fire at "
                    f"{result.fire_at.strftime('%Y-%m-%d %H:%M:%S UTC')} created; "
                    "the dispatcher's next run starts its workflows"
                )
            else:
                operation = pause_schedule if action == "pause" else resume_schedule
                operation(context, session, name, actor=actor, via="admin")
                message = f"Schedule {name!r}: {label} done"
        except (GenevaError, ValueError) as error:
            session.rollback()
            flash(f"Schedule {name!r}: {label} refused: {error}", "error")
        else:
            flash(message, "success")
        return redirect(url_for(f"{self.endpoint}.index"), code=303)
