"""Plays opentelemetry-api not being installed, in a subprocess a test starts.

``from tests.support.no_opentelemetry import NoOpenTelemetry`` then
``sys.meta_path.insert(0, NoOpenTelemetry())`` before importing flask_geneva: every
``opentelemetry`` import then fails as it does without the ``otel`` extra, and the
names tried are kept in ``NoOpenTelemetry.attempts`` (R-OTEL-01, R-OLOG-03).
"""

from __future__ import annotations

from typing import Any


class NoOpenTelemetry:
    """A ``sys.meta_path`` finder refusing ``opentelemetry`` and its submodules."""

    #: Every ``opentelemetry`` module name an import tried, in order.
    attempts: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        """Refuse ``opentelemetry*`` (noting the name); leave the rest to others."""
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            self.attempts.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
