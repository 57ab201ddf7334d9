"""The ``flask geneva`` command group (SPEC §21)."""

from __future__ import annotations

from flask.cli import AppGroup

__all__ = ["geneva_group"]

geneva_group = AppGroup("geneva", help="flask_geneva: durable workflows.")
