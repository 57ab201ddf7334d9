"""Hypothesis settings shared by the property tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck
from hypothesis import settings


def with_fixtures(max_examples: int) -> Callable[[Any], Any]:
    """Hypothesis ``settings`` for a test that also takes pytest fixtures:
    ``max_examples`` examples, no deadline, and no health check against
    function-scoped fixtures (they are set up once for all examples, which these
    tests allow for)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
