"""Worker memory over many steps: RSS of a real Celery worker, sampled per batch.

Starts one ``celery worker`` (``--pool=solo``: the process that runs the steps
is the one sampled) on ``bench/end_to_end.py``'s app, then feeds it batches of
workflows of ten no-op steps (``BenchEndToEndTenSteps``), waits for each batch
to finish and samples the worker's resident set size (``VmRSS`` from
``/proc``). Prints the series and the least-squares slope in KiB per 10,000
steps over the samples after the warm-up, and exits non-zero when the slope is
above ``--max-slope`` (a leak). Usage::

    python bench/memory.py --steps 100000 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --broker redis://127.0.0.1:6379/15

The database's geneva tables are dropped and re-created; the broker's
``celery`` queue is purged. ``--json`` writes the series and the slope.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import end_to_end  # noqa: E402
from bench import scratch  # noqa: E402
from bench.worker_process import QUIET_WORKER_OPTIONS  # noqa: E402
from bench.worker_process import purge_celery_queue  # noqa: E402
from bench.worker_process import rss_kib  # noqa: E402
from bench.worker_process import start_celery  # noqa: E402
from bench.worker_process import stop  # noqa: E402
from tests.apps import basic  # noqa: E402

STEPS = end_to_end.STEPS


def slope_per_10k(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of ``(steps, KiB)`` points, in KiB per 10,000 steps."""
    count = len(points)
    mean_x = sum(x for x, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    var = sum((x - mean_x) ** 2 for x, _ in points)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return cov / var * 10_000 if var else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument(
        "--batch-steps", type=int, default=5_000, help="steps between two samples"
    )
    parser.add_argument(
        "--warmup-samples",
        type=int,
        default=2,
        help="first samples left out of the slope (imports, caches, pools)",
    )
    parser.add_argument(
        "--max-slope",
        type=float,
        default=256.0,
        help="KiB per 10,000 steps above which the run fails as a leak",
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--broker", default=end_to_end.BROKER_URL)
    parser.add_argument("--timeout", type=float, default=600, help="per batch, s")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    if args.steps // args.batch_steps <= args.warmup_samples:
        parser.error(
            f"--steps {args.steps} in batches of --batch-steps {args.batch_steps} "
            f"give {args.steps // args.batch_steps} samples; the slope needs more "
            f"than --warmup-samples {args.warmup_samples}"
        )

    tmp = tempfile.TemporaryDirectory()
    url = scratch.database_url(args.database_url, tmp)
    app, celery = end_to_end.build(url, args.broker)
    scratch.reset_tables(app)
    purge_celery_queue(celery)

    log_path = Path(tmp.name) / "worker.log"
    worker = start_celery(
        "bench.end_to_end:celery",
        ["worker", "--pool=solo", *QUIET_WORKER_OPTIONS, "-l", "warning"],
        log_path,
        {
            "GENEVA_BENCH_WORKER": "1",
            "GENEVA_BENCH_DATABASE_URL": url,
            "GENEVA_BENCH_BROKER_URL": args.broker,
        },
    )
    batch = max(args.batch_steps // STEPS, 1)
    samples: list[tuple[int, int]] = []
    started = time.monotonic()
    try:
        with app.app_context():
            session = basic.db.session
            workflow_cls = basic.geneva.Workflow
            workflow_type = end_to_end.BenchEndToEndTenSteps.__geneva_type__

            def finished() -> int:
                count = session.scalar(
                    sa.select(sa.func.count(workflow_cls.id))
                    .where(workflow_cls.type == workflow_type)
                    .where(workflow_cls.state == "finished")
                )
                session.rollback()
                return int(count or 0)

            created = 0
            while created * STEPS < args.steps:
                for _ in range(batch):
                    end_to_end.BenchEndToEndTenSteps.create(
                        allow_multiple=True, commit=False
                    )
                session.commit()
                created += batch
                end_to_end.wait_until(
                    lambda target=created: finished() == target,
                    args.timeout,
                    log_path,
                )
                samples.append((created * STEPS, rss_kib(worker.pid)))
                print(
                    f"{samples[-1][0]:>8} steps  RSS {samples[-1][1]:>8} KiB  "
                    f"({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
            session.remove()
            basic.db.drop_all()
    finally:
        stop(worker)

    measured = samples[args.warmup_samples :]
    slope = slope_per_10k(measured) if len(measured) >= 2 else 0.0
    first, last = measured[0], measured[-1]
    print(f"database: {sa.make_url(url).get_backend_name()}  broker: {args.broker}")
    print(
        f"RSS after warm-up ({first[0]} steps): {first[1]} KiB; at {last[0]} steps: "
        f"{last[1]} KiB ({last[1] - first[1]:+d} KiB)"
    )
    print(
        f"slope: {slope:+.1f} KiB per 10,000 steps (least squares over "
        f"{len(measured)} samples; limit {args.max_slope:.0f})"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "database": sa.make_url(url).get_backend_name(),
                    "samples": [{"steps": s, "rss_kib": r} for s, r in samples],
                    "warmup_samples": args.warmup_samples,
                    "slope_kib_per_10k_steps": slope,
                },
                indent=2,
            )
            + "\n"
        )
    if slope > args.max_slope:
        raise SystemExit(
            f"LEAK: worker RSS grows {slope:.1f} KiB per 10,000 steps "
            f"(limit {args.max_slope:.0f})"
        )


if __name__ == "__main__":
    main()
