"""Tracing's cost per step (issue 38, SPEC §28.1): step_overhead.py in four modes.

Each round runs ``bench/step_overhead.py`` once per mode, each in a fresh
interpreter, the modes alternating round by round (the machine is shared, so
a slow moment hits every mode alike); min and median over the rounds are
printed for CPU ms per step (this process) and steps/s. Usage::

    python bench/tracing_overhead.py --rounds 5 --workflows 100
    python bench/tracing_overhead.py --inline-continuation

The modes:

- ``absent``: opentelemetry cannot be imported (a ``sys.meta_path`` blocker),
  as without the ``otel`` extra (R-OTEL-01);
- ``no-provider``: the API installed, no tracer provider set (R-OTEL-02);
- ``sdk-dropped``: an SDK provider whose sampler drops every span (the
  spans are started, not recorded; the context is still stored);
- ``sdk``: an SDK provider recording every span into a
  ``SimpleSpanProcessor`` whose exporter discards them (the synchronous
  worst case of span creation, attributes, links and the attempt's COUNT).
"""

from __future__ import annotations

import argparse
import json
import runpy
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES = ("absent", "no-provider", "sdk-dropped", "sdk")


class _NoOpenTelemetry:
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def _child(mode: str, argv: list[str]) -> None:
    """Set ``mode`` up, then run step_overhead.py with ``argv``."""
    if mode == "absent":
        sys.meta_path.insert(0, _NoOpenTelemetry())
    elif mode in ("sdk", "sdk-dropped"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export import SpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        class _Discard(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider(sampler=ALWAYS_ON if mode == "sdk" else ALWAYS_OFF)
        provider.add_span_processor(SimpleSpanProcessor(_Discard()))
        trace.set_tracer_provider(provider)
    sys.argv = [str(HERE / "step_overhead.py"), *argv]
    runpy.run_path(str(HERE / "step_overhead.py"), run_name="__main__")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workflows", type=int, default=100)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--inline-continuation", action="store_true")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    figures: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(args.rounds):
            order = modes if round_number % 2 == 0 else list(reversed(modes))
            for mode in order:
                out = Path(tmp) / f"{mode}-{round_number}.json"
                command = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--child",
                    mode,
                    "--workflows",
                    str(args.workflows),
                    "--json",
                    str(out),
                ]
                if args.database_url:
                    command += ["--database-url", args.database_url]
                if args.inline_continuation:
                    command.append("--inline-continuation")
                subprocess.run(command, check=True, capture_output=True)  # noqa: S603 - this interpreter, this script
                figures[mode].append(json.loads(out.read_text()))
    print(
        f"{args.rounds} rounds x {args.workflows} workflows x 10 steps, "
        f"inline continuation: {args.inline_continuation}"
    )
    print(
        f"{'mode':<12} {'CPU ms/step min':>16} {'median':>8} {'steps/s max':>12} "
        f"{'median':>8} {'stmts/step':>10}"
    )
    for mode in modes:
        cpu = [f["cpu_ms_per_step"] for f in figures[mode]]
        rate = [f["steps_per_second"] for f in figures[mode]]
        statements = figures[mode][0]["statements_per_step"]
        print(
            f"{mode:<12} {min(cpu):>16.3f} {statistics.median(cpu):>8.3f} "
            f"{max(rate):>12,.0f} {statistics.median(rate):>8,.0f} {statements:>10.2f}"
        )


if __name__ == "__main__":
    main()
