"""DBOS Transact: N workflows x K no-op ``@DBOS.step`` steps, sequential.

The same shape as ``bench/step_overhead.py`` (in one process, one PostgreSQL).
Needs ``pip install dbos`` (the ``bench`` extra). Usage::

    python bench/peers/dbos_bench.py --dsn postgresql://postgres@127.0.0.1:5432/test 300 10

DBOS keeps its system tables in the ``--dsn`` database (it creates them). The
last line printed is ``steps/s: <figure>``.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflows", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument(
        "--dsn", default="postgresql://postgres@127.0.0.1:5432/dbos_bench"
    )
    args = parser.parse_args()
    try:
        from dbos import DBOS
    except ImportError:
        raise SystemExit(
            "dbos is not installed: pip install -e '.[bench]' (or pip install dbos)"
        ) from None

    DBOS(config={"name": "bench", "system_database_url": args.dsn})

    @DBOS.step()
    def noop(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow(k: int) -> int:
        total = 0
        for i in range(k):
            total += noop(i)
        return total

    DBOS.launch()
    workflow(2)  # warm up
    started = time.perf_counter()
    for _ in range(args.workflows):
        workflow(args.steps)
    elapsed = time.perf_counter() - started
    DBOS.destroy()
    steps = args.workflows * args.steps
    print(
        f"dbos: {steps} steps in {elapsed:.2f} s ({1000 * elapsed / steps:.2f} ms/step)"
    )
    print(f"steps/s: {steps / elapsed:.1f}")


if __name__ == "__main__":
    main()
