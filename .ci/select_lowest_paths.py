"""Choose the test modules of CI's lowest-versions pass (``.ci/lowest-paths.txt``).

That pass runs the suite on PostgreSQL with SQLAlchemy and Flask-SQLAlchemy at
pyproject.toml's floors, to catch our use of an API the floor lacks. Every
statement on geneva's tables is built in ``flask_geneva/db/``
(tests/test_sql_ownership.py), and the sessions and models live in ``db/``,
``models/`` and ``ext/``: the pass needs every line of those that the suite
reaches, not every test that reaches them again.

This script runs the candidate modules (``CANDIDATES``, minus ``IGNORED``) once
on ``GENEVA_TEST_DATABASE_URL`` (a PostgreSQL database) under coverage with
per-test contexts (pytest-cov: ``pip install pytest-cov``), then picks modules
greedily by new lines covered per second until they cover every line the whole
set covers or the next would bring fewer than ``MIN_LINES_PER_SECOND`` (the
lines left out are printed), always keeping every module of the folders of
``WHOLE`` (the store's, the models' and the extension's own tests). It prints the
list for
``.ci/lowest-paths.txt``. Run it from the repository's root after adding store
code or its tests::

    GENEVA_TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        .venv/bin/python .ci/select_lowest_paths.py > .ci/lowest-paths.txt
"""

from __future__ import annotations

import collections
import os
import sqlite3
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from coverage import numbits

#: The modules the pass could run (the engine, the data layer, the extension,
#: and the admin pages and CLI commands that run the store's queries).
CANDIDATES = [
    "tests/db",
    "tests/models",
    "tests/engine",
    "tests/ext",
    "tests/telemetry",
    "tests/admin",
    "tests/cli",
    "tests/test_test_helpers.py",
]
#: Never in the pass: the race tests (they take, hundreds of times over from
#: threads, the paths other tests take once, to check the server's locks and
#: orderings, which the SQLAlchemy version does not change) and the network cut
#: (the kernel's and libpq's behaviour; the killed servers are the
#: ``private_servers`` mark).
IGNORED = [
    "tests/engine/children/test_child_races.py",
    "tests/engine/executor/test_merged_insert_races.py",
    "tests/engine/iteration/test_keyset_property.py",
    "tests/engine/limits/test_limit_races.py",
    "tests/engine/limits/test_operator_races.py",
    "tests/engine/operators/test_operator_soak.py",
    "tests/engine/operators/test_concurrent_cleanup.py",
    "tests/engine/schedules/test_race.py",
    "tests/engine/test_concurrency.py",
    "tests/engine/workflow_signals/test_workflow_signal_races.py",
    "tests/models/test_create_concurrency.py",
    "tests/engine/test_network_cuts.py",
]
MARKS = "not worker and not packaging and not browser and not private_servers"
#: The source whose lines, as far as the candidates reach them, the pass must reach
#: (but those left out by MIN_LINES_PER_SECOND).
TARGETS = (
    "flask_geneva/db/",
    "flask_geneva/models/",
    "flask_geneva/ext/",
    "flask_geneva/engine/step_execution_rows.py",
)
#: A module that would add fewer new lines than this per second of its tests is
#: left out (the lines only such modules reach are printed to stderr): the last
#: picks of the greedy choice cost 10-20 s for one or two lines each.
MIN_LINES_PER_SECOND = 0.5
#: Folders whose every module the pass runs.
WHOLE = ["tests/db", "tests/models", "tests/ext"]


def main() -> None:
    # ``--from DIR``: choose again from an earlier run's files (printed to stderr).
    if sys.argv[1:2] == ["--from"]:
        work = Path(sys.argv[2])
    else:
        work = Path(tempfile.mkdtemp())
        _run_candidates(work)
    print(f"the candidates' coverage and times: {work}", file=sys.stderr)
    _choose(work / "junit.xml", work / "coverage")


def _run_candidates(work: Path) -> None:
    junit, data = work / "junit.xml", work / "coverage"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",  # explicit: pytest-cov sets up xdist's workers only then
            "2",
            "-p",
            "no:cacheprovider",
            "-m",
            MARKS,
            *CANDIDATES,
            *(f"--ignore={path}" for path in IGNORED),
            "--cov=flask_geneva",
            "--cov-report=",
            "--cov-context=test",
            f"--junitxml={junit}",
        ],
        check=True,
        stdout=sys.stderr,  # the list alone goes to stdout
        env={**os.environ, "COVERAGE_FILE": str(data)},
    )


def _choose(junit: Path, data: Path) -> None:
    seconds: collections.Counter[str] = collections.Counter()
    for case in ET.parse(junit).iter("testcase"):
        parts = case.get("classname", "").split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        seconds["/".join(parts) + ".py"] += float(case.get("time", 0))
    lines = collections.defaultdict(set)
    with sqlite3.connect(data) as connection:
        files = dict(connection.execute("SELECT id, path FROM file"))
        contexts = dict(connection.execute("SELECT id, context FROM context"))
        for file_id, context_id, bits in connection.execute(
            "SELECT file_id, context_id, numbits FROM line_bits"
        ):
            path, context = files[file_id], contexts[context_id]
            if context and any(target in path for target in TARGETS):
                module = context.split("::", 1)[0]
                lines[module].update((path, n) for n in numbits.numbits_to_nums(bits))
    chosen = {
        m for m in {*lines, *seconds} if m.startswith(tuple(f"{w}/" for w in WHOLE))
    }
    covered = set().union(*(lines[m] for m in chosen))
    while True:
        rest = [m for m in lines if m not in chosen and lines[m] - covered]
        if not rest:
            break
        best = max(rest, key=lambda m: _rate(lines[m] - covered, seconds[m]))
        if _rate(lines[best] - covered, seconds[best]) < MIN_LINES_PER_SECOND:
            break
        gain = len(lines[best] - covered)
        print(f"+{gain:4d} lines {seconds[best]:5.1f} s {best}", file=sys.stderr)
        chosen.add(best)
        covered |= lines[best]
    reached = set().union(*lines.values())
    for path, number in sorted(reached - covered):
        print(f"left out: {os.path.relpath(path)}:{number}", file=sys.stderr)
    kept = sum(seconds[m] for m in chosen)
    print(
        f"# {len(chosen)} modules, {kept:.0f} s of the candidates' "
        f"{sum(seconds.values()):.0f} s, reaching all but {len(reached - covered)} "
        f"of their {len(reached)} lines (.ci/select_lowest_paths.py)"
    )
    for module in sorted(chosen):
        print(module)


def _rate(new_lines: set[Any], seconds: float) -> float:
    """New lines covered per second of a module's tests."""
    return len(new_lines) / max(seconds, 0.5)


if __name__ == "__main__":
    main()
