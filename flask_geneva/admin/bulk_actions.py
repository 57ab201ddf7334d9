"""Bulk pause, resume, cancel and run now on the workflows list (R-ADM-23, R-ADM-52).

``POST <workflows>/bulk`` acts on the checked rows, or with ``scope=all`` on every
workflow matching the list's filters. Each workflow goes through the same
:func:`~flask_geneva.admin.flow_control_actions.act` as a single button, in its
own transaction; a refusal is listed with its reason and the others go on; the
result page lists the workflows changed too (R-ADM-52). The user needs the
``bulk`` (checked rows) or ``bulk_all`` permission, and each workflow is asked
its own action's permission: one refused is listed with the reason and
audited (R-ADM-213, R-ADM-214).
"""

from __future__ import annotations

from typing import Any

from flask import abort
from flask import flash
from flask import redirect
from flask import request
from flask import url_for
from flask_admin import expose

import flask_geneva.admin.filters as workflow_filters
from flask_geneva.admin.access import current_actor
from flask_geneva.admin.access import current_role
from flask_geneva.admin.access import permits
from flask_geneva.admin.access import refusal_reason
from flask_geneva.admin.access import require
from flask_geneva.admin.audit import audit_refusal
from flask_geneva.admin.base_view import WorkflowPages
from flask_geneva.admin.csrf import action_form
from flask_geneva.admin.filters import capped_count
from flask_geneva.admin.filters import format_count
from flask_geneva.admin.filters import matching_id_batches
from flask_geneva.admin.flow_control_actions import act
from flask_geneva.admin.flow_control_actions import validated_action_form
from flask_geneva.core import clock
from flask_geneva.exceptions import GenevaError
from flask_geneva.ext.app_state import current_state
from flask_geneva.policies import release_spread

__all__ = ["BULK_ACTIONS", "MAX_BULK_IDS", "MAX_LISTED_REFUSALS", "WorkflowBulkActions"]

#: The bulk actions: action name -> label.
BULK_ACTIONS = {
    "pause": "Pause",
    "resume": "Resume",
    "cancel": "Cancel",
    "run_now": "Run now",
}
#: Most workflows one bulk request acts on (the checked rows of one page).
MAX_BULK_IDS = 500
#: Refusals (and changed workflows) listed on a bulk result page; the rest are
#: only counted.
MAX_LISTED_REFUSALS = 1000


def _spread_if(spread: bool) -> Any:
    """Spread a bulk resume over ``GENEVA_RELEASE_SPREAD`` (R-SCH-20)."""
    window = current_state().config.release_spread if spread else None
    return release_spread.spread_releases(window)


class WorkflowBulkActions(WorkflowPages):
    """The bulk endpoint of the workflows list (R-ADM-23)."""

    @expose("/bulk", methods=("GET",))
    def bulk_get(self) -> Any:
        """Answer a GET of the bulk URL with 405 and ``Allow: POST`` (R-ADM-05).

        Without this rule the GET would fall through to ``/<workflow_id>`` and get
        a misleading 404 for a workflow called "bulk".
        """
        abort(405, valid_methods=["POST"])

    @expose("/bulk", methods=("POST",))
    def bulk(self) -> Any:
        """Pause, resume or cancel the checked rows or all matching (R-ADM-23).

        ``scope=all`` acts on every workflow matching the filter fields of the form
        (the list's filters, re-validated here); otherwise on the checked ``ids``.
        Each workflow is its own transaction.
        """
        form, action = validated_action_form(BULK_ACTIONS, what="bulk action")
        every_match = request.form.get("scope") == "all"
        require("bulk_all" if every_match else "bulk")  # R-ADM-213
        if every_match:
            return self._bulk_all(action, confirmed=form.confirm.data == "yes")
        keys = []
        for raw in request.form.getlist("ids")[:MAX_BULK_IDS]:
            key = self._parse_key(raw)
            if key is not None and key not in keys:
                keys.append(key)
        label = BULK_ACTIONS[action]
        if not keys:
            flash(f"{label}: no workflows were checked", "error")
            return redirect(url_for(f"{self.endpoint}.index"), code=303)
        if action == "cancel" and form.confirm.data != "yes":
            return self.render(
                "geneva/admin/bulk_confirm.html",
                action=action,
                label=label,
                ids=keys,
                action_form=action_form(),
            )
        self.session.commit()  # end the reading transaction before locking
        changed: list[Any] = []
        refused: list[tuple[Any, str]] = []
        with _spread_if(action == "resume" and len(keys) > 1):
            for key in keys:
                reason = self._act_on(key, action)
                if reason is None:
                    changed.append(key)
                else:
                    refused.append((key, reason))
        return self.render(
            "geneva/admin/bulk_result.html",
            label=label,
            done_count=len(changed),
            changed=changed,
            refused=refused,
            refused_count=len(refused),
            filters={},
        )

    def _bulk_all(self, action: str, *, confirmed: bool) -> Any:
        """Confirm, then act on every workflow matching the form's filters (R-ADM-23).

        The filters are validated by the same code as the list. When any value was
        ignored, neither the confirmation nor the confirmed POST acts: the page
        shows the notes and says that nothing was changed (acting would reach
        more workflows than the operator's filter asked for). The matching ids are
        read in keyset batches of ``GENEVA_HOUSEKEEPING_BATCH_SIZE``; the reading
        transaction ends before each batch is acted on.
        """
        label = BULK_ACTIONS[action]
        matching = self._filters(request.form)
        workflow_cls = self.geneva.Workflow
        config = current_state().config
        if matching.notes:
            return self.render(
                "geneva/admin/bulk_all_confirm.html",
                action=action,
                label=label,
                refused=True,
                filters=matching.params,
                notes=matching.notes,
            )
        if not confirmed:
            count, more = capped_count(self.session, workflow_cls, matching)
            return self.render(
                "geneva/admin/bulk_all_confirm.html",
                action=action,
                label=label,
                match_count=count,
                match_label=format_count(count, more),
                capped=more,
                cap=workflow_filters.COUNT_CAP,  # read per request: tests lower it
                batch_size=config.housekeeping_batch_size,
                filters=matching.params,
                filtered=matching.is_active,
                descriptions=matching.descriptions,
                refused=False,
                caveats=matching.caveats,
                action_form=action_form(),
            )
        done = 0
        changed: list[Any] = []
        refused: list[tuple[Any, str]] = []
        refused_count = 0
        batches = matching_id_batches(
            self.session,
            workflow_cls,
            matching,
            batch_size=config.housekeeping_batch_size,
            created_until=clock.now(),
        )
        for keys in batches:
            self.session.commit()  # end the reading transaction before locking
            with _spread_if(action == "resume"):
                for key in keys:
                    reason = self._act_on(key, action)
                    if reason is None:
                        done += 1
                        if len(changed) < MAX_LISTED_REFUSALS:
                            changed.append(key)
                        continue
                    refused_count += 1
                    if len(refused) < MAX_LISTED_REFUSALS:
                        refused.append((key, reason))
        self.session.commit()
        return self.render(
            "geneva/admin/bulk_result.html",
            label=f"{label} all matching",
            done_count=done,
            changed=changed,
            refused=refused,
            refused_count=refused_count,
            filters=matching.params,
        )

    def _act_on(self, key: Any, action: str) -> str | None:
        """Act on one workflow in its own transaction; the refusal reason or None."""
        workflow = self._load(key)
        if workflow is None:
            self.session.rollback()
            return f"workflow {key} no longer exists"
        if not permits(action, workflow):  # R-ADM-213: each workflow its own
            reason = refusal_reason(action)
            audit_refusal(
                action,
                workflow,
                actor=current_actor(),
                role=current_role(),
                reason=reason,
            )
            self.session.rollback()
            return f"not allowed: {reason}"
        try:
            act(workflow, action)  # commits its own transaction
        except GenevaError as error:
            self.session.rollback()
            return str(error)
        return None
