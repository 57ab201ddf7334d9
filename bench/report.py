"""The README's benchmark figures: run them to JSON, render the chart and table.

Three subcommands, so that figures measured once (on a quiet machine) can be
rendered again without measuring::

    # measure every figure at issue 40's sizes (a scratch PostgreSQL database:
    # its tables are dropped and re-created; hours on a 2-core machine)
    python bench/report.py run --out bench/results.json \\
        --postgresql postgresql+psycopg://postgres@127.0.0.1:5432/bench \\
        --mariadb mysql+pymysql://root@127.0.0.1:3306/bench \\
        --broker redis://127.0.0.1:6379/15 --note "quiet machine"
    # a smoke run: every part at tiny sizes (minutes)
    python bench/report.py run --quick --out /tmp/quick.json --postgresql ...
    # measure one part again, merged into the JSON file beside the others
    python bench/report.py run --only dispatcher_tick --out bench/results.json ...
    # the PNG chart from that JSON (needs matplotlib: pip install -e '.[bench]')
    python bench/report.py chart bench/results.json docs/benchmarks.png
    # every figure in one Markdown table, with its target and whether it is met
    python bench/report.py table bench/results.json

``run`` measures these parts, one after the other, each by running the bench
script that owns it in a subprocess (their ``--json`` output is kept):

``in_process``
    N workflows x 10 no-op steps in one process, in alternating rounds
    (medians): the raw-SQL floor (``bench/peers/floor.py``, two commits per
    step), DBOS Transact (``bench/peers/dbos_bench.py``, left out when ``dbos``
    is not installed) and flask_geneva with inline continuation
    (``bench/step_overhead.py``) on PostgreSQL; flask_geneva on SQLite and
    MariaDB.
``side_by_side``
    ``bench/side_by_side.py``: the four step bodies (``noop``, ``reads-hero``,
    ``writes-hero``, ``io``) on the floor, DBOS Transact and flask_geneva with
    inline continuation and with one step per delivery, on PostgreSQL.
``end_to_end``
    ``bench/end_to_end.py``: flask_geneva against the bare Celery chain through
    a real worker and the broker, with ``--workers`` processes on each server
    database (SQLite: one ``solo`` worker).
``scaling``
    ``bench/end_to_end.py --sides flask_geneva`` on PostgreSQL with each of
    ``--scaling-workers`` processes over ``--scaling-workflows`` workflows:
    steps/s and the deadlocks the server detected.
``memory``
    ``bench/memory.py`` on PostgreSQL: one solo worker's RSS over
    ``--memory-steps`` steps and its slope per 10,000 steps.
``dispatcher_tick``
    ``bench/dispatcher_tick.py``: one dispatcher run with 100 executions due
    and with none, at ``--parked`` parked executions (and at 10,000 first).
    Last, as it leaves the database full.

Every part records the commit it ran (``+dirty`` when the tracked files differ
from it, and those files' paths), the ``run`` invocation it came from, when it
started, how long it took and the load average before and after (the machine
may be shared: compare ratios of one run, never absolute figures across
runs). ``--only`` runs some parts and merges them into the existing ``--out``
file; the table then says which run and commit each figure came from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
STEPS = 10
#: The parts ``run`` measures, in the order it runs them.
PARTS = (
    "in_process",
    "side_by_side",
    "end_to_end",
    "scaling",
    "memory",
    "dispatcher_tick",
)

#: Display names of the databases, in chart order.
DATABASE_NAMES = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "mysql": "MariaDB"}
#: Display names of the systems, in chart order.
SYSTEM_NAMES = {
    "floor": "raw-SQL floor (2 commits/step)",
    "dbos": "DBOS Transact",
    "flask_geneva": "flask_geneva",
    "bare_chain": "bare Celery chain",
}
#: Display names of ``bench/side_by_side.py``'s sides, in chart order.
SIDE_NAMES = {
    "floor": "raw-SQL floor",
    "dbos": "DBOS Transact",
    "geneva_inline": "flask_geneva, inline continuation",
    "geneva_delivery": "flask_geneva, one step per delivery",
}
COLORS = {
    "floor": "#9e9e9e",
    "dbos": "#e07b39",
    "flask_geneva": "#2f6db5",
    "geneva_inline": "#2f6db5",
    "geneva_delivery": "#8fb3e0",
    "bare_chain": "#7fae5a",
}

# -- targets (issue 40; the end-to-end ratio is issue 16's) ----------------------

#: flask_geneva's least ratio to a peer, by (body, flask_geneva side, peer).
SIDE_BY_SIDE_TARGETS = {
    ("writes-hero", "geneva_inline", "dbos"): 2.0,
    ("writes-hero", "geneva_inline", "floor"): 0.9,
    ("noop", "geneva_inline", "dbos"): 2.0,
    ("noop", "geneva_inline", "floor"): 0.9,
    ("noop", "geneva_delivery", "dbos"): 1.3,
}
#: The in-process part's PostgreSQL figures are the noop body, inline.
IN_PROCESS_TARGETS = {
    "dbos": SIDE_BY_SIDE_TARGETS["noop", "geneva_inline", "dbos"],
    "floor": SIDE_BY_SIDE_TARGETS["noop", "geneva_inline", "floor"],
}
#: flask_geneva's least ratio to the bare Celery chain, end to end (issue 16).
END_TO_END_TARGET = 1.5
#: The least ratio of the most worker processes' steps/s to the fewest's.
SCALING_TARGET = 1.0
#: A dispatcher run's median must be under this many milliseconds.
TICK_TARGET_MS = 50.0
#: The worker's RSS may grow at most this many KiB per 10,000 steps ("flat";
#: ``bench/memory.py``'s default ``--max-slope``).
MEMORY_MAX_SLOPE_KIB = 256.0


# -- run ---------------------------------------------------------------------------


def _steps_per_second(output: str) -> float:
    match = re.search(r"^steps/s:\s*([\d,.]+)", output, re.M)
    if match is None:
        raise RuntimeError(f"no steps/s in the output:\n{output[-2000:]}")
    return float(match.group(1).replace(",", ""))


def _run(command: list[str], cwd: Path = REPO) -> str:
    """Run ``command`` (one of our scripts), echoing it; its standard output.

    Raises:
        RuntimeError: it exited non-zero (the message has the end of its output).
    """
    print("  $", " ".join(command), flush=True)
    done = subprocess.run(  # noqa: S603 - our own interpreter and scripts
        command, cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{command[1]} failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return done.stdout


def _libpq_dsn(url: str) -> str:
    import sqlalchemy as sa

    return (
        sa.make_url(url)
        .set(drivername="postgresql")
        .render_as_string(hide_password=False)
    )


def _dbos_installed() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def commit(changed: list[str] | None = None) -> str:
    """The checkout's short commit, with ``+dirty`` when tracked files differ.

    Args:
        changed: What :func:`changed_files` returned, when the caller has it
            already; None: ask git.
    """
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607 - the repository's git
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if changed is None:
        changed = changed_files()
    return (done.stdout.strip() or "unknown") + ("+dirty" if changed else "")


def changed_files() -> list[str]:
    """The tracked files that differ from the commit, as git names them.

    Recorded beside ``+dirty`` so that a reader sees what the difference was
    (a test file edited during a run is not an engine change).
    """
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],  # noqa: S607
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return sorted(line[3:] for line in status.stdout.splitlines() if line.strip())


def _in_process(args: argparse.Namespace) -> dict[str, Any]:
    """Alternating rounds of every in-process side; one entry per side, medians.

    Returns:
        ``{"entries": [...]}``: per (database, system), steps/s (median and per
        round) and flask_geneva's statements, commits and CPU ms per step.
    """
    python = sys.executable
    sides: list[tuple[str, str, list[str] | None]] = []
    if args.postgresql:
        dsn = _libpq_dsn(args.postgresql)
        sides.append(
            (
                "postgresql",
                "floor",
                [python, str(BENCH / "peers" / "floor.py"), "--dsn", dsn],
            )
        )
        if _dbos_installed():
            sides.append(
                (
                    "postgresql",
                    "dbos",
                    [python, str(BENCH / "peers" / "dbos_bench.py"), "--dsn", dsn],
                )
            )
        else:
            print("dbos is not installed: DBOS Transact left out", flush=True)
    for database, url in (
        ("postgresql", args.postgresql),
        ("sqlite", "sqlite" if args.sqlite else None),
        ("mysql", args.mariadb),
    ):
        if url:
            sides.append((database, "flask_geneva", None))
    figures: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(1, args.rounds + 1):
            print(f"in-process round {round_number}/{args.rounds}", flush=True)
            for database, system, command in sides:
                if command is None:  # flask_geneva
                    out = Path(tmp) / f"{database}.json"
                    url = {"postgresql": args.postgresql, "mysql": args.mariadb}.get(
                        database
                    )
                    command = [
                        python,
                        str(BENCH / "step_overhead.py"),
                        "--inline-continuation",
                        "--workflows",
                        str(args.workflows),
                        "--json",
                        str(out),
                        *(["--database-url", url] if url else []),
                    ]
                    _run(command)
                    result = json.loads(out.read_text())
                else:
                    # DBOS writes a log file where it runs: not in the repository.
                    output = _run(
                        [*command, str(args.workflows), str(STEPS)],
                        cwd=Path(tmp) if system == "dbos" else REPO,
                    )
                    result = {"steps_per_second": _steps_per_second(output)}
                figures.setdefault((database, system), []).append(result)
    entries = []
    for (database, system), rounds in figures.items():
        entry: dict[str, Any] = {
            "database": database,
            "system": system,
            "steps_per_second": statistics.median(
                r["steps_per_second"] for r in rounds
            ),
            "rounds_steps_per_second": [r["steps_per_second"] for r in rounds],
        }
        for key in ("statements_per_step", "commits_per_step", "cpu_ms_per_step"):
            if key in rounds[0]:
                entry[key] = statistics.median(r[key] for r in rounds)
        entries.append(entry)
    return {"entries": entries}


def _side_by_side(args: argparse.Namespace) -> dict[str, Any]:
    """``bench/side_by_side.py`` on PostgreSQL: its JSON, as it writes it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "side_by_side.json"
        _run(
            [
                sys.executable,
                str(BENCH / "side_by_side.py"),
                "--database",
                args.postgresql,
                "--workflows",
                str(args.workflows),
                "--rounds",
                str(args.rounds),
                "--bodies",
                *args.bodies,
                "--json",
                str(out),
            ]
        )
        return dict(json.loads(out.read_text()))


def _end_to_end_once(
    args: argparse.Namespace, url: str | None, workers: int, extra: list[str]
) -> dict[str, Any]:
    """One ``bench/end_to_end.py`` run; its JSON (``extra``: more options)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "end_to_end.json"
        _run(
            [
                sys.executable,
                str(BENCH / "end_to_end.py"),
                "--concurrency",
                str(workers),
                "--broker",
                args.broker,
                "--json",
                str(out),
                *(["--database-url", url] if url else []),
                *extra,
            ]
        )
        return dict(json.loads(out.read_text()))


def _end_to_end(args: argparse.Namespace) -> dict[str, Any]:
    """flask_geneva vs the bare chain through a real worker, per database and size.

    Returns:
        ``{"entries": [...]}``: per (database, workers, system), steps/s and CPU
        ms per step; flask_geneva's entry also has the run's ``deadlocks``.
    """
    runs: list[tuple[str | None, int]] = []
    for url in (args.postgresql, args.mariadb):
        if url:
            runs.extend((url, workers) for workers in args.workers)
    if args.sqlite:
        runs.append((None, 1))
    entries = []
    for url, workers in runs:
        result = _end_to_end_once(
            args,
            url,
            workers,
            ["--workflows", str(args.e2e_workflows), "--rounds", str(args.rounds)],
        )
        for system in ("flask_geneva", "bare_chain"):
            entries.append(
                {
                    "database": result["database"],
                    "workers": result["workers"],
                    "system": system,
                    **result[system],
                    **(
                        {"deadlocks": result.get("deadlocks")}
                        if system == "flask_geneva"
                        else {}
                    ),
                }
            )
    return {"entries": entries, "workflows": args.e2e_workflows}


def _scaling(args: argparse.Namespace) -> dict[str, Any]:
    """flask_geneva alone on PostgreSQL with each worker count, alternating.

    Returns:
        ``{"runs": [...]}``: per worker count, steps/s (median and per round),
        CPU ms per step and the deadlocks the server detected (summed).
    """
    measured: dict[int, list[dict[str, Any]]] = {w: [] for w in args.scaling_workers}
    for number in range(1, args.scaling_rounds + 1):
        print(f"scaling round {number}/{args.scaling_rounds}", flush=True)
        for workers in args.scaling_workers:
            measured[workers].append(
                _end_to_end_once(
                    args,
                    args.postgresql,
                    workers,
                    [
                        "--sides",
                        "flask_geneva",
                        "--workflows",
                        str(args.scaling_workflows),
                        "--rounds",
                        "1",
                    ],
                )
            )
    runs = []
    for workers, results in measured.items():
        rates = [r["flask_geneva"]["steps_per_second"] for r in results]
        deadlocks = [r.get("deadlocks") for r in results]
        runs.append(
            {
                "workers": workers,
                "steps_per_second": statistics.median(rates),
                "rounds_steps_per_second": rates,
                "worker_cpu_ms_per_step": statistics.median(
                    r["flask_geneva"]["worker_cpu_ms_per_step"] for r in results
                ),
                "deadlocks": (
                    None if None in deadlocks else sum(d or 0 for d in deadlocks)
                ),
            }
        )
    return {"database": "postgresql", "workflows": args.scaling_workflows, "runs": runs}


def _memory(args: argparse.Namespace) -> dict[str, Any]:
    """``bench/memory.py`` on PostgreSQL, 20 samples; its JSON.

    The script runs without its own leak limit (the table compares the slope
    with :data:`MEMORY_MAX_SLOPE_KIB`), so a leak is reported, not an error.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "memory.json"
        _run(
            [
                sys.executable,
                str(BENCH / "memory.py"),
                "--steps",
                str(args.memory_steps),
                "--batch-steps",
                str(max(args.memory_steps // 20, STEPS)),
                "--max-slope",
                "inf",
                "--database-url",
                args.postgresql,
                "--broker",
                args.broker,
                "--json",
                str(out),
            ]
        )
        result = dict(json.loads(out.read_text()))
    result["steps"] = args.memory_steps
    result["max_slope_kib_per_10k_steps"] = MEMORY_MAX_SLOPE_KIB
    return result


def _dispatcher_tick(args: argparse.Namespace) -> dict[str, Any]:
    """``bench/dispatcher_tick.py`` on PostgreSQL at ``--parked``; its JSON."""
    small = min(10_000, args.parked)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tick.json"
        _run(
            [
                sys.executable,
                str(BENCH / "dispatcher_tick.py"),
                "--database-url",
                args.postgresql,
                "--parked",
                str(args.parked),
                "--small",
                str(small),
                "--rounds",
                str(args.tick_rounds),
                "--json",
                str(out),
            ]
        )
        return dict(json.loads(out.read_text()))


#: What measures each part, and whether it needs ``--postgresql``.
MEASURE: dict[str, tuple[Callable[[argparse.Namespace], dict[str, Any]], bool]] = {
    "in_process": (_in_process, False),
    "side_by_side": (_side_by_side, True),
    "end_to_end": (_end_to_end, False),
    "scaling": (_scaling, True),
    "memory": (_memory, True),
    "dispatcher_tick": (_dispatcher_tick, True),
}

#: ``--quick``'s sizes: every part in a few minutes, for a smoke run.
QUICK_SIZES = {
    "workflows": 20,
    "rounds": 1,
    "bodies": ["noop", "writes-hero"],
    "e2e_workflows": 20,
    "workers": [1, 2],
    "scaling_workflows": 200,
    "scaling_rounds": 1,
    "memory_steps": 2_000,
    "parked": 20_000,
    "tick_rounds": 3,
}


def _sizes(part: str, args: argparse.Namespace) -> dict[str, Any]:
    """The options that size ``part``, as recorded beside its figures."""
    keys = {
        "in_process": ("workflows", "rounds"),
        "side_by_side": ("workflows", "rounds", "bodies"),
        "end_to_end": ("e2e_workflows", "rounds", "workers"),
        "scaling": ("scaling_workflows", "scaling_rounds", "scaling_workers"),
        "memory": ("memory_steps",),
        "dispatcher_tick": ("parked", "tick_rounds"),
    }[part]
    return {key: getattr(args, key) for key in keys}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def run(args: argparse.Namespace) -> int:
    """Measure the parts and write the JSON (``run`` subcommand).

    Each part is written to ``args.out`` as soon as it is measured, so a part
    that fails (its error is printed; the others still run) keeps the rest.
    With ``args.only`` the other parts of an existing ``args.out`` are kept.

    Returns:
        The exit status: 1 if a part failed, else 0.
    """
    if args.quick:
        for key, value in QUICK_SIZES.items():
            setattr(args, key, value)
    out = Path(args.out)
    results: dict[str, Any] = {"schema": 2, "parts": {}}
    if args.only and out.exists():
        results = load(out)
    run_id = _now()
    results.update(
        {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.system()}",
            "broker": "RabbitMQ" if args.broker.startswith("amqp") else "Redis",
            "steps_per_workflow": STEPS,
        }
    )
    if args.note or not args.only:
        results["note"] = args.note
    failed = []
    for part in args.only or PARTS:
        measure, needs_postgresql = MEASURE[part]
        if needs_postgresql and not args.postgresql:
            print(f"{part}: needs --postgresql, left out", flush=True)
            continue
        print(f"== {part}", flush=True)
        before = os.getloadavg()
        started = time.monotonic()
        changed = changed_files()
        meta = {
            "run": run_id,
            "commit": commit(changed),
            "changed_files": changed,
            "started": _now(),
            "quick": args.quick,
            "sizes": _sizes(part, args),
            "load_before": [round(load, 2) for load in before],
        }
        try:
            figures = measure(args)
        except (RuntimeError, OSError, KeyError, ValueError) as error:
            print(f"{part} FAILED: {error}", flush=True)
            failed.append(part)
            continue
        meta["seconds"] = round(time.monotonic() - started, 1)
        meta["load_after"] = [round(load, 2) for load in os.getloadavg()]
        results["parts"][part] = {"meta": meta, **figures}
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"{part}: {meta['seconds']:.0f} s", flush=True)
    print(f"wrote {out}")
    if results["parts"]:
        print(markdown_table(results))
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


def load(path: Path) -> dict[str, Any]:
    """The results in ``path``; a file written before parts existed is converted.

    Such a file (``in_process`` and ``end_to_end`` at the top) becomes two
    parts of one run, with the commit named in its note if any.
    """
    results = dict(json.loads(path.read_text()))
    if "parts" in results:
        return results
    found = re.search(r"\bat ([0-9a-f]{7,})\b", results.get("note", ""))
    meta = {
        "run": results.get("measured_on", "unknown"),
        "commit": found.group(1) if found else "unknown",
        "started": results.get("measured_on", "unknown"),
        "sizes": {
            "workflows": results.get("workflows"),
            "rounds": results.get("rounds"),
        },
    }
    parts: dict[str, Any] = {
        "in_process": {"meta": meta, "entries": results.pop("in_process")}
    }
    end_to_end = results.pop("end_to_end", [])
    if end_to_end:
        parts["end_to_end"] = {"meta": meta, "entries": end_to_end}
    results["parts"] = parts
    results["schema"] = 2
    return results


# -- chart ---------------------------------------------------------------------------


def _ordered(
    entries: list[dict[str, Any]], key: str, names: dict[str, str]
) -> list[str]:
    present = {entry[key] for entry in entries}
    return [name for name in names if name in present]


def _bars(
    axis: Any,
    groups: list[tuple[str, dict[str, float]]],
    title: str,
    names: dict[str, str],
) -> None:
    """Grouped bars: one group per label, one bar per system it has (steps/s)."""
    systems = [s for s in names if any(s in values for _, values in groups)]
    width = 0.8 / max(len(systems), 1)
    for system in systems:
        xs, heights = [], []
        for position, (_, values) in enumerate(groups):
            if system in values:
                # Centred among the systems this group has (a group with
                # flask_geneva alone gets one centred bar).
                present = [s for s in systems if s in values]
                offset = present.index(system) - (len(present) - 1) / 2
                xs.append(position + offset * width)
                heights.append(values[system])
        drawn = axis.bar(xs, heights, width, label=names[system], color=COLORS[system])
        axis.bar_label(drawn, fmt="%.0f", fontsize=8, padding=2)
    axis.set_xticks(range(len(groups)), [label for label, _ in groups])
    axis.set_ylabel("steps/s (higher is better)")
    axis.set_title(title, fontsize=11)
    axis.set_ylim(0, max(h for _, v in groups for h in v.values()) * 1.35)
    axis.legend(fontsize=8, loc="upper left", ncols=2)


def chart(results: dict[str, Any], path: Path) -> None:
    """Write the PNG chart of ``results`` (``chart`` subcommand).

    Panels, for the parts ``results`` has: in process (floor, DBOS Transact and
    flask_geneva per database), end to end (flask_geneva and the bare chain per
    database and worker count) and, below them, the four step bodies on
    PostgreSQL (floor, DBOS Transact, flask_geneva inline and per delivery).

    Raises:
        SystemExit: matplotlib is not installed (it is a bench-only dependency).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        raise SystemExit(
            "the chart needs matplotlib, a bench-only dependency: "
            "pip install -e '.[bench]' (or pip install matplotlib)"
        ) from None

    parts = results["parts"]
    panels: list[tuple[str, list[tuple[str, dict[str, float]]], dict[str, str]]] = []
    if "in_process" in parts:
        in_process = parts["in_process"]["entries"]
        groups = []
        for database in _ordered(in_process, "database", DATABASE_NAMES):
            values = {
                e["system"]: e["steps_per_second"]
                for e in in_process
                if e["database"] == database
            }
            groups.append((DATABASE_NAMES[database], values))
        sizes = parts["in_process"]["meta"]["sizes"]
        panels.append(
            (
                f"In process: {sizes['workflows']} workflows x {STEPS} no-op steps",
                groups,
                SYSTEM_NAMES,
            )
        )
    if parts.get("end_to_end", {}).get("entries"):
        end_to_end = parts["end_to_end"]["entries"]
        groups = []
        for database in _ordered(end_to_end, "database", DATABASE_NAMES):
            for workers in sorted(
                {e["workers"] for e in end_to_end if e["database"] == database}
            ):
                values = {
                    e["system"]: e["steps_per_second"]
                    for e in end_to_end
                    if e["database"] == database and e["workers"] == workers
                }
                label = f"{DATABASE_NAMES[database]}\n{workers} worker" + (
                    "s" if workers > 1 else ""
                )
                groups.append((label, values))
        broker = results.get("broker", "Redis")
        panels.append((f"End to end: Celery worker + {broker}", groups, SYSTEM_NAMES))
    bodies_panel = None
    if "side_by_side" in parts:
        side_by_side = parts["side_by_side"]
        groups = [
            (
                body,
                {
                    s: f["steps_per_second"]
                    for s, f in by_side.items()
                    if s in SIDE_NAMES
                },
            )
            for body, by_side in side_by_side["bodies"].items()
        ]
        bodies_panel = (
            f"Step bodies, PostgreSQL: {side_by_side['workflows']} workflows x "
            f"{side_by_side['steps_per_workflow']} steps",
            groups,
            SIDE_NAMES,
        )
    if not panels and bodies_panel is None:
        raise SystemExit(
            "nothing to draw: the file has no in-process, end-to-end or bodies figures"
        )
    columns = max(len(panels), 1)
    rows = len(panels and [1]) + (bodies_panel is not None)
    figure = plt.figure(figsize=(6.5 * columns, 4.6 * rows))
    grid = figure.add_gridspec(rows, columns)
    for number, (title, groups, names) in enumerate(panels):
        _bars(figure.add_subplot(grid[0, number]), groups, title, names)
    if bodies_panel is not None:
        title, groups, names = bodies_panel
        _bars(figure.add_subplot(grid[rows - 1, :]), groups, title, names)
    figure.text(0.01, 0.01, _chart_note(results), fontsize=8, color="#555555")
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _chart_note(results: dict[str, Any]) -> str:
    """The chart's footnote: when and at which commit(s) the figures were measured."""
    metas = [part["meta"] for part in results["parts"].values()]
    started = sorted(m["started"] for m in metas)
    commits = sorted({m["commit"] for m in metas})
    note = f"measured {started[0][:16]}"
    if started[-1][:16] != started[0][:16]:
        note += f" to {started[-1][:16]}"
    note += f" UTC at {', '.join(commits)}" if commits != ["unknown"] else " UTC"
    if results.get("note"):
        note += f" ({results['note']})"
    return note.replace(" UTC UTC", " UTC")


# -- table -------------------------------------------------------------------------


def met(value: float | None, target: tuple[str, float] | None) -> str:
    """``yes`` or ``no``: does ``value`` meet ``target`` (an operator and a bound)?

    Operators: ``>=``, ``<``, ``<=`` and ``==``. Empty when there is no target
    or no value (e.g. a part not measured, a count the database does not keep).
    """
    if target is None or value is None or math.isnan(value):
        return ""
    operator, bound = target
    ok = {
        ">=": value >= bound,
        "<": value < bound,
        "<=": value <= bound,
        "==": value == bound,
    }[operator]
    return "yes" if ok else "no"


def _target_text(target: tuple[str, float] | None, unit: str = "x") -> str:
    if target is None:
        return ""
    operator, bound = target
    words = {">=": "≥", "<": "<", "<=": "≤", "==": "="}[operator]
    number = f"{bound:.1f}" if unit == "x" else f"{bound:g}"
    return f"{words} {number}{unit}"


def _per_round(mine: list[float], theirs: list[float]) -> str:
    if len(mine) < 2 or len(mine) != len(theirs):
        return ""
    return (
        " (rounds "
        + ", ".join(f"{a / b:.2f}" for a, b in zip(mine, theirs, strict=True))
        + ")"
    )


class _Table:
    """The rows of the one table, each tagged with the part it came from."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, list[str]]] = []

    def add(
        self,
        part: str,
        figure: str,
        ours: str,
        peer: str = "",
        ratio: str = "",
        target: str = "",
        is_met: str = "",
    ) -> None:
        self.rows.append((part, [figure, ours, peer, ratio, target, is_met]))

    def ratio_row(
        self,
        part: str,
        figure: str,
        ours: dict[str, Any],
        theirs: dict[str, Any] | None,
        target: float | None,
    ) -> None:
        """A steps/s comparison: both figures, their ratio, target and verdict."""
        if theirs is None:
            return
        ratio = ours["steps_per_second"] / theirs["steps_per_second"]
        bound = None if target is None else (">=", target)
        self.add(
            part,
            figure,
            f"{ours['steps_per_second']:,.0f}",
            f"{theirs['steps_per_second']:,.0f}",
            f"{ratio:.2f}x"
            + _per_round(
                ours.get("rounds_steps_per_second", []),
                theirs.get("rounds_steps_per_second", []),
            ),
            _target_text(bound),
            met(ratio, bound),
        )


def _side_by_side_rows(table: _Table, part: dict[str, Any]) -> None:
    for body, by_side in part["bodies"].items():
        for side in ("geneva_inline", "geneva_delivery"):
            if side not in by_side:
                continue
            how = (
                "inline continuation"
                if side == "geneva_inline"
                else "one step per delivery"
            )
            for peer in ("dbos", "floor"):
                table.ratio_row(
                    "side_by_side",
                    f"{body} body, {how}, vs {SIDE_NAMES[peer]} (PostgreSQL, steps/s)",
                    by_side[side],
                    by_side.get(peer),
                    SIDE_BY_SIDE_TARGETS.get((body, side, peer)),
                )


def _in_process_rows(table: _Table, part: dict[str, Any]) -> None:
    by_key = {(e["database"], e["system"]): e for e in part["entries"]}
    ours = by_key.get(("postgresql", "flask_geneva"))
    if ours is not None:
        for peer in ("dbos", "floor"):
            table.ratio_row(
                "in_process",
                f"in process, noop, inline, vs {SIDE_NAMES[peer]} (PostgreSQL, steps/s)",
                ours,
                by_key.get(("postgresql", peer)),
                IN_PROCESS_TARGETS[peer],
            )
    for database in ("postgresql", "sqlite", "mysql"):
        entry = by_key.get((database, "flask_geneva"))
        if entry is None:
            continue
        extra = (
            f"; {entry['statements_per_step']:.2f} statements, "
            f"{entry['commits_per_step']:.2f} commits per step"
            if "statements_per_step" in entry
            else ""
        )
        table.add(
            "in_process",
            f"in process, noop, inline, {DATABASE_NAMES[database]} (steps/s{extra})",
            f"{entry['steps_per_second']:,.0f}",
        )


def _end_to_end_rows(table: _Table, part: dict[str, Any]) -> None:
    by_key = {(e["database"], e["workers"], e["system"]): e for e in part["entries"]}
    for (database, workers, system), entry in by_key.items():
        if system != "flask_geneva":
            continue
        table.ratio_row(
            "end_to_end",
            f"end to end, {DATABASE_NAMES[database]}, {workers} worker process"
            f"{'es' if workers > 1 else ''}, vs bare Celery chain (steps/s"
            + (
                f"; {entry['deadlocks']} deadlocks, both sides)"
                if entry.get("deadlocks") is not None
                else ")"
            ),
            entry,
            by_key.get((database, workers, "bare_chain")),
            END_TO_END_TARGET,
        )


def _scaling_rows(table: _Table, part: dict[str, Any]) -> None:
    runs = sorted(part["runs"], key=lambda run: run["workers"])
    if len(runs) < 2:
        return
    fewest, most = runs[0], runs[-1]
    table.ratio_row(
        "scaling",
        f"end to end, PostgreSQL, {part['workflows']:,} workflows: "
        f"{most['workers']} vs {fewest['workers']} worker processes (steps/s)",
        most,
        fewest,
        SCALING_TARGET,
    )
    counts = [run["deadlocks"] for run in runs]
    table.add(
        "scaling",
        "deadlocks the server detected, "
        + " / ".join(f"{run['workers']}" for run in runs)
        + " worker processes",
        " / ".join("not counted" if c is None else str(c) for c in counts),
        target=_target_text(("==", 0), ""),
        is_met=("" if None in counts else met(float(sum(counts)), ("==", 0.0))),
    )


def _memory_rows(table: _Table, part: dict[str, Any]) -> None:
    samples = part["samples"]
    measured = samples[part["warmup_samples"] :] or samples
    first, last = measured[0], measured[-1]
    table.add(
        "memory",
        f"worker RSS after warm-up ({first['steps']:,} steps) and at "
        f"{last['steps']:,} steps, {DATABASE_NAMES.get(part['database'], part['database'])} (KiB)",
        f"{first['rss_kib']:,} → {last['rss_kib']:,}",
    )
    bound = ("<=", part.get("max_slope_kib_per_10k_steps", MEMORY_MAX_SLOPE_KIB))
    slope = part["slope_kib_per_10k_steps"]
    table.add(
        "memory",
        "worker RSS growth per 10,000 steps (least squares after warm-up)",
        f"{slope:+,.0f} KiB",
        target=_target_text(bound, " KiB"),
        is_met=met(slope, bound),
    )


def _dispatcher_tick_rows(table: _Table, part: dict[str, Any]) -> None:
    sizes = sorted(part["sizes"], key=lambda size: size["parked"])
    small, large = sizes[0], sizes[-1]
    bound = ("<", part.get("target_ms", TICK_TARGET_MS))
    for key, label in (("due_run", f"{part['due']} due"), ("none_due_run", "none due")):
        ours, theirs = large[key], small[key]
        table.add(
            "dispatcher_tick",
            f"dispatcher run, {label}, {large['parked']:,} parked (ms, median of "
            f"{part['rounds']}; peer: at {small['parked']:,} parked)",
            f"{ours['median_ms']:.1f}",
            f"{theirs['median_ms']:.1f}",
            f"{ours['median_ms'] / theirs['median_ms']:.2f}x",
            _target_text(bound, " ms"),
            met(ours["median_ms"], bound),
        )


ROWS: dict[str, Callable[[_Table, dict[str, Any]], None]] = {
    "side_by_side": _side_by_side_rows,
    "in_process": _in_process_rows,
    "end_to_end": _end_to_end_rows,
    "scaling": _scaling_rows,
    "dispatcher_tick": _dispatcher_tick_rows,
    "memory": _memory_rows,
}


def markdown_table(results: dict[str, Any]) -> str:
    """Every figure of ``results`` in one Markdown table (``table`` subcommand).

    Columns: the figure, flask_geneva's value, the peer's, their ratio, the
    target and whether it is met (computed here from the figure and the
    target). A ``run`` column names each figure's run when the parts come from
    more than one ``run`` invocation or commit; the lines under the table say,
    per part, its commit, when it ran, for how long and the load average.
    """
    parts = results["parts"]
    table = _Table()
    for part, rows in ROWS.items():
        if part in parts:
            rows(table, parts[part])
    # Runs lettered A, B... in the order they started.
    first_started: dict[tuple[str, str], str] = {}
    for part_figures in parts.values():
        meta = part_figures["meta"]
        source = (meta["run"], meta["commit"])
        first_started[source] = min(first_started.get(source, "~"), meta["started"])
    sources = sorted(first_started, key=lambda source: first_started[source])
    labels = {source: chr(ord("A") + n) for n, source in enumerate(sources)}
    several = len(sources) > 1
    header = ["figure", "flask_geneva", "peer", "ratio", "target", "met"]
    if several:
        header.append("run")
    lines = [
        "| " + " | ".join(header) + " |",
        "| --- | ---: | ---: | ---: | ---: | :---: |" + (" :---: |" if several else ""),
    ]
    for part, cells in table.rows:
        meta = parts[part]["meta"]
        if several:
            cells = [*cells, labels[meta["run"], meta["commit"]]]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if several:
        for (run_id, commit_id), label in labels.items():
            lines.append(
                f"run {label}: `report.py run` of {run_id}, commit `{commit_id}`"
            )
    for name in PARTS:
        if name in parts:
            lines.append(
                _part_line(name, parts[name]["meta"], labels if several else None)
            )
    if results.get("machine"):
        lines.append(
            f"machine: {results['machine']}; broker: {results.get('broker', '')}"
        )
    return "\n".join(lines)


def _part_line(name: str, meta: dict[str, Any], labels: dict[Any, str] | None) -> str:
    """One part's provenance: commit, start, duration, load average, sizes."""
    line = f"- {name}"
    if labels is not None:
        line += f" (run {labels[meta['run'], meta['commit']]})"
    line += f": commit `{meta['commit']}`"
    if meta.get("changed_files"):
        changed = ", ".join(f"`{path}`" for path in meta["changed_files"])
        line += f" (tracked files changed: {changed})"
    line += f", started {meta['started']}"
    if "seconds" in meta:
        line += f", {meta['seconds']:.0f} s"
    if "load_before" in meta:
        line += (
            f", load average (1 min) {meta['load_before'][0]:.2f} before, "
            f"{meta['load_after'][0]:.2f} after"
        )
    sizes = ", ".join(f"{key} {value}" for key, value in meta.get("sizes", {}).items())
    if sizes:
        line += f"; {sizes}"
    if meta.get("quick"):
        line += " (--quick)"
    return line


def main() -> int:
    """The command line: ``run``, ``chart`` or ``table`` (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measure = commands.add_parser("run", help="measure and write the JSON")
    measure.add_argument("--out", default="bench/results.json")
    measure.add_argument(
        "--only",
        nargs="+",
        choices=PARTS,
        default=None,
        help="run these parts only, merged into the existing --out file",
    )
    measure.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes for a smoke run (figures mean nothing)",
    )
    measure.add_argument("--postgresql", default=None, help="SQLAlchemy URL")
    measure.add_argument("--mariadb", default=None, help="SQLAlchemy URL")
    measure.add_argument(
        "--no-sqlite", dest="sqlite", action="store_false", help="leave SQLite out"
    )
    measure.add_argument("--broker", default="redis://127.0.0.1:6379/15")
    measure.add_argument(
        "--workflows",
        type=int,
        default=300,
        help="in process and side by side: workflows of 10 steps per round",
    )
    measure.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="alternating rounds: in process, side by side, end to end",
    )
    measure.add_argument(
        "--bodies",
        nargs="+",
        choices=("noop", "reads-hero", "writes-hero", "io"),
        default=["noop", "reads-hero", "writes-hero", "io"],
        help="side by side: the step bodies",
    )
    measure.add_argument("--e2e-workflows", type=int, default=200)
    measure.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1, 4],
        help="end to end vs the bare chain: worker processes",
    )
    measure.add_argument("--scaling-workflows", type=int, default=10_000)
    measure.add_argument("--scaling-workers", type=int, nargs="+", default=[2, 8])
    measure.add_argument(
        "--scaling-rounds",
        type=int,
        default=1,
        help="alternating rounds of the worker counts (a worker started per run)",
    )
    measure.add_argument("--memory-steps", type=int, default=100_000)
    measure.add_argument(
        "--parked", type=int, default=1_000_000, help="dispatcher tick: parked rows"
    )
    measure.add_argument(
        "--tick-rounds", type=int, default=7, help="dispatcher runs per figure"
    )
    measure.add_argument(
        "--note", default="", help="printed under the chart, e.g. 'quiet machine'"
    )
    draw = commands.add_parser("chart", help="render the PNG from the JSON")
    draw.add_argument("results")
    draw.add_argument("png")
    table = commands.add_parser("table", help="print the Markdown table")
    table.add_argument("results")
    args = parser.parse_args()
    if args.command == "run":
        return run(args)
    if args.command == "chart":
        chart(load(Path(args.results)), Path(args.png))
        print(f"wrote {args.png}")
        return 0
    print(markdown_table(load(Path(args.results))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
