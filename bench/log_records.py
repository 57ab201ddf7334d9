"""Cost of one emitted log record of the package (SPEC §28.3, R-OLOG-07).

Times ``adapter.info(...)`` to a handler that drops the record, for the
executor's tagged adapter and for a module logger, and prints the median of
``--rounds`` rounds in microseconds per record. Runs against any checkout (it
uses only ``core.tagged_logging``), so that two checkouts can be compared::

    python bench/log_records.py
    python bench/log_records.py --otel   # with an SDK span current

With ``--otel`` the records are logged inside a span of an SDK tracer
provider (the trace ids are read and formatted).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flask_geneva.core.tagged_logging import execution_logger
from flask_geneva.core.tagged_logging import module_logger

RECORDS = 20_000


class _Drop(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        pass


def _time(log: logging.LoggerAdapter, rounds: int) -> float:
    """Median microseconds per record over ``rounds`` rounds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for index in range(RECORDS):
            log.info("step %s done in %.3fs", index, 0.25)
        times.append((time.perf_counter() - start) / RECORDS * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--otel", action="store_true")
    args = parser.parse_args()
    logger = logging.getLogger("flask_geneva")
    logger.addHandler(_Drop())
    logger.setLevel(logging.INFO)
    logger.propagate = False
    workflow = SimpleNamespace(type="Signup", id=1, hero_type="User", hero_id="7")
    execution = SimpleNamespace(id=9, step_name="send")
    span: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if args.otel:
        from opentelemetry.sdk.trace import TracerProvider

        span = TracerProvider().get_tracer("bench").start_as_current_span("step")
    with span:
        tagged = _time(execution_logger(workflow, execution), args.rounds)
        plain = _time(module_logger("flask_geneva"), args.rounds)
    print(f"tagged adapter: {tagged:.2f} us/record")
    print(f"module logger:  {plain:.2f} us/record")


if __name__ == "__main__":
    main()
