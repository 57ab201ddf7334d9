"""Step throughput with real bodies, side by side in alternating rounds (issue 40).

Runs, in one run on one PostgreSQL, N workflows x 10 steps of each body
(``noop``, ``reads-hero``, ``writes-hero``, ``io``; see ``bench/step_overhead.py``)
on each side: the raw-SQL floor (``bench/peers/floor.py``, two commits per
step, the body's writes in the second), DBOS Transact
(``bench/peers/dbos_bench.py``: a transaction step for the hero's reads and
writes; left out when ``dbos`` is not installed), and flask_geneva
(``bench/step_overhead.py``) with inline continuation (as the Celery task runs
steps) and with one step per delivery. Each round runs every (body, side)
once, in the same order; the medians of the rounds are printed with the
ratios flask_geneva / DBOS and flask_geneva / floor per body, and the load
average before and after each round (the machine may be shared: compare
ratios of one run, never absolute figures across runs). Usage::

    python bench/side_by_side.py --database postgresql://postgres@127.0.0.1:5432/bench \\
        --workflows 300 --rounds 5 --json side_by_side.json
    python bench/side_by_side.py --bodies noop writes-hero --rounds 3

``--baseline-tree PATH`` adds flask_geneva from another checkout (e.g. a
``git worktree`` of the commit before an engine change) as two more sides,
run in the same rounds, so an engine change is measured against its baseline
under the same load: the table then also prints the ratio to the baseline.

The database's tables are dropped and re-created: give a scratch database.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
STEPS = 10
BODIES = ("noop", "reads-hero", "writes-hero", "io")
#: The sides, in the order each round runs them, with their display names.
SIDES = {
    "floor": "raw-SQL floor",
    "dbos": "DBOS Transact",
    "geneva_inline": "flask_geneva, inline continuation",
    "geneva_delivery": "flask_geneva, one step per delivery",
    "geneva_inline_base": "baseline flask_geneva, inline continuation",
    "geneva_delivery_base": "baseline flask_geneva, one step per delivery",
}


def _dbos_installed() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def _run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(  # noqa: S603 - our own interpreter and scripts
        command, cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return done.stdout


def _steps_per_second(output: str) -> float:
    match = re.search(r"^steps/s:\s*([\d,.]+)", output, re.M)
    if match is None:
        raise RuntimeError(f"no steps/s in the output:\n{output[-2000:]}")
    return float(match.group(1).replace(",", ""))


def _measure(
    side: str, body: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """Run one side once with ``body``; its steps/s (and geneva's counts)."""
    python = sys.executable
    if side in ("floor", "dbos"):
        script = "floor.py" if side == "floor" else "dbos_bench.py"
        dsn = sa.make_url(args.database).set(drivername="postgresql")
        command = [
            python,
            str(BENCH / "peers" / script),
            "--dsn",
            dsn.render_as_string(hide_password=False),
            "--body",
            body,
            str(args.workflows),
            str(STEPS),
        ]
        # DBOS writes a log file where it runs: not in the repository.
        output = _run(command, cwd=tmp if side == "dbos" else REPO)
        return {"steps_per_second": _steps_per_second(output)}
    out = tmp / "geneva.json"
    url = sa.make_url(args.database).set(drivername="postgresql+psycopg")
    tree = Path(args.baseline_tree) if side.endswith("_base") else REPO
    command = [
        python,
        # The script puts its own tree first on sys.path: that flask_geneva runs.
        str(tree / "bench" / "step_overhead.py"),
        "--workflows",
        str(args.workflows),
        "--body",
        body,
        "--database-url",
        url.render_as_string(hide_password=False),
        "--json",
        str(out),
    ]
    if side.startswith("geneva_inline"):
        command.append("--inline-continuation")
    _run(command, cwd=tree)
    return json.loads(out.read_text())


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the rounds; the figures of every (body, side) and the load averages."""
    sides = [
        s
        for s in SIDES
        if (s != "dbos" or _dbos_installed())
        and (not s.endswith("_base") or args.baseline_tree)
    ]
    if "dbos" not in sides:
        print("dbos is not installed: DBOS Transact left out", flush=True)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        body: {side: [] for side in sides} for body in args.bodies
    }
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(1, args.rounds + 1):
            before = os.getloadavg()
            for body in args.bodies:
                for side in sides:
                    figures = _measure(side, body, args, Path(tmp))
                    runs[body][side].append(figures)
                    print(
                        f"round {number}/{args.rounds} {body:<11} {side:<15} "
                        f"{figures['steps_per_second']:8.1f} steps/s",
                        flush=True,
                    )
            after = os.getloadavg()
            loads.append({"round": number, "before": before, "after": after})
            print(
                f"round {number}: load average {before[0]:.2f} before, "
                f"{after[0]:.2f} after (1 min)",
                flush=True,
            )
    results: dict[str, Any] = {
        "measured_on": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "workflows": args.workflows,
        "steps_per_workflow": STEPS,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "load_average": loads,
        "bodies": {},
    }
    for body, by_side in runs.items():
        entry: dict[str, Any] = {}
        for side, rounds in by_side.items():
            figures = {
                "steps_per_second": statistics.median(
                    r["steps_per_second"] for r in rounds
                ),
                "rounds_steps_per_second": [r["steps_per_second"] for r in rounds],
            }
            for key in ("statements_per_step", "commits_per_step"):
                if key in rounds[0]:
                    figures[key] = statistics.median(r[key] for r in rounds)
            entry[side] = figures
        results["bodies"][body] = entry
    return results


def _commit() -> str:
    """The checkout's short commit, as ``bench/report.py`` records it."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench.report import commit

    return commit()


def table(results: dict[str, Any]) -> str:
    """The medians and ratios of ``results`` as a Markdown table."""
    lines = [
        f"{results['workflows']} workflows x {results['steps_per_workflow']} steps, "
        f"medians of {results['rounds']} alternating rounds, PostgreSQL, "
        f"measured {results['measured_on']} on {results['commit']}",
        "",
        "| body | side | steps/s | commits/step | statements/step | vs DBOS "
        "| vs floor | vs baseline |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rounds_table = [
        "",
        "Ratios in each round (the rounds' loads differ: a round's sides ran "
        "close together):",
        "",
        "| body | side | vs DBOS | vs floor | vs baseline |",
        "| --- | --- | --- | --- | --- |",
    ]
    for body, entry in results["bodies"].items():
        floor = entry.get("floor", {}).get("steps_per_second")
        dbos = entry.get("dbos", {}).get("steps_per_second")
        for side, figures in entry.items():
            rate = figures["steps_per_second"]
            commits = figures.get("commits_per_step")
            statements = figures.get("statements_per_step")
            is_geneva = side.startswith("geneva")
            base = entry.get(f"{side}_base", {}).get("steps_per_second")
            lines.append(
                f"| {body} | {SIDES[side]} | {rate:,.0f} | "
                f"{'' if commits is None else f'{commits:.2f}'} | "
                f"{'' if statements is None else f'{statements:.2f}'} | "
                f"{f'{rate / dbos:.2f}x' if is_geneva and dbos else ''} | "
                f"{f'{rate / floor:.2f}x' if is_geneva and floor else ''} | "
                f"{f'{rate / base:.2f}x' if base else ''} |"
            )
            if is_geneva and not side.endswith("_base"):
                rounds_table.append(
                    f"| {body} | {SIDES[side]} | "
                    + " | ".join(
                        _round_ratios(figures, entry.get(other))
                        for other in ("dbos", "floor", f"{side}_base")
                    )
                    + " |"
                )
    lines += rounds_table
    loads = results["load_average"]
    if loads:
        lows = min(min(item["before"][0], item["after"][0]) for item in loads)
        highs = max(max(item["before"][0], item["after"][0]) for item in loads)
        each = ", ".join(
            f"{item['before'][0]:.1f}/{item['after'][0]:.1f}" for item in loads
        )
        lines += [
            "",
            f"load average (1 min) during the run: {lows:.2f} to {highs:.2f} "
            f"on {results['cpus']} CPUs (before/after each round: {each})",
        ]
    return "\n".join(lines)


def _round_ratios(figures: dict[str, Any], other: dict[str, Any] | None) -> str:
    """``figures``' steps/s over ``other``'s, round by round, comma-separated."""
    if not other:
        return ""
    return ", ".join(
        f"{mine / theirs:.2f}"
        for mine, theirs in zip(
            figures["rounds_steps_per_second"],
            other["rounds_steps_per_second"],
            strict=True,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database",
        default="postgresql://postgres@127.0.0.1:5432/bench",
        help="a scratch PostgreSQL database (its tables are dropped)",
    )
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bodies", nargs="+", choices=BODIES, default=list(BODIES))
    parser.add_argument(
        "--baseline-tree",
        default=None,
        help="another checkout whose flask_geneva runs as two more sides",
    )
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument(
        "--table", default=None, help="print the table of this JSON file and exit"
    )
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    results = measure(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
