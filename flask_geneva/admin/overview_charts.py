"""The overview at a glance: throughput by outcome and the work in flight per
class, laid out for server-rendered SVG (R-ADM-130..132).

Pure code: no Flask, no database. The reads are
:func:`flask_geneva.db.queries.throughput.finished_counts` (one grouped
statement per throughput chart) and
:func:`~flask_geneva.db.queries.throughput.active_counts`; this module turns
their rows into pixel positions and plain-text strings that
``templates/geneva/admin/_overview_charts.html`` draws, as
:mod:`~flask_geneva.admin.timeline_chart` does for a workflow's timeline.
Colours are CSS classes (``static/geneva/geneva.css``); every text goes
through Jinja's escaping (R-ADM-06).

How the charts read:

* **Finished per minute, last hour**: 60 one-minute bars (the current minute
  last, still filling), each stacked by outcome.
* **Finished per minute, last day**: 24 one-hour bars (the current hour last),
  each bar's height the hour's executions per minute (the current hour's over
  the minutes gone), stacked by outcome, so both charts share one unit.
* Each chart scales to its own busiest bar and names it ("peak 42 a
  minute"); each bar's ``<title>`` gives its time, count, rate and outcomes;
  the same numbers are in a table behind the chart (screen readers, copying).
* **Waiting and running per class**: one row per class with its workflows
  running a step (``performing``), waiting (``ready``: for their step's time,
  a worker, a signal, children or a limit's slot) and paused (waiting for
  Resume), drawn from the class x state counts the overview reads anyway
  (one grouped read along the ``(type, state)`` index, R-ADM-10), as a bar on
  a scale shared by the classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from collections.abc import Sequence
from datetime import datetime
from datetime import timedelta

__all__ = [
    "ACTIVE_SERIES",
    "OUTCOME_SERIES",
    "ActiveChart",
    "ActiveRow",
    "Segment",
    "ThroughputBar",
    "ThroughputChart",
    "active_chart",
    "minute_edges",
    "series_of",
    "throughput_chart",
]

#: The outcome series, bottom to top: (key, label, outcomes). An outcome no
#: series names counts as ``other`` (R-ADM-130).
OUTCOME_SERIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("succeeded", "succeeded", ("success", "continued")),
    ("reattempted", "reattempted", ("reattempted",)),
    ("failed", "failed", ("failed",)),
    ("skipped", "skipped", ("skipped",)),
    ("canceled", "canceled", ("canceled",)),
    ("recovered", "recovered", ("recovered",)),
    ("stopped", "stopped by a pause", ("workflow_paused",)),
    ("other", "other", ()),
)
#: The work in flight per class, left to right: (key, label, workflow state)
#: (R-ADM-131).
ACTIVE_SERIES: tuple[tuple[str, str, str], ...] = (
    ("running", "running", "performing"),
    ("waiting", "waiting", "ready"),
    ("paused", "paused", "paused"),
)

#: The throughput charts' drawing size (the SVG's viewBox; CSS scales it).
WIDTH = 600
HEIGHT = 130
_TOP = 16.0  # room for the peak label
_AXIS_Y = 108.0
_LABEL_Y = 124.0
_GAP = 1.0
_TICK_ROOM = 15.0  # half a tick label's width
#: The per-class bars' drawing size.
ACTIVE_WIDTH = 320
ACTIVE_HEIGHT = 14

_BY_OUTCOME = {
    outcome: key for key, _, outcomes in OUTCOME_SERIES for outcome in outcomes
}


def series_of(outcome: str) -> str:
    """The :data:`OUTCOME_SERIES` key an execution outcome counts in."""
    return _BY_OUTCOME.get(outcome, "other")


@dataclasses.dataclass(frozen=True)
class Segment:
    """One coloured part of a bar: its series key (a CSS class), position, size."""

    series: str
    x: float
    y: float
    width: float
    height: float


@dataclasses.dataclass(frozen=True)
class ThroughputBar:
    """One bucket's bar: its stacked segments and its tooltip."""

    x: float
    width: float
    segments: list[Segment]
    title: str


@dataclasses.dataclass(frozen=True)
class ThroughputChart:
    """A throughput chart laid out (R-ADM-130).

    Attributes:
        key: ``"hour"`` or ``"day"`` (ids and CSS).
        title: The chart's name, also the SVG's ``<title>``.
        description: One sentence of what it shows (the SVG's ``<desc>``).
        total: Executions finished in the window.
        peak: The busiest bar's rate, written ("42 a minute").
        bars: One per bucket, oldest first.
        ticks: ``(x, text)`` axis labels (UTC).
        series: ``(key, label, total)`` of the series with executions.
        rows: The table behind the chart: ``(bucket text, {series: count},
            total, rate text)`` for each bucket with executions.
        width, height, axis_y, label_y: The drawing's geometry.
    """

    key: str
    title: str
    description: str
    total: int
    peak: str
    bars: list[ThroughputBar]
    ticks: list[tuple[float, str]]
    series: list[tuple[str, str, int]]
    rows: list[tuple[str, dict[str, int], int, str]]
    width: int = WIDTH
    height: int = HEIGHT
    axis_y: float = _AXIS_Y
    label_y: float = _LABEL_Y


def minute_edges(now: datetime, minutes: int = 60) -> list[datetime]:
    """``minutes + 1`` bucket edges on whole UTC minutes; the last ends ``now``'s
    minute (so the current minute is the last bucket)."""
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return [end - timedelta(minutes=minutes - index) for index in range(minutes + 1)]


def _rate(value: float) -> str:
    """A rate per minute in words: ``"42"``, ``"3.5"``, ``"0.02"``."""
    if value >= 10 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.2g}" if value < 1 else f"{value:.1f}"


def throughput_chart(
    rows: Iterable[tuple[datetime, str, int]],
    edges: Sequence[datetime],
    *,
    now: datetime,
    key: str,
    title: str,
) -> ThroughputChart:
    """Lay out :func:`~flask_geneva.db.queries.throughput.finished_counts` rows.

    Args:
        rows: ``(bucket start, outcome, count)``; a bucket start not among
            ``edges`` (a clock change between the read and now) is left out.
        edges: Ascending aware UTC bucket edges, all one width apart.
        now: The request's time: the last bucket's rate counts the time gone.
        key: ``"hour"`` or ``"day"``.
        title: The chart's name.

    Returns:
        The chart; with no execution in the window its bars are empty and its
        ``total`` is 0.
    """
    buckets = len(edges) - 1
    width_of_bucket = edges[1] - edges[0]
    index_of = {edge: index for index, edge in enumerate(edges[:-1])}
    counts: list[dict[str, int]] = [{} for _ in range(buckets)]
    for start, outcome, count in rows:
        index = index_of.get(start)
        if index is not None and count > 0:
            series = series_of(outcome)
            counts[index][series] = counts[index].get(series, 0) + count
    minutes = []
    for index in range(buckets):
        gone = min(edges[index + 1], now) - edges[index]
        minutes.append(max(gone, timedelta(minutes=1)).total_seconds() / 60)
    totals = [sum(bucket.values()) for bucket in counts]
    rates = [total / span for total, span in zip(totals, minutes, strict=True)]
    peak = max(rates, default=0.0)
    scale = (_AXIS_Y - _TOP) / peak if peak else 0.0
    step = WIDTH / buckets
    fmt = "%H:%M" if width_of_bucket < timedelta(hours=1) else "%H:00"
    bars = []
    table = []
    order = [series for series, _, _ in OUTCOME_SERIES]
    for index in range(buckets):
        x = round(index * step, 2)
        bar_width = round(step - _GAP, 2)
        y = _AXIS_Y
        segments = []
        for series in order:
            count = counts[index].get(series, 0)
            if not count:
                continue
            height = count / minutes[index] * scale
            y -= height
            segments.append(
                Segment(series, x, round(y, 2), bar_width, round(height, 2))
            )
        start = edges[index]
        span = f"{start:%Y-%m-%d {fmt}} to {edges[index + 1]:{fmt}} UTC"
        detail = ", ".join(
            f"{counts[index][series]:,} {label}"
            for series, label, _ in OUTCOME_SERIES
            if counts[index].get(series)
        )
        rate = _rate(rates[index])
        title_text = f"{span}: {totals[index]:,} finished"
        if width_of_bucket > timedelta(minutes=1):
            title_text += f", {rate} a minute"
        bars.append(
            ThroughputBar(
                x, bar_width, segments, title_text + (f" — {detail}" if detail else "")
            )
        )
        if totals[index]:
            table.append((span, counts[index], totals[index], rate))
    ticks = _ticks(edges, step, fmt)
    total = sum(totals)
    series_totals = [
        (series, label, sum(bucket.get(series, 0) for bucket in counts))
        for series, label, _ in OUTCOME_SERIES
    ]
    shown = [entry for entry in series_totals if entry[2]]
    window = "hour" if key == "hour" else "24 hours"
    description = (
        f"Step executions finished per minute over the last {window}, by outcome, "
        f"{buckets} bars of {_bucket_words(width_of_bucket)} (UTC): {total:,} in "
        "all"
        + (
            "; " + ", ".join(f"{count:,} {label}" for _, label, count in shown)
            if shown
            else ""
        )
        + (f"; peak {_rate(peak)} a minute." if peak else ".")
    )
    return ThroughputChart(
        key=key,
        title=title,
        description=description,
        total=total,
        peak=f"{_rate(peak)} a minute" if peak else "",
        bars=bars,
        ticks=ticks,
        series=shown,
        rows=table,
    )


def _bucket_words(width: timedelta) -> str:
    minutes = int(width.total_seconds() // 60)
    if minutes % 60 == 0:
        hours = minutes // 60
        return "one hour" if hours == 1 else f"{hours} hours"
    return "one minute" if minutes == 1 else f"{minutes} minutes"


def _ticks(edges: Sequence[datetime], step: float, fmt: str) -> list[tuple[float, str]]:
    """About six axis labels at round times, every 10 minutes or 4 hours,
    centred under their bar; none cut by the chart's edge."""
    every = 10 if fmt == "%H:%M" else 4
    ticks = []
    for index, edge in enumerate(edges[:-1]):
        value = edge.minute if fmt == "%H:%M" else edge.hour
        x = index * step + step / 2
        if value % every == 0 and _TICK_ROOM <= x <= WIDTH - _TICK_ROOM:
            ticks.append((round(x, 2), f"{edge:{fmt}}"))
    return ticks


@dataclasses.dataclass(frozen=True)
class ActiveRow:
    """One class's executions in flight: counts per kind and its bar."""

    type: str
    counts: dict[str, int]
    total: int
    segments: list[Segment]
    title: str


@dataclasses.dataclass(frozen=True)
class ActiveChart:
    """The per-class chart of the work in flight (R-ADM-131)."""

    rows: list[ActiveRow]
    totals: dict[str, int]
    total: int
    description: str
    width: int = ACTIVE_WIDTH
    height: int = ACTIVE_HEIGHT


def active_chart(rows: Iterable[tuple[str, str, int]]) -> ActiveChart:
    """Lay out the class x state counts (R-ADM-10) as the work in flight.

    Args:
        rows: ``(workflow type, workflow state, count)``; finished and
            canceled workflows (and unknown states) are left out.

    Classes with work in flight are sorted by name; the bars share one scale,
    the busiest class full width.
    """
    kind_of = {state: kind for kind, _, state in ACTIVE_SERIES}
    kinds = [kind for kind, _, _ in ACTIVE_SERIES]
    by_type: dict[str, dict[str, int]] = {}
    for type_name, state, count in rows:
        kind = kind_of.get(str(state))
        if kind is not None and count > 0:
            counts = by_type.setdefault(str(type_name), {})
            counts[kind] = counts.get(kind, 0) + int(count)
    busiest = max((sum(c.values()) for c in by_type.values()), default=0)
    scale = ACTIVE_WIDTH / busiest if busiest else 0.0
    result = []
    for type_name in sorted(by_type):
        counts = by_type[type_name]
        x = 0.0
        segments = []
        for kind in kinds:
            if counts.get(kind):
                width = counts[kind] * scale
                segments.append(
                    Segment(kind, round(x, 2), 0.0, round(width, 2), ACTIVE_HEIGHT)
                )
                x += width
        words = ", ".join(
            f"{counts[kind]:,} {label}"
            for kind, label, _ in ACTIVE_SERIES
            if counts.get(kind)
        )
        result.append(
            ActiveRow(
                type_name,
                counts,
                sum(counts.values()),
                segments,
                f"{type_name}: {words}",
            )
        )
    totals = {kind: sum(row.counts.get(kind, 0) for row in result) for kind in kinds}
    total = sum(totals.values())
    description = (
        f"Workflows running a step, waiting or paused now, per class: {total:,} "
        "in all"
        + (
            "; "
            + ", ".join(
                f"{totals[kind]:,} {label}"
                for kind, label, _ in ACTIVE_SERIES
                if totals[kind]
            )
            if total
            else ""
        )
        + "."
    )
    return ActiveChart(result, totals, total, description)
