"""The admin's audit records, on the ``flask_geneva.admin`` logger (R-ADM-202, 214).

A change an operator makes is recorded on the workflow itself (R-PDR-05) or the
schedule (R-SCHED-35). What has no row to be written on is a log record here,
with the actor and the fields as ``extra`` attributes (a JSON log formatter
writes them as keys, R-OLOG-*): a workflow started from the admin (INFO,
besides its ``start`` operator action), a signal delivered (R-WSIG-68) and every
request the admin refused for want of a permission (WARNING, R-ADM-214).
"""

from __future__ import annotations

from typing import Any

from flask import request

from flask_geneva.core.tagged_logging import module_logger

__all__ = ["AUDIT_LOGGER", "audit_refusal", "audit_start", "describe_target"]

#: The logger the admin's audit records go to (R-WSIG-68, R-ADM-202, R-ADM-214).
AUDIT_LOGGER = "flask_geneva.admin"
_audit = module_logger(AUDIT_LOGGER)


def describe_target(target: Any) -> str:
    """How a record names an action's target: ``"workflow 17 (Payment)"``,
    ``"class Payment"``, ``"schedule 'digest'"`` (a name cut at 80 characters),
    or ``""`` for None."""
    if target is None:
        return ""
    if isinstance(target, type):
        return f"class {getattr(target, '__geneva_type__', target.__name__)}"
    if isinstance(target, str):
        # A forged form may post kilobytes: the record names the start.
        shown = target if len(target) <= 80 else target[:80] + "…"
        return f"schedule {shown!r}"
    return f"workflow {getattr(target, 'id', '?')} ({getattr(target, 'type', '?')})"


def audit_refusal(
    action: str, target: Any, *, actor: str | None, role: str | None, reason: str
) -> None:
    """Record a request refused for want of a permission (R-ADM-214).

    One WARNING record naming the actor, the action, the target, the method
    and path; ``extra``: ``geneva_actor``, ``geneva_role``, ``geneva_action``,
    ``geneva_target``, ``geneva_via`` (``"admin"``), ``geneva_outcome``
    (``"refused"``), ``geneva_path``, ``geneva_method``.

    Args:
        action: The admin action refused (a key of
            :data:`~flask_geneva.admin.roles.ACTION_TARGETS`).
        target: What it was asked about (a workflow, class, schedule name, None).
        actor: The operator (R-ADM-04), or None.
        role: The user's role when roles decide, else None.
        reason: Why, as the 403 page says it.
    """
    target_text = describe_target(target)
    _audit.warning(
        "admin: %s%s refused for %s: %s (%s %s)",
        action,
        f" on {target_text}" if target_text else "",
        actor or "(unknown actor)",
        reason,
        request.method,
        request.path,
        extra={
            "geneva_actor": actor,
            "geneva_role": role,
            "geneva_action": action,
            "geneva_target": target_text,
            "geneva_via": "admin",
            "geneva_outcome": "refused",
            "geneva_path": request.path,
            "geneva_method": request.method,
        },
    )


def audit_start(workflow: Any, hero: str, *, actor: str | None) -> None:
    """Record a workflow started from the admin (INFO, R-ADM-202).

    ``extra``: ``geneva_workflow_id``, ``geneva_workflow_type``,
    ``geneva_hero``, ``geneva_actor``, ``geneva_via`` (``"admin"``),
    ``geneva_action`` (``"start"``).
    """
    _audit.info(
        "workflow %s: %s started via admin by %s for hero %s",
        workflow.id,
        workflow.type,
        actor or "(unknown actor)",
        hero or "(none)",
        extra={
            "geneva_workflow_id": str(workflow.id),
            "geneva_workflow_type": workflow.type,
            "geneva_hero": hero,
            "geneva_actor": actor,
            "geneva_via": "admin",
            "geneva_action": "start",
        },
    )
