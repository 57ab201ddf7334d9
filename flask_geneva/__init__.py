"""flask_geneva: durable, database-backed, multi-step workflows for Flask."""

from __future__ import annotations

__version__ = "0.1.0.dev0"
