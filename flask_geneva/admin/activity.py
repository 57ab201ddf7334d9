"""Outcomes over time per class and step durations for the admin (R-ADM-54, 55).

The overview draws, per workflow class, the completed and failed step
executions of each of the last 24 hours as a small server-rendered SVG bar
chart (like the timeline, ``templates/geneva/admin/_activity_chart.html``; no
script). A class page lists each step's median and 95th-percentile duration
(``finished_at - started_at``) over its latest completed executions. The reads
are in :mod:`flask_geneva.db.queries.admin_stats`; this module only arranges numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from collections.abc import Sequence
from datetime import datetime
from datetime import timedelta

from flask_geneva.admin.timeline_time import format_span

__all__ = [
    "CHART_HEIGHT",
    "CHART_WIDTH",
    "HOURS",
    "ActivityBar",
    "ActivityChart",
    "StepDurations",
    "activity_charts",
    "hour_edges",
    "percentile",
    "step_durations",
]

#: Hours shown by the overview's charts (R-ADM-54).
HOURS = 24
#: The SVG's coordinate size (it scales to the column's width).
CHART_WIDTH = 480
CHART_HEIGHT = 48
_BAR_GAP = 2


@dataclasses.dataclass(frozen=True)
class ActivityBar:
    """One hour's bar: completed (bottom) and failed (stacked on top)."""

    x: float
    width: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclasses.dataclass(frozen=True)
class ActivityChart:
    """One class's chart: totals, the busiest hour and the bars."""

    type: str
    completed: int
    failed: int
    peak: int
    bars: list[ActivityBar]


def hour_edges(now: datetime, hours: int = HOURS) -> list[datetime]:
    """``hours + 1`` bucket edges on whole UTC hours; the last ends ``now``'s hour."""
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return [end - timedelta(hours=hours - index) for index in range(hours + 1)]


def activity_charts(
    rows: Iterable[tuple[str, int, str, int]], edges: Sequence[datetime]
) -> list[ActivityChart]:
    """Lay out the per-class charts of ``outcome_counts`` rows (R-ADM-54).

    Each class's bars share its own scale (its busiest hour is full height);
    the busiest hour is written beside the chart. Classes are sorted by name.

    Args:
        rows: ``(type, bucket, state, count)`` from
            :func:`flask_geneva.db.queries.admin_stats.outcome_counts`.
        edges: The bucket edges the rows were counted with.
    """
    hours = len(edges) - 1
    counts: dict[str, dict[str, list[int]]] = {}
    for type_name, bucket, state, count in rows:
        series = counts.setdefault(
            type_name, {"completed": [0] * hours, "failed": [0] * hours}
        )
        if 0 <= bucket < hours and state in series:
            series[state][bucket] += count
    step = CHART_WIDTH / hours
    charts = []
    for type_name in sorted(counts):
        done, failed = counts[type_name]["completed"], counts[type_name]["failed"]
        peak = max((d + f for d, f in zip(done, failed, strict=True)), default=0)
        scale = CHART_HEIGHT / peak if peak else 0.0
        bars = []
        for index in range(hours):
            done_height = done[index] * scale
            failed_height = failed[index] * scale
            start = edges[index].strftime("%Y-%m-%d %H:%M")
            bars.append(
                ActivityBar(
                    x=round(index * step, 2),
                    width=round(step - _BAR_GAP, 2),
                    done_y=round(CHART_HEIGHT - done_height, 2),
                    done_height=round(done_height, 2),
                    failed_y=round(CHART_HEIGHT - done_height - failed_height, 2),
                    failed_height=round(failed_height, 2),
                    title=f"{start} UTC, 1 h: {done[index]} completed, "
                    f"{failed[index]} failed",
                )
            )
        charts.append(ActivityChart(type_name, sum(done), sum(failed), peak, bars))
    return charts


def percentile(sorted_values: Sequence[float], share: float) -> float:
    """The ``share`` (0..1) percentile of ascending values, nearest rank.

    Raises:
        ValueError: ``sorted_values`` is empty or ``share`` is outside 0..1.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= share <= 1:
        raise ValueError(f"share must be from 0 to 1, got {share!r}")
    rank = max(math.ceil(share * len(sorted_values)), 1)
    return sorted_values[rank - 1]


@dataclasses.dataclass(frozen=True)
class StepDurations:
    """One step's durations over the sample: count, median and p95 (R-ADM-55)."""

    step: str
    count: int
    median: str
    p95: str


def step_durations(
    rows: Iterable[tuple[str, datetime, datetime]], step_order: Sequence[str]
) -> list[StepDurations]:
    """Median and 95th percentile of each step's durations (R-ADM-55).

    Args:
        rows: ``(step name, started_at, finished_at)`` of completed executions.
        step_order: The class's step names in order; other names follow sorted.
    """
    seconds: dict[str, list[float]] = {}
    for step_name, started, finished in rows:
        seconds.setdefault(step_name, []).append(
            max((finished - started).total_seconds(), 0.0)
        )
    known = [name for name in step_order if name in seconds]
    order = known + sorted(name for name in seconds if name not in step_order)
    result = []
    for name in order:
        values = sorted(seconds[name])
        result.append(
            StepDurations(
                name,
                len(values),
                format_span(timedelta(seconds=percentile(values, 0.5))),
                format_span(timedelta(seconds=percentile(values, 0.95))),
            )
        )
    return result
