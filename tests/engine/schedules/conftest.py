"""The schedule tests' fixtures (SPEC §26)."""

from __future__ import annotations

from tests.engine.schedules.support import declare

__all__ = ["declare"]
