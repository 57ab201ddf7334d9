"""The workflow page's buttons and the endpoint they post to (R-ADM-20..22, R-ADM-24).

Each button calls the workflow's own flow-control method (``pause``, ``resume``,
``cancel``, ``skip``, ``recover``, ``run_now``), which applies the engine's
flow-control or operator function (:mod:`flask_geneva.engine.flow_control`,
:mod:`flask_geneva.engine.operators.recovery`) with ``via="admin"`` and the actor,
and is enabled in the states the transition table allows its action from
(:func:`~flask_geneva.engine.operator_transaction.allowed_from`). The admin never
writes a state or a row itself (R-ADM-21). The POST checks the CSRF token
(R-ADM-05) and the user's permission for the action on the workflow
(``GENEVA_ADMIN_CAN_ACT``, R-ADM-03, or the role, R-ADM-213) before any change;
under roles a button the user may not use is not shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from flask import abort
from flask import flash
from flask import redirect
from flask import url_for
from flask_admin import expose

from flask_geneva.admin.access import can_act
from flask_geneva.admin.access import current_actor
from flask_geneva.admin.access import per_action
from flask_geneva.admin.access import permits
from flask_geneva.admin.access import require
from flask_geneva.admin.base_view import WorkflowPages
from flask_geneva.admin.csrf import action_form
from flask_geneva.admin.csrf import submitted_action_form
from flask_geneva.admin.running_step import annotate_buttons
from flask_geneva.admin.running_step import in_progress_execution
from flask_geneva.admin.running_step import recovery_facts
from flask_geneva.core import clock
from flask_geneva.engine.operator_transaction import allowed_from
from flask_geneva.engine.operators.run_now import parked_execution
from flask_geneva.engine.operators.run_now import parked_refusal
from flask_geneva.engine.operators.run_now import waiting_execution
from flask_geneva.exceptions import GenevaError

__all__ = [
    "ACTIONS",
    "DESTRUCTIVE",
    "Button",
    "WorkflowActionEndpoint",
    "act",
    "disabled_reasons",
    "validated_action_form",
    "workflow_buttons",
]

#: The workflow page's buttons: action name -> label.
ACTIONS = {
    "pause": "Pause",
    "resume": "Resume",
    "resume_rewind": "Resume from the beginning",
    "cancel": "Cancel",
    "skip": "Skip current step",
    "recover": "Recover running step",
    "run_now": "Run now",
}
#: Actions asked to be confirmed on a page of their own first.
DESTRUCTIVE = ("cancel", "skip", "resume_rewind", "recover")


@dataclasses.dataclass
class Button:
    """One button of the workflow page, enabled or with the reason it is not."""

    action: str
    label: str
    enabled: bool
    reason: str
    destructive: bool
    #: Said beside an enabled button (e.g. Pause on a performing workflow).
    note: str = ""


def workflow_buttons(
    session: Any,
    execution_cls: Any,
    workflow: Any,
    steps: Any,
    executions: list[Any],
    columns: Any,
) -> list[Button]:
    """The buttons of a workflow page, each enabled or with its reason (R-ADM-20).

    Args:
        session: The admin's session.
        execution_cls: The step execution model.
        workflow: The workflow shown.
        steps: Its class's step collection, or None when the class is unknown.
        executions: Its executions on the page, oldest first.
        columns: The optional-column flags of the schema.

    Returns:
        One :class:`Button` per entry of :data:`ACTIONS`, in that order; under
        roles only those the user may use (R-ADM-213).
    """
    acting = can_act()
    roles = per_action()
    buttons = []
    for action, label in ACTIONS.items():
        if roles and not permits(action, workflow):
            continue
        # The states are the transition table's (R-ADM-20); Recover is enabled
        # only while an execution is in progress (R-HK-28), Run now only while
        # the scheduled execution waits (R-ADM-51).
        allowed = workflow.state in allowed_from(action)
        reason = "" if allowed else f"not possible: workflow is {workflow.state}"
        if allowed and action == "resume_rewind":
            allowed, reason = _rewind_possible(workflow, steps, executions, columns)
        if allowed and action == "run_now":
            allowed, reason = _waits(executions, steps)
        if allowed and not acting:
            allowed = False
            reason = "read-only: GENEVA_ADMIN_CAN_ACT does not allow you to act"
        buttons.append(Button(action, label, allowed, reason, action in DESTRUCTIVE))
    running = in_progress_execution(session, execution_cls, workflow.id)
    annotate_buttons(buttons, workflow, running)
    return buttons


def disabled_reasons(buttons: list[Button]) -> list[tuple[list[str], str]]:
    """Each distinct reason of the disabled buttons once, with their labels (R-ADM-45).

    Returns:
        ``[(labels, reason), ...]`` in the buttons' order, e.g.
        ``[(["Pause", "Resume", "Cancel"], "not possible: workflow is finished")]``.
    """
    grouped: dict[str, list[str]] = {}
    for button in buttons:
        if not button.enabled and button.reason:
            grouped.setdefault(button.reason, []).append(button.label)
    return [(labels, reason) for reason, labels in grouped.items()]


def _waits(executions: list[Any], steps: Any) -> tuple[bool, str]:
    if waiting_execution(executions, clock.now()) is None:
        parked = parked_execution(executions)
        if parked is not None:
            step = None if steps is None else steps.named(parked.step_name)
            return False, f"not possible: {parked_refusal(parked, step)}"
        return False, "not possible: the step is not waiting (due already or running)"
    return True, ""


def _rewind_possible(
    workflow: Any, steps: Any, executions: list[Any], columns: Any
) -> tuple[bool, str]:
    if not columns.resumable:
        return False, "the database has no cursor column"
    name = workflow.next_step_name or workflow.current_step_name
    definition = steps.named(name) if steps is not None and name else None
    if definition is None or not definition.is_resumable:
        return False, "the next step is not resumable"
    for execution in reversed(executions):
        if execution.step_name == name:
            if execution.cursor in (None, "", [], {}):
                return False, "the resumable step has no stored cursor"
            return True, ""
    return False, "the resumable step has no stored cursor"


def validated_action_form(allowed: Mapping[str, str], *, what: str) -> tuple[Any, str]:
    """The POSTed action form, checked before any change (R-ADM-05).

    The caller then asks :func:`~flask_geneva.admin.access.require` for the
    action on its target (R-ADM-03, R-ADM-213), before any change.

    Args:
        allowed: The actions this endpoint accepts (name -> label).
        what: How the refusal names the action (``"action"``, ``"bulk action"``).

    Returns:
        ``(form, action)``.

    Raises:
        werkzeug.exceptions.HTTPException: 400 for a missing or invalid CSRF token
            or an action outside ``allowed`` (named with ``what``).
    """
    form = submitted_action_form()
    if form is None:
        abort(400, description="missing or invalid CSRF token")
    action = form.action.data
    if action not in allowed:
        abort(400, description=f"unknown {what} {action!r}")
    return form, str(action)


def act(
    workflow: Any,
    action: str,
    *,
    expected_step: str | None = None,
    execution_id: str | None = None,
    force: bool = False,
) -> None:
    """Call the workflow's own flow-control method for ``action`` (R-ADM-21).

    The method commits its own transaction. ``expected_step`` (the step the
    operator saw) guards Skip: it is refused when the current step changed since
    the page was rendered. ``execution_id`` does the same for Recover, and
    ``force`` is its "within the grace" confirmation (R-HK-28).

    Args:
        workflow: The workflow to act on, loaded in the admin's session.
        action: A key of :data:`ACTIONS`.
        expected_step: Skip's guard, or None.
        execution_id: Recover's execution id as posted, or None.
        force: Recover within the grace period.

    Raises:
        GenevaError: The engine refused (wrong state, lost race, changed step).
        ValueError: A posted value is not valid (an execution id that is no id).
    """
    actor = current_actor()
    if action == "recover":
        workflow.recover(execution_id, force=force, actor=actor, via="admin")
        return
    if action == "pause":
        workflow.pause(actor=actor, via="admin")
    elif action == "resume":
        workflow.resume(actor=actor, via="admin")
    elif action == "resume_rewind":
        workflow.resume(rewind=True, actor=actor, via="admin")
    elif action == "cancel":
        workflow.cancel(actor=actor, via="admin")
    elif action == "run_now":
        workflow.run_now(actor=actor, via="admin")
    else:
        workflow.skip(actor=actor, via="admin", expected_step=expected_step)


class WorkflowActionEndpoint(WorkflowPages):
    """The workflow page's action endpoint, ``POST <workflows>/<id>/action``."""

    @expose("/<workflow_id>/action", methods=("POST",))
    def action(self, workflow_id: str) -> Any:
        """Confirm a destructive action, else apply it and redirect (R-ADM-20..22)."""
        form, action = validated_action_form(ACTIONS, what="action")
        key = self._parse_key(workflow_id)
        workflow = self._load(key) if key is not None else None
        if workflow is None:
            abort(404)
        require(action, workflow)  # R-ADM-03, R-ADM-213
        label = ACTIONS[action]
        step = (form.step.data or "").strip() or None
        if action in DESTRUCTIVE and form.confirm.data != "yes":
            return self.render(
                "geneva/admin/confirm.html",
                workflow=workflow,
                action=action,
                label=label,
                step=step or "",
                action_form=action_form(),
                recovery=recovery_facts(
                    self.session, self.geneva.StepExecution, workflow
                )
                if action == "recover"
                else None,
            )
        self.session.commit()  # end the reading transaction before locking
        try:
            act(
                workflow,
                action,
                expected_step=step,
                execution_id=(form.execution.data or "").strip() or None,
                force=form.force.data == "yes",
            )
        except (GenevaError, ValueError) as error:
            # ValueError: a tampered or stale form value (an execution id that is
            # no id), refused like a lost race rather than answered with a 500.
            self.session.rollback()
            flash(f"Workflow {workflow_id}: {label} refused: {error}", "error")
        else:
            state = self._load(key).state
            flash(
                f"Workflow {workflow_id}: {label} done; state is now {state}",
                "success",
            )
        return redirect(
            url_for(f"{self.endpoint}.detail", workflow_id=workflow_id), code=303
        )
