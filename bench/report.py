"""The README's benchmark figures: run them to JSON, render the chart and table.

Three subcommands, so that figures measured once (on a quiet machine) can be
rendered again without measuring::

    # measure: writes every figure to a JSON file
    python bench/report.py run --out bench/results.json \\
        --postgresql postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --mariadb mysql+pymysql://root@127.0.0.1:3306/test \\
        --broker redis://127.0.0.1:6379/15 --note "quiet machine"
    # the PNG chart from that JSON (needs matplotlib: pip install -e '.[bench]')
    python bench/report.py chart bench/results.json docs/benchmarks.png
    # the README table (Markdown) from the same JSON
    python bench/report.py table bench/results.json

``run`` measures, in one process, N workflows x 10 no-op steps: the raw-SQL
floor (``bench/peers/floor.py``, two commits per step), DBOS Transact
(``bench/peers/dbos_bench.py``, skipped when ``dbos`` is not installed) and
flask_geneva with inline continuation (``bench/step_overhead.py``) on
PostgreSQL, and flask_geneva on SQLite and MariaDB, in alternating rounds
(medians kept); then end to end through a real Celery worker and the broker
(``bench/end_to_end.py``), flask_geneva against the bare chain, with 1 and 4
worker processes on each server database (SQLite: one ``solo`` worker).
The databases' tables are dropped and re-created: give scratch databases.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
STEPS = 10

#: Display names of the databases, in chart order.
DATABASE_NAMES = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "mysql": "MariaDB"}
#: Display names of the systems, in chart order.
SYSTEM_NAMES = {
    "floor": "raw-SQL floor (2 commits/step)",
    "dbos": "DBOS Transact",
    "flask_geneva": "flask_geneva",
    "bare_chain": "bare Celery chain",
}


# -- run ---------------------------------------------------------------------------


def _steps_per_second(output: str) -> float:
    match = re.search(r"^steps/s:\s*([\d,.]+)", output, re.M)
    if match is None:
        raise RuntimeError(f"no steps/s in the output:\n{output[-2000:]}")
    return float(match.group(1).replace(",", ""))


def _run(command: list[str]) -> str:
    print("  $", " ".join(command), flush=True)
    done = subprocess.run(  # noqa: S603 - our own interpreter and scripts
        command, cwd=REPO, capture_output=True, text=True, check=False
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


def _in_process(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Alternating rounds of every in-process side; one entry per side, medians."""
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
                    output = _run([*command, str(args.workflows), str(STEPS)])
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
    return entries


def _end_to_end(args: argparse.Namespace) -> list[dict[str, Any]]:
    """flask_geneva vs the bare chain through a real worker, per database and size."""
    runs: list[tuple[str | None, int]] = []
    for url in (args.postgresql, args.mariadb):
        if url:
            runs.extend((url, workers) for workers in args.workers)
    if args.sqlite:
        runs.append((None, 1))
    entries = []
    with tempfile.TemporaryDirectory() as tmp:
        for url, workers in runs:
            out = Path(tmp) / "end_to_end.json"
            _run(
                [
                    sys.executable,
                    str(BENCH / "end_to_end.py"),
                    "--workflows",
                    str(args.e2e_workflows),
                    "--rounds",
                    str(args.rounds),
                    "--concurrency",
                    str(workers),
                    "--broker",
                    args.broker,
                    "--json",
                    str(out),
                    *(["--database-url", url] if url else []),
                ]
            )
            result = json.loads(out.read_text())
            for system in ("flask_geneva", "bare_chain"):
                entries.append(
                    {
                        "database": result["database"],
                        "workers": result["workers"],
                        "system": system,
                        **result[system],
                    }
                )
    return entries


def run(args: argparse.Namespace) -> None:
    """Measure everything and write the JSON (``run`` subcommand)."""
    results: dict[str, Any] = {
        "measured_on": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "note": args.note,
        "machine": f"{platform.machine()}, {_cpu_count()} cores, {platform.system()}",
        "workflows": args.workflows,
        "steps_per_workflow": STEPS,
        "rounds": args.rounds,
        "broker": "RabbitMQ" if args.broker.startswith("amqp") else "Redis",
        "in_process": _in_process(args),
        "end_to_end": [],
    }
    # Written once now and again at the end: a failed end-to-end run keeps
    # the in-process figures.
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    if not args.skip_end_to_end:
        results["end_to_end"] = _end_to_end(args)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    print(markdown_table(results))


def _cpu_count() -> int:
    import os

    return os.cpu_count() or 0


# -- chart and table ---------------------------------------------------------------


def _ordered(entries: list[dict[str, Any]], key: str, names: dict[str, str]) -> list:
    present = {entry[key] for entry in entries}
    return [name for name in names if name in present]


def chart(results: dict[str, Any], path: Path) -> None:
    """Write the PNG chart of ``results`` (``chart`` subcommand).

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

    in_process = results["in_process"]
    end_to_end = results["end_to_end"]
    panels = 2 if end_to_end else 1
    figure, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.6), squeeze=False)
    colors = {
        "floor": "#9e9e9e",
        "dbos": "#e07b39",
        "flask_geneva": "#2f6db5",
        "bare_chain": "#7fae5a",
    }

    def bars(axis: Any, groups: list[tuple[str, dict[str, float]]], title: str) -> None:
        systems = [s for s in SYSTEM_NAMES if any(s in values for _, values in groups)]
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
            drawn = axis.bar(
                xs, heights, width, label=SYSTEM_NAMES[system], color=colors[system]
            )
            axis.bar_label(drawn, fmt="%.0f", fontsize=8, padding=2)
        axis.set_xticks(range(len(groups)), [label for label, _ in groups])
        axis.set_ylabel("steps/s (higher is better)")
        axis.set_title(title, fontsize=11)
        axis.set_ylim(0, max(h for _, v in groups for h in v.values()) * 1.35)
        axis.legend(fontsize=8, loc="upper left", ncols=2)

    groups = []
    for database in _ordered(in_process, "database", DATABASE_NAMES):
        values = {
            e["system"]: e["steps_per_second"]
            for e in in_process
            if e["database"] == database
        }
        groups.append((DATABASE_NAMES[database], values))
    bars(
        axes[0][0],
        groups,
        f"In process: {results['workflows']} workflows x "
        f"{results['steps_per_workflow']} no-op steps",
    )
    if end_to_end:
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
        bars(axes[0][1], groups, f"End to end: Celery worker + {broker}")
    note = f"measured {results['measured_on']}"
    if results.get("note"):
        note += f" ({results['note']})"
    figure.text(0.01, 0.01, note, fontsize=8, color="#555555")
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def markdown_table(results: dict[str, Any]) -> str:
    """The README's table of ``results`` as Markdown (``table`` subcommand)."""
    lines = [
        "| benchmark | database | system | steps/s | statements/step | commits/step |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for entry in results["in_process"]:
        lines.append(
            f"| in process | {DATABASE_NAMES[entry['database']]} | "
            f"{SYSTEM_NAMES[entry['system']]} | {entry['steps_per_second']:,.0f} | "
            + (
                f"{entry['statements_per_step']:.2f} | {entry['commits_per_step']:.2f} |"
                if "statements_per_step" in entry
                else "| |"
            )
        )
    for entry in results["end_to_end"]:
        workers = entry["workers"]
        lines.append(
            f"| end to end, {workers} worker{'s' if workers > 1 else ''} | "
            f"{DATABASE_NAMES[entry['database']]} | {SYSTEM_NAMES[entry['system']]} | "
            f"{entry['steps_per_second']:,.0f} | | |"
        )
    lines += ["", *ratio_table(results)]
    return "\n".join(lines)


def ratio_table(results: dict[str, Any]) -> list[str]:
    """flask_geneva's ratios to its peers (issue 16's targets), as Markdown lines.

    In process, the ratio of the medians and the ratio within each alternating
    round (the rounds ran one after the other, so a round's ratio shares its
    machine's load); end to end, flask_geneva over the bare chain per database
    and worker count.
    """
    lines = [
        "| comparison | ratio of medians | ratio per round | target |",
        "| --- | ---: | --- | ---: |",
    ]
    by_key = {(e["database"], e["system"]): e for e in results["in_process"]}
    ours = by_key.get(("postgresql", "flask_geneva"))
    for peer, target in (("dbos", "1.3x"), ("floor", "0.6x")):
        theirs = by_key.get(("postgresql", peer))
        if ours is None or theirs is None:
            continue
        rounds = zip(
            ours["rounds_steps_per_second"],
            theirs["rounds_steps_per_second"],
            strict=False,
        )
        lines.append(
            f"| in process, PostgreSQL: flask_geneva / {SYSTEM_NAMES[peer]} | "
            f"{ours['steps_per_second'] / theirs['steps_per_second']:.2f}x | "
            + ", ".join(f"{a / b:.2f}x" for a, b in rounds)
            + f" | {target} |"
        )
    end_to_end = {
        (e["database"], e["workers"], e["system"]): e for e in results["end_to_end"]
    }
    for (database, workers, system), entry in end_to_end.items():
        bare = end_to_end.get((database, workers, "bare_chain"))
        if system != "flask_geneva" or bare is None:
            continue
        lines.append(
            f"| end to end, {DATABASE_NAMES[database]}, {workers} worker"
            f"{'s' if workers > 1 else ''}: flask_geneva / bare Celery chain | "
            f"{entry['steps_per_second'] / bare['steps_per_second']:.2f}x | | 1.5x |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measure = commands.add_parser("run", help="measure and write the JSON")
    measure.add_argument("--out", default="bench/results.json")
    measure.add_argument("--postgresql", default=None, help="SQLAlchemy URL")
    measure.add_argument("--mariadb", default=None, help="SQLAlchemy URL")
    measure.add_argument(
        "--no-sqlite", dest="sqlite", action="store_false", help="leave SQLite out"
    )
    measure.add_argument("--broker", default="redis://127.0.0.1:6379/15")
    measure.add_argument("--workflows", type=int, default=300, help="in process")
    measure.add_argument("--e2e-workflows", type=int, default=200)
    measure.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    measure.add_argument("--rounds", type=int, default=3)
    measure.add_argument("--skip-end-to-end", action="store_true")
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
        run(args)
    elif args.command == "chart":
        chart(json.loads(Path(args.results).read_text()), Path(args.png))
        print(f"wrote {args.png}")
    else:
        print(markdown_table(json.loads(Path(args.results).read_text())))


if __name__ == "__main__":
    main()
