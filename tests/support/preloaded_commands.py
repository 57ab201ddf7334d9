"""Run a ``flask`` command in a process of its own, without paying its imports again.

Tests that drive a host app through ``flask ...`` (``flask db upgrade``,
``flask geneva install``) want what a host application gets: a process of its own,
a working directory, an environment, an exit status, the command's output. A new
interpreter per command costs about 1.3 s of CPU, nearly all of it importing Flask,
SQLAlchemy, Alembic and flask_geneva, and the install tests run some 50 commands
per pass.

:func:`run_flask` forks each command from a *fork server* (the standard library's
``multiprocessing`` forkserver context) that imported those libraries once: the
command's process is a fresh child of a clean interpreter (not of pytest), gets its
own working directory, environment and standard streams, runs ``flask.cli.main``
as ``python -m flask`` would, and exits with the command's status. The modules an
app reads its environment from at import (the test apps) are never preloaded, so
each command imports them anew, under its own environment.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PRELOADED_MODULES", "run_flask"]

#: Imported once by the fork server; none of them reads the environment at import
#: in a way a command could change.
PRELOADED_MODULES = (
    "flask",
    "flask.cli",
    "flask_sqlalchemy",
    "flask_migrate",
    "alembic.command",
    "alembic.autogenerate",
    "alembic.runtime.migration",
    "sqlalchemy",
    "flask_geneva",
    "flask_geneva.cli",
)

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(list(PRELOADED_MODULES))


def _flask_main(args: Sequence[str], cwd: str, env: dict[str, str], out: str) -> None:
    """The command's process: ``python -m flask ARGS`` in ``cwd`` under ``env``.

    Standard output and standard error go to ``out + ".stdout"`` and
    ``out + ".stderr"`` (file descriptors 1 and 2, so that what C code or a
    logging handler writes is caught too). Exits with the command's status.
    """
    import warnings

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # ``python -m`` puts the working directory first on the path.
    sys.path.insert(0, cwd)
    for extra in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
        if extra and extra not in sys.path:
            sys.path.insert(1, extra)
    if env.get("PYTHONWARNINGS") == "ignore":
        warnings.simplefilter("ignore")
    for fd, suffix in ((1, ".stdout"), (2, ".stderr")):
        target = os.open(out + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["flask", *args]
    status: int | str | None = 0
    try:
        from flask.cli import main

        main()
    except SystemExit as exit_:
        status = exit_.code
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if isinstance(status, str):
        sys.stderr.write(status + "\n")
        sys.stderr.flush()
        status = 1
    os._exit(status or 0)


def run_flask(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m flask ARGS`` in ``cwd`` with exactly ``env``; wait for it.

    Args:
        args: the command line after ``flask`` (``["--app", "m", "db", "upgrade"]``).
        cwd: the command's working directory.
        env: the command's whole environment (not merged with this process's).
        timeout: seconds to wait before killing the command.

    Returns:
        A :class:`subprocess.CompletedProcess` with the exit status and the
        decoded output, as ``subprocess.run(..., capture_output=True, text=True)``
        would give.

    Raises:
        subprocess.TimeoutExpired: the command ran longer than ``timeout``; it
            was killed.
    """
    command = [sys.executable, "-m", "flask", *args]
    with tempfile.TemporaryDirectory(prefix="flask-command-") as scratch:
        out = os.path.join(scratch, "output")
        process = _CONTEXT.Process(
            target=_flask_main, args=(list(args), str(cwd), dict(env), out)
        )
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(command, timeout)
        stdout = Path(out + ".stdout").read_text(errors="replace")
        stderr = Path(out + ".stderr").read_text(errors="replace")
    return subprocess.CompletedProcess(command, process.exitcode or 0, stdout, stderr)
