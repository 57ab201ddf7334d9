"""Child workflows, fan-out/fan-in and workflow results (SPEC §25).

A step starts children (:mod:`.start`) in its own transaction; each child
settles for its parent once, in O(1), when it finishes, is canceled or is
paused by an error (:mod:`.settle`); a ``wait_for_children`` step parks until
enough settled and is woken by the settlement that reaches the count
(:mod:`.gate`); results are one JSON value per workflow (:mod:`.results`); the
dispatcher publishes lost wakes again and cancels a canceled parent's children
(:mod:`.dispatch`).
"""

from __future__ import annotations

from flask_geneva.engine.children import settle as _settle  # noqa: F401 - registers
