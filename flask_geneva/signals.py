"""Instrumentation signals (SPEC §12.1): blinker signals in a private namespace.

Each is sent as ``signal.send(<workflow class>, payload=<dict>)``; receivers can
filter by workflow class. Payload keys (R-SIG-01): ``execution_id``,
``workflow_id``, ``workflow_class`` (type identity), ``step_name``, ``resumable``
(only for resumable steps), ``started_at``/``finished_at`` (aware UTC) and
``duration`` (float seconds), plus ``outcome`` and, per signal, ``exception``,
``wait``, ``workflow_state``/``step_state``.

A receiver that raises is logged and skipped; it never changes workflow state
(R-SIG-06).
"""

from __future__ import annotations

import logging
from typing import Any

from blinker import Namespace
from blinker import Signal

__all__ = ["finalize", "precondition", "send_safely", "step"]

_log = logging.getLogger("flask_geneva")

namespace = Namespace()

#: Condition evaluation ended: outcome passed/skipped/canceled/exception (R-SIG-02).
precondition = namespace.signal("precondition.geneva_drive")
#: The step body ran: outcome completed/interrupted/cancel/pause/... (R-SIG-03).
step = namespace.signal("step.geneva_drive")
#: Finalization committed: workflow_state and step_state as stored (R-SIG-04).
finalize = namespace.signal("finalize.geneva_drive")


def send_safely(signal: Signal, sender: Any, payload: dict[str, Any]) -> None:
    """Send ``payload`` to each receiver of ``signal``, isolating errors (R-SIG-06).

    Args:
        signal: One of :data:`precondition`, :data:`step`, :data:`finalize`.
        sender: The workflow class.
        payload: The event dict (R-SIG-01).
    """
    if not signal.receivers:
        return
    for receiver in signal.receivers_for(sender):
        try:
            receiver(sender, payload=payload)
        except Exception as error:  # noqa: BLE001 - R-SIG-06: receivers cannot break execution
            _log.warning(
                "receiver %r of signal %s raised %r; ignored",
                receiver,
                getattr(signal, "name", signal),
                error,
            )
