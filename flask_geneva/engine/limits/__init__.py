"""Flow control by limits: concurrency slots per (limit, key) (SPEC §24).

A step declared with ``@step(limit=...)`` takes one slot of each of its limits
in the executor's Phase 1, under the workflow and execution locks
(:mod:`.acquire`); over the cap the execution stays ``scheduled`` without a
broker message and waits in a queue. A slot is given back by whatever moves
the execution out of ``in_progress`` (or a waiter out of ``scheduled``), through
the write path's listener (:mod:`.release`), and the freed slot is granted to
the next waiter in the same transaction, whose task is published after the
commit (:mod:`.wake`). The dispatcher re-publishes grants whose message was
lost and returns those of paused workflows (:mod:`.timers`).
"""

from __future__ import annotations

from flask_geneva.engine.limits import release as _release  # noqa: F401 - registers
from flask_geneva.engine.limits.acquire import NOT_INSTALLED_MESSAGE
from flask_geneva.engine.limits.acquire import Parked
from flask_geneva.engine.limits.acquire import claim_inline
from flask_geneva.engine.limits.acquire import claim_slots
from flask_geneva.engine.limits.acquire import installed
from flask_geneva.engine.limits.acquire import parked
from flask_geneva.engine.limits.acquire import pass_on_chain_holds
from flask_geneva.engine.limits.release import release_chain_holds
from flask_geneva.engine.limits.release import return_grant_while_paused
from flask_geneva.engine.limits.timers import dispatch_limit_grants

__all__ = [
    "NOT_INSTALLED_MESSAGE",
    "Parked",
    "claim_inline",
    "claim_slots",
    "dispatch_limit_grants",
    "installed",
    "parked",
    "pass_on_chain_holds",
    "release_chain_holds",
    "return_grant_while_paused",
]
