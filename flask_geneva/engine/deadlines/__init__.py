"""Workflow deadlines (SPEC §27.1, R-DL-01..52).

A workflow may have a deadline (``deadline_at``): set by ``create(deadline=...)``,
by its class's ``__geneva_deadline__``, or inherited from its parent
(:mod:`.children`). The dispatcher's pass (:mod:`.enforce`) cancels, or
pauses, every ongoing workflow whose deadline passed, each under its row lock
in its own transaction, recorded as an operator action ``via="deadline"``.
The values themselves are checked in :mod:`flask_geneva.dsl.deadlines`; the
statements on the column are in :mod:`flask_geneva.db.deadlines`.
"""

from __future__ import annotations
