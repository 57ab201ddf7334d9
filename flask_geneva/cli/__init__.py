"""The ``flask geneva`` command group (SPEC §2.5, §15.7).

One module per concern; this one only assembles the group:

- :mod:`~flask_geneva.cli.schema`: ``install``, which writes the schema migrations
  into the host's Flask-Migrate directory (R-MIG-01..05);
- :mod:`~flask_geneva.cli.maintenance`: ``housekeeping`` and ``dispatch``, the
  periodic jobs run by hand;
- :mod:`~flask_geneva.cli.worker`: ``worker``, a Celery worker with flask_geneva's
  queues and schedule;
- :mod:`~flask_geneva.cli.inspection`: ``status``, ``list`` and ``show``, which only
  read;
- :mod:`~flask_geneva.cli.operator_actions`: ``pause``, ``resume``, ``cancel``,
  ``skip`` and ``recover`` (R-CLI-01/02);
- :mod:`~flask_geneva.cli.signal_command`: ``signal``, a workflow signal
  delivered by hand (R-WSIG-60..62);
- :mod:`~flask_geneva.cli.step_check`: ``check-steps``, the deploy gate for step
  names (R-EVO-08);
- :mod:`~flask_geneva.cli.limits`: ``limits``, the concurrency limits' keys,
  running and waiting executions (R-LIM-40);
- :mod:`~flask_geneva.cli.schedules`: ``schedules`` and ``schedule pause|resume|
  run-now NAME`` (R-SCHED-33/34).

Errors are reported as one-line Click errors, a database without geneva's tables
too (:mod:`~flask_geneva.cli.database_errors`). Stored text (types, step names, error
messages, actors) is printed with its control characters escaped
(:mod:`flask_geneva.core.terminal_text`), so a stored escape sequence cannot drive the
operator's terminal; ``status --json`` gets the same from JSON's own escaping.
Every command runs in the app context (:func:`flask.cli.with_appcontext`), as
commands of a :class:`flask.cli.AppGroup` do.
"""

from __future__ import annotations

from flask import Flask

from flask_geneva.cli.database_errors import GenevaGroup
from flask_geneva.cli.inspection import list_command
from flask_geneva.cli.inspection import show_command
from flask_geneva.cli.inspection import status_command
from flask_geneva.cli.limits import limits_command
from flask_geneva.cli.maintenance import dispatch_command
from flask_geneva.cli.maintenance import housekeeping_command
from flask_geneva.cli.operator_actions import FLOW_CONTROL_COMMANDS
from flask_geneva.cli.operator_actions import recover_command
from flask_geneva.cli.schedules import schedule_group
from flask_geneva.cli.schedules import schedules_command
from flask_geneva.cli.schema import install_command
from flask_geneva.cli.signal_command import signal_command
from flask_geneva.cli.step_check import check_steps_command
from flask_geneva.cli.worker import worker_command

__all__ = ["geneva_group", "init_cli"]

geneva_group = GenevaGroup("geneva", help="flask_geneva: durable workflows.")
"""The ``flask geneva`` group, added to ``app.cli`` by ``Geneva.init_app``."""

for _command in (
    install_command,
    housekeeping_command,
    status_command,
    list_command,
    show_command,
    limits_command,
    schedules_command,
    schedule_group,
    *FLOW_CONTROL_COMMANDS,
    recover_command,
    signal_command,
    check_steps_command,
    dispatch_command,
    worker_command,
):
    geneva_group.add_command(_command)


def init_cli(app: Flask, geneva: object) -> None:
    """Add the ``flask geneva`` group to ``app.cli`` (called by ``Geneva.init_app``).

    Registered as the ``cli`` entry point of the ``flask_geneva.integrations``
    group, so that the extension, a layer below the CLI, never imports it.

    Args:
        app: The Flask app being initialised.
        geneva: The ``Geneva`` extension instance (unused: the commands find it
            in ``app.extensions`` when they run).
    """
    del geneva
    app.cli.add_command(geneva_group)
