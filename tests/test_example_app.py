"""The README's first command: the example app settles every workflow (R-APP-02)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.backends("sqlite")  # the demo brings its own SQLite database
def test_demo_settles_every_workflow_and_prints_a_summary(tmp_path):
    """`python -m example_app demo` runs migrations, an embedded worker and settles all workflows."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "example_app",
            "demo",
            "--users",
            "20",
            "--database-url",
            f"sqlite:///{tmp_path / 'demo.sqlite3'}",
            "--timeout",
            "120",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    assert "every workflow settled" in output
    counts = {
        (kind, state): int(count)
        for kind, state, count in re.findall(
            r"^\s+(\w+)\s+(finished|canceled|paused)\s+(\d+)$", output, re.M
        )
    }
    onboarding = counts.get(("Onboarding", "finished"), 0) + counts.get(
        ("Onboarding", "canceled"), 0
    )
    payments = counts.get(("Payment", "finished"), 0) + counts.get(
        ("Payment", "canceled"), 0
    )
    assert onboarding == 20
    assert payments == 20
    assert counts.get(("ExportReview", "finished")) == 1


@pytest.mark.backends("sqlite")
def test_demo_deletes_its_own_sqlite_folder_unless_kept(tmp_path):
    """Without --database-url the demo's new SQLite folder is deleted when it
    ends; --keep-database keeps it and says where (R-APP-02)."""

    def demo(*extra):
        result = subprocess.run(
            [
                *(sys.executable, "-m", "example_app", "demo", "--users", "2"),
                *("--subscribers", "5", "--timeout", "120", *extra),
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "every workflow settled" in result.stdout
        return result.stdout

    output = demo()
    assert list(tmp_path.glob("geneva-example-*")) == []
    assert "deleted " in output
    output = demo("--keep-database")
    [kept] = tmp_path.glob("geneva-example-*")
    assert (kept / "example.sqlite3").is_file()
    assert f"the database is kept: sqlite:///{kept / 'example.sqlite3'}" in output
