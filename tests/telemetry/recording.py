"""A GENEVA_METRICS hook that records gauges, counters and histograms (R-OMET-02)."""

from __future__ import annotations

from collections import Counter
from typing import Any


def _key(tags: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((tags or {}).items()))


class RecordingHook:
    """Records every call; ``counts`` sums the counters per (name, tags)."""

    def __init__(self) -> None:
        self.gauges: list[tuple[str, float, dict[str, str] | None]] = []
        self.increments: list[tuple[str, float, dict[str, str]]] = []
        self.observations: list[tuple[str, float, dict[str, str]]] = []

    def gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        self.gauges.append((name, value, tags))

    def increment(self, name: str, value: float, tags: dict[str, str]) -> None:
        self.increments.append((name, value, dict(tags)))

    def observe(self, name: str, value: float, tags: dict[str, str]) -> None:
        self.observations.append((name, value, dict(tags)))

    def counts(self, name: str) -> Counter[tuple[tuple[str, str], ...]]:
        """How much was added to ``name`` per tag set (sorted tag items)."""
        found: Counter[tuple[tuple[str, str], ...]] = Counter()
        for metric, value, tags in self.increments:
            if metric == name:
                found[_key(tags)] += int(value)
        return found

    def count(self, name: str, **tags: Any) -> int:
        """The total added to ``name`` with exactly these tags."""
        return self.counts(name)[_key(tags)]

    def tag_values(self) -> set[str]:
        """Every tag value any counter or histogram was sent with."""
        return {
            value
            for _, _, tags in self.increments + self.observations
            for value in tags.values()
        }
