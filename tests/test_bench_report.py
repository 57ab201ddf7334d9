"""bench/report.py's table: every figure beside its target, "met" computed (issue 40).

The table is fed hand-made results, so that a figure below its target must
print ``no`` and one above ``yes``; nothing is measured.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import report

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def _meta(run: str = "2026-12-07 08:00:00 UTC", commit: str = "abc1234") -> dict:
    return {
        "run": run,
        "commit": commit,
        "started": run,
        "seconds": 12.0,
        "load_before": [0.5, 0.5, 0.5],
        "load_after": [1.5, 1.0, 0.7],
        "sizes": {},
    }


def _steps(rate: float) -> dict[str, Any]:
    return {"steps_per_second": rate, "rounds_steps_per_second": [rate]}


def _results(**meta: str) -> dict[str, Any]:
    """writes-hero 2.5x DBOS (target 2.0) but 0.5x the floor (target 0.9), etc."""
    return {
        "schema": 2,
        "parts": {
            "side_by_side": {
                "meta": _meta(**meta),
                "workflows": 10,
                "steps_per_workflow": 10,
                "bodies": {
                    "writes-hero": {
                        "floor": _steps(400.0),
                        "dbos": _steps(80.0),
                        "geneva_inline": _steps(200.0),
                        "geneva_delivery": _steps(100.0),
                    }
                },
            },
            "scaling": {
                "meta": _meta(**meta),
                "database": "postgresql",
                "workflows": 10_000,
                "runs": [
                    {**_steps(982.0), "workers": 2, "deadlocks": 0},
                    {**_steps(888.0), "workers": 8, "deadlocks": 0},
                ],
            },
            "dispatcher_tick": {
                "meta": _meta(**meta),
                "due": 100,
                "rounds": 7,
                "target_ms": 50.0,
                "sizes": [
                    {
                        "parked": parked,
                        "due_run": {"median_ms": 61.0},
                        "none_due_run": {"median_ms": 12.0},
                    }
                    for parked in (10_000, 1_000_000)
                ],
            },
            "memory": {
                "meta": _meta(**meta),
                "database": "postgresql",
                "warmup_samples": 1,
                "samples": [
                    {"steps": 5_000, "rss_kib": 90_000},
                    {"steps": 10_000, "rss_kib": 96_000},
                    {"steps": 100_000, "rss_kib": 97_000},
                ],
                "slope_kib_per_10k_steps": 37.0,
                "max_slope_kib_per_10k_steps": 256.0,
            },
        },
    }


def _met_by_figure(table: str) -> dict[str, str]:
    """The table's rows: figure -> the ``met`` cell."""
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]
    return {
        cells[0]: cells[5]
        for cells in ([c.strip() for c in row.strip("|").split("|")] for row in rows)
    }


def test_a_figure_below_its_target_is_not_met_and_one_above_is() -> None:
    met = _met_by_figure(report.markdown_table(_results()))

    def row(*words: str) -> str:
        (found,) = [figure for figure in met if all(w in figure for w in words)]
        return met[found]

    assert row("writes-hero", "inline", "DBOS") == "yes"  # 2.5x, target 2.0x
    assert row("writes-hero", "inline", "floor") == "no"  # 0.5x, target 0.9x
    assert row("writes-hero", "per delivery", "DBOS") == ""  # no target
    assert row("8 vs 2 worker processes") == "no"  # 888 / 982
    assert row("deadlocks") == "yes"
    assert row("100 due", "1,000,000 parked") == "no"  # 61 ms, target < 50
    assert row("none due", "1,000,000 parked") == "yes"  # 12 ms
    assert row("growth per 10,000 steps") == "yes"  # +37 KiB, at most 256


def test_met_compares_with_each_operator() -> None:
    assert report.met(2.0, (">=", 2.0)) == "yes"
    assert report.met(1.99, (">=", 2.0)) == "no"
    assert report.met(50.0, ("<", 50.0)) == "no"
    assert report.met(1.0, ("==", 0.0)) == "no"
    assert report.met(None, ("<=", 1.0)) == ""
    assert report.met(1.0, None) == ""


def test_parts_of_different_runs_say_which_run_each_figure_came_from() -> None:
    results = _results()
    again = _results(run="2026-12-07 09:00:00 UTC", commit="def5678+dirty")
    results["parts"]["dispatcher_tick"] = again["parts"]["dispatcher_tick"]

    table = report.markdown_table(results)

    header = table.splitlines()[0]
    assert header.endswith("| met | run |")
    tick_rows = [line for line in table.splitlines() if "parked" in line]
    assert tick_rows
    assert all(line.endswith("| B |") for line in tick_rows)
    assert "commit `def5678+dirty`" in table


def test_one_run_has_no_run_column() -> None:
    assert report.markdown_table(_results()).splitlines()[0].endswith("| met |")


def test_a_file_from_before_the_parts_is_read_as_two_parts(tmp_path: Path) -> None:
    old = {
        "measured_on": "2026-12-03 12:47 UTC",
        "note": "quiet machine at d53a339",
        "workflows": 600,
        "rounds": 5,
        "in_process": [
            {"database": "sqlite", "system": "flask_geneva", **_steps(587.0)}
        ],
        "end_to_end": [],
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(old))

    results = report.load(path)

    assert list(results["parts"]) == ["in_process"]
    assert results["parts"]["in_process"]["meta"]["commit"] == "d53a339"
    assert "| 587 |" in report.markdown_table(results)


def test_a_dirty_part_names_the_tracked_files_that_differed() -> None:
    results = _results(commit="abc1234+dirty")
    meta = results["parts"]["dispatcher_tick"]["meta"]
    meta["changed_files"] = ["README.md", "tests/test_reference_docs.py"]

    lines = report.markdown_table(results).splitlines()

    tick = next(line for line in lines if line.startswith("- dispatcher_tick"))
    assert (
        "commit `abc1234+dirty` (tracked files changed: "
        "`README.md`, `tests/test_reference_docs.py`), started" in tick
    )
    scaling = next(line for line in lines if line.startswith("- scaling"))
    assert "tracked files changed" not in scaling


def test_changed_files_are_the_tracked_files_that_differ_from_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name in ("kept.py", "edited.py"):
        (tmp_path / name).write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "c")
    monkeypatch.setattr(report, "REPO", tmp_path)
    assert report.changed_files() == []
    assert not report.commit().endswith("+dirty")

    (tmp_path / "edited.py").write_text("x = 2\n")
    (tmp_path / "untracked.py").write_text("x = 3\n")

    assert report.changed_files() == ["edited.py"]
    assert report.commit().endswith("+dirty")
