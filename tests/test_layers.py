"""Layering (STYLE §3): the executor loads neither Celery nor Flask-Admin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_executor_imports_neither_celery_nor_flask_admin():
    """Importing flask_geneva and its executor loads no celery or flask_admin module."""
    code = (
        "import sys, flask_geneva, flask_geneva.executor, flask_geneva.testing\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'flask_admin'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == ""
