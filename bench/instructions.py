"""Instructions per step: ``bench/step_overhead.py`` under callgrind, load-proof.

Wall-clock throughput on a shared machine moves with the neighbours' load;
instruction counts do not. This runs ``bench/step_overhead.py`` twice under
``valgrind --tool=callgrind`` (``--small`` and ``--large`` workflows of ten
steps), counts only the instructions of its measured loop (the script marks the
loop with ``os.getppid()`` calls, and ``--dump-before=getppid`` cuts a dump
there), and prints the difference divided by the difference in steps: the
instructions of this process per step, without start-up, warm-up and set-up
(statements and commits per step likewise, from the two runs' totals).
Database server work is not counted (another process). Usage::

    python bench/instructions.py --inline-continuation \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test
    python bench/instructions.py --body writes-hero  # the step bodies of step_overhead

Needs ``valgrind`` on the PATH. ``--profile`` keeps the large run's callgrind
file of the loop for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = 10


def loop_instructions(
    workflows: int, extra: list[str], out_dir: Path, tag: str
) -> tuple[int, dict[str, float], Path]:
    """Instructions of the measured loop of one run, its JSON figures, its dump."""
    prefix = out_dir / f"callgrind.{tag}"
    figures_path = out_dir / f"{tag}.json"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--dump-before=getppid",
        f"--callgrind-out-file={prefix}.%p",
        sys.executable,
        str(REPO / "bench" / "step_overhead.py"),
        "--workflows",
        str(workflows),
        "--json",
        str(figures_path),
        # Under callgrind a step is ~50x slower: without this the 1 s budget
        # would end chains that a normal run continues (R-EXE-72).
        "--inline-budget",
        "3600",
        *extra,
    ]
    # A fixed hash seed: string hashes (dict and set layouts) are then the same
    # in every run, so two runs of one commit count the same instructions.
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(command, check=True, capture_output=True, env=environment)  # noqa: S603
    dumps = sorted(
        out_dir.glob(f"callgrind.{tag}.*"),
        key=lambda path: [int(part) for part in re.findall(r"\d+", path.name)],
    )
    # Dump 1 ends at the first marker, dump 2 at the second: the loop.
    loop_dump = next(path for path in dumps if path.name.endswith(".2"))
    match = re.search(r"^(?:summary|totals): (\d+)", loop_dump.read_text(), re.M)
    if match is None:
        raise SystemExit(f"no instruction total in {loop_dump}")
    return int(match.group(1)), json.loads(figures_path.read_text()), loop_dump


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10, help="workflows, small run")
    parser.add_argument("--large", type=int, default=30, help="workflows, large run")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--inline-continuation", action="store_true")
    parser.add_argument(
        "--body",
        default="noop",
        help="what each step's body does, passed to bench/step_overhead.py "
        "(noop, reads-hero, writes-hero, io; default: noop)",
    )
    parser.add_argument(
        "--profile", default=None, help="copy the large run's loop dump to this path"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (apt-get install valgrind)")
    extra = ["--database-url", args.database_url] if args.database_url else []
    if args.inline_continuation:
        extra.append("--inline-continuation")
    extra += ["--body", args.body]
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)
        small, small_figures, _ = loop_instructions(args.small, extra, out_dir, "small")
        large, large_figures, dump = loop_instructions(
            args.large, extra, out_dir, "large"
        )
        if args.profile:
            shutil.copyfile(dump, args.profile)
    steps = large_figures["steps"] - small_figures["steps"]

    def per_step(key: str) -> float:
        """The difference of the two runs' totals of ``key`` per step."""
        totals = [f[key] * f["steps"] for f in (large_figures, small_figures)]
        return (totals[0] - totals[1]) / steps

    print(f"database:              {large_figures['database']}")
    print(f"inline continuation:   {args.inline_continuation}")
    print(f"body:                  {args.body}")
    print(f"instructions per step: {(large - small) / steps:,.0f}")
    print(f"statements per step:   {per_step('statements_per_step'):.2f}")
    print(f"commits per step:      {per_step('commits_per_step'):.2f}")


if __name__ == "__main__":
    main()
