"""Geometry of the workflow timeline chart (R-ADM-12): spans, segments, ticks.

Pure code. Each execution becomes a :class:`Span` of instants; the union of the
spans is split into linear :class:`Segment` s separated by compressed idle gaps;
instants map to x positions through their segment. See
:mod:`flask_geneva.admin.timeline_chart` for how the chart reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from flask_geneva.admin.timeline_time import D_US
from flask_geneva.admin.timeline_time import H_US
from flask_geneva.admin.timeline_time import MIN_US
from flask_geneva.admin.timeline_time import MS_US
from flask_geneva.admin.timeline_time import ONE_US
from flask_geneva.admin.timeline_time import S_US
from flask_geneva.admin.timeline_time import optional_us
from flask_geneva.admin.timeline_time import px
from flask_geneva.admin.timeline_time import tick_text

__all__ = [
    "BREAK_WIDTH",
    "MIN_BAR_WIDTH",
    "SEGMENT_PAD",
    "Label",
    "Segment",
    "Span",
    "bar_parts",
    "nice_step",
    "place_labels",
    "place_segments",
    "span_of",
    "split_segments",
    "tick_marks",
]

#: Narrowest drawn bar, in px: zero-length executions stay visible.
MIN_BAR_WIDTH = 3.0
#: Width of a compressed idle gap, in px (less when there are very many).
BREAK_WIDTH = 72.0
#: Room inside each end of a segment, in px.
SEGMENT_PAD = 4.0
_MIN_SEGMENT_WIDTH = 24.0
_TICK_SPACING = 90.0
_CHAR_WIDTH = 6.0  # rough width of one 10 px character, to keep labels apart
_NICE_STEPS = (
    *(n * MS_US for n in (1, 2, 5, 10, 20, 50, 100, 200, 500)),
    *(n * S_US for n in (1, 2, 5, 10, 15, 30)),
    *(n * MIN_US for n in (1, 2, 5, 10, 15, 30)),
    *(n * H_US for n in (1, 2, 3, 6, 12)),
    *(n * D_US for n in (1, 2, 7)),
)
_END_COLUMNS = ("finished_at", "completed_at", "failed_at", "canceled_at", "skipped_at")
_ACTIVE_STATES = ("scheduled", "in_progress")


@dataclasses.dataclass(frozen=True)
class Label:
    """A mark at ``x`` with its text at ``text_x`` (``""``: no room for the text).

    ``text_x`` differs from ``x`` only where a centred text was nudged to stay
    inside the drawing.
    """

    x: float
    text: str
    text_x: float


@dataclasses.dataclass(frozen=True)
class Span:
    """One execution's instants (µs): scheduled, started, drawn start and end."""

    scheduled: int
    started: int | None
    start: int
    end: int
    is_ongoing: bool
    is_future: bool
    has_end: bool


def span_of(execution: Any, now: int) -> Span:
    """The span drawn for ``execution``; waiting or running ones end at ``now``."""
    started = optional_us(execution, "started_at")
    end = None
    for name in _END_COLUMNS:
        end = optional_us(execution, name)
        if end is not None:
            break
    scheduled = optional_us(execution, "scheduled_for")
    if scheduled is None:  # NOT NULL in the table; a stand-in may lack it
        scheduled = (
            started if started is not None else (end if end is not None else now)
        )
    start = scheduled if started is None else min(scheduled, started)
    active = str(execution.state) in _ACTIVE_STATES
    is_ongoing = is_future = False
    has_end = end is not None
    if end is None:
        if active and start > now:
            is_future = True
            end = start
        elif active:
            is_ongoing = True
            end = now
        else:  # a finished state without any end time: show a zero-length run
            end = started if started is not None else start
    end = max(end, start, started if started is not None else start)
    return Span(scheduled, started, start, end, is_ongoing, is_future, has_end)


@dataclasses.dataclass
class Segment:
    """A stretch of linear time and its place on the x axis."""

    start: int
    end: int
    x: float = 0.0
    width: float = 0.0

    def x_of(self, value: int) -> float:
        """The x position of instant ``value`` inside this segment."""
        inner = self.width - 2 * SEGMENT_PAD
        duration = self.end - self.start
        if duration <= 0:
            return self.x + SEGMENT_PAD
        return self.x + SEGMENT_PAD + inner * (value - self.start) / duration


def split_segments(
    spans: list[Span], min_idle_gap: timedelta, idle_ratio: float
) -> tuple[list[Segment], list[tuple[int, int]]]:
    """Split time into linear segments and compressed gaps ``(gap_start, gap_end)``."""
    clusters: list[list[int]] = []
    for start, end in sorted((span.start, span.end) for span in spans):
        if clusters and start <= clusters[-1][1]:
            clusters[-1][1] = max(clusters[-1][1], end)
        else:
            clusters.append([start, end])
    busy = sum(end - start for start, end in clusters)
    threshold = max(min_idle_gap // ONE_US, idle_ratio * busy)
    segments = [Segment(*clusters[0])]
    gaps = []
    for start, end in clusters[1:]:
        if start - segments[-1].end > threshold:
            gaps.append((segments[-1].end, start))
            segments.append(Segment(start, end))
        else:
            segments[-1].end = end
    return segments, gaps


def place_segments(
    segments: list[Segment], gap_count: int, left: float, right: float
) -> float:
    """Set each segment's ``x``/``width``; return the width of one break."""
    plot = right - left
    break_width = min(BREAK_WIDTH, 0.3 * plot / gap_count) if gap_count else 0.0
    available = plot - gap_count * break_width
    minimum = min(_MIN_SEGMENT_WIDTH, 0.5 * available / len(segments))
    spare = available - minimum * len(segments)
    total = sum(segment.end - segment.start for segment in segments)
    x = left
    for segment in segments:
        share = (segment.end - segment.start) / total if total else 1 / len(segments)
        segment.x = x
        segment.width = minimum + spare * share
        x += segment.width + break_width
    return break_width


def nice_step(duration: int, count: int) -> int:
    """A round tick spacing (µs) giving about ``count`` ticks over ``duration``."""
    wanted = duration / count
    for step in _NICE_STEPS:
        if step >= wanted:
            return step
    return -(-int(wanted) // D_US) * D_US


def tick_marks(segments: list[Segment]) -> list[tuple[float, str]]:
    """``(x, text)`` of the axis ticks of every placed segment, at round instants."""
    ticks: list[tuple[float, str]] = []
    for segment in segments:
        duration = segment.end - segment.start
        if duration <= 0:
            continue
        inner = segment.width - 2 * SEGMENT_PAD
        count = int(inner // _TICK_SPACING)
        if count < 1:
            continue
        step = nice_step(duration, count)
        value = -(-segment.start // step) * step
        while value <= segment.end:
            ticks.append((segment.x_of(value), tick_text(value, step)))
            value += step
    return ticks


def place_labels(
    items: Iterable[tuple[float, str]],
    occupied: list[tuple[float, float]],
    *,
    width: float,
    centred: bool,
) -> list[Label]:
    """Give each ``(x, text)`` room on one text row, or blank its text.

    ``occupied`` holds the ``(start, end)`` spans already taken on that row (it
    grows). Centred texts are nudged to stay inside ``0..width``.
    """
    labels = []
    for x, text in items:
        size = len(text) * _CHAR_WIDTH
        middle = min(max(x, size / 2), width - size / 2) if centred else x
        start = middle - size / 2 if centred else x
        end = start + size
        fits = bool(text) and end <= width
        if fits and all(end + 6 <= a or start >= b + 6 for a, b in occupied):
            occupied.append((start, end))
            labels.append(Label(px(x), text, px(middle)))
        else:
            labels.append(Label(px(x), "", px(middle)))
    return labels


def bar_parts(
    span: Span, x_of: Any, right: float
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """``(wait, run)`` as ``(x, width)``; the last part is at least MIN_BAR_WIDTH."""
    x_start = x_of(span.start)
    x_end = x_of(span.end)
    if span.started is None:
        width = max(x_end - x_start, MIN_BAR_WIDTH)
        shift = min(right - (x_start + width), 0.0)  # keep it inside the plot
        return (x_start + shift, width), None
    x_started = x_of(span.started)
    width = max(x_end - x_started, MIN_BAR_WIDTH)
    shift = min(right - (x_started + width), 0.0)
    run = (x_started + shift, width)
    if x_started - x_start < 0.5:  # no visible wait: started on time
        return None, run
    return (x_start + shift, x_started - x_start), run
