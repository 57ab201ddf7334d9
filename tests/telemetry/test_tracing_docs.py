"""docs/tracing.md: in the guide, and its examples hold against the real SDK (R-OTEL-*)."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tracing.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def test_the_page_is_in_the_guide_and_says_why_links():
    """The page is in mkdocs.yml's nav and explains the links choice (R-OTEL-21)."""
    assert "tracing.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    flat = " ".join(PAGE.read_text(encoding="utf-8").split())
    for words in ("links", "traceparent", "add_trace_context", "worker_process_init"):
        assert words in flat
    assert "geneva_drive has no tracing" in flat


def test_the_sdk_names_the_examples_import_exist():
    """Every name the examples import from opentelemetry's API and SDK exists; the
    OTLP exporter's module is the one opentelemetry-exporter-otlp installs."""
    imported = []
    for block in _blocks():
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module.startswith(
                "opentelemetry"
            ):
                imported.extend((node.module, alias.name) for alias in node.names)
    assert ("opentelemetry.sdk.trace.export", "BatchSpanProcessor") in imported
    for module, name in imported:
        if module.startswith("opentelemetry.exporter.otlp"):
            assert (module, name) == (
                "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
                "OTLPSpanExporter",
            )
            continue
        assert hasattr(importlib.import_module(module), name), (module, name)


def test_the_testing_example_records_a_span():
    """The in-memory exporter example runs as written and records spans."""
    [example] = [block for block in _blocks() if "InMemorySpanExporter" in block]
    program = (
        example
        + "\nwith trace.get_tracer('docs').start_as_current_span('geneva.step X.y'):\n"
        "    pass\nprint(step_span_names())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "['geneva.step X.y']"
