"""User-docs pages that the guide promises (issue 34).

``mkdocs build --strict`` (in .ci/run) checks the links; these tests check that
a page is in the guide's navigation, says what it must, and that its Python
examples are valid Python.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _nav_pages(config_text):
    """The pages of mkdocs.yml's ``nav:`` block (``- Title: page.md`` lines).

    Read as text: the lowest-versions pass of CI installs no YAML parser.
    """
    nav = config_text.partition("\nnav:\n")[2]
    for line in nav.splitlines():
        if line and not line.startswith(" "):
            break  # the next top-level key
        found = re.search(r":\s*(\S+\.md)\s*$", line)
        if found:
            yield found.group(1)


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_guide_has_a_page_on_steps_running_at_least_once():
    """ "Steps run at least once" is in the guide: when a step runs twice (a worker
    killed after the side effect, before finalize commits) and how to make a
    side effect idempotent with a key that every run of the step shares, shown
    against a payment API's Idempotency-Key (R-RES-38, R-HK-24, R-HK-29)."""
    pages = list(_nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    assert "workflows.md" in pages  # the reader found the nav
    assert "at-least-once.md" in pages
    text = (DOCS / "at-least-once.md").read_text(encoding="utf-8")
    assert text.startswith("# Steps run at least once\n")
    flat = " ".join(text.split())
    assert "after the side effect, before finalize commits" in flat
    assert "Idempotency-Key" in flat
    assert 'idempotency_key=f"geneva-{self.type}-{self.id}-charge"' in flat
    assert "self.current_execution.id" in flat  # why not the execution id
    assert "R-EXE-11" in flat  # broker redeliveries do not run it twice
    blocks = _python_blocks(text)
    assert len(blocks) >= 2
    for block in blocks:
        ast.parse(block)


def test_the_guide_has_a_page_on_limits_and_priorities():
    """ "Limits and priorities" is in the guide: the partner-API example, what
    waiting means, the release on every way out, priorities, the operators'
    command, pages and gauges, and rate limits as coming (R-LIM-40..45)."""
    pages = list(_nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    assert "limits.md" in pages
    text = (DOCS / "limits.md").read_text(encoding="utf-8")
    assert text.startswith("# Limits and priorities\n")
    flat = " ".join(text.split())
    assert (
        'partner_api = Limit("partner-api", concurrency=2, '
        "key=lambda wf: wf.hero.tenant_id)"
    ) in flat
    assert "workflows.md#job-options-and-priorities" in flat
    for needed in (
        "flask geneva limits",
        "Limits** page",
        "geneva_drive.limit_oldest_wait_seconds",
        "limits: 3 keys busy",
        "Rate limits",
        "add_flow_limits",
    ):
        assert needed in flat, needed
    for rule in ("R-LIM-20", "R-LIM-40", "R-LIM-44", "R-LIM-45"):
        assert rule in flat
    blocks = _python_blocks(text)
    assert len(blocks) >= 2
    for block in blocks:
        ast.parse(block)
