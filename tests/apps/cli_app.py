"""An app for ``flask --app tests.apps.cli_app geneva ...`` (tests/cli/test_cli.py runs it in-process and once as a subprocess).

The database comes from ``GENEVA_TEST_CLI_DATABASE_URL`` (the test's SQLite file
or server database), else ``GENEVA_TEST_DATABASE_URL``. Task publications are
recorded, not sent, so the flow-control commands need no broker.
"""

from __future__ import annotations

import os
from datetime import timedelta

from flask import Flask

from flask_geneva import resumable_step
from flask_geneva import step
from tests.apps import basic
from tests.support.common_workflows import EvolvedSignup  # noqa: F401 - the CLI reports it


def create_app() -> Flask:
    """The app factory ``flask --app tests.apps.cli_app`` calls."""
    url = os.environ.get("GENEVA_TEST_CLI_DATABASE_URL") or os.environ.get(
        "GENEVA_TEST_DATABASE_URL", ""
    )
    if not url:
        raise RuntimeError(
            "set GENEVA_TEST_CLI_DATABASE_URL (or GENEVA_TEST_DATABASE_URL) to the "
            "database the CLI should use"
        )
    overrides: dict[str, object] = {}
    # Settings a test lowers for one command (tests/cli/test_cli_signal.py).
    for variable, setting in (
        ("GENEVA_TEST_MAX_SIGNAL_PAYLOAD_SIZE", "GENEVA_MAX_SIGNAL_PAYLOAD_SIZE"),
        ("GENEVA_TEST_MAX_PENDING_SIGNALS", "GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW"),
    ):
        if os.environ.get(variable):
            overrides[setting] = int(os.environ[variable])
    return basic.create_app(url, **overrides)


class CliOnboarding(basic.geneva.Workflow):
    """Two steps and a resumable one; used by tests/cli/test_cli.py."""

    @step
    def welcome(self):
        pass

    @step(wait=timedelta(hours=1))
    def follow_up(self):
        pass

    @resumable_step
    def sweep(self, it):
        for _ in it.iterate_over(range(3)):
            pass


class CliAwaiting(basic.geneva.Workflow):
    """A step that waits for the signal "paid"; used by tests/cli/test_cli_signal.py."""

    @step(wait_for="paid")
    def ship(self):
        pass
