"""A real Celery worker process for the benchmarks, and the CPU it and the servers use.

``bench/end_to_end.py``, ``bench/memory.py`` and ``bench/recovery.py`` start
``celery worker`` (and ``beat``) as child processes of the benchmark, empty the
``celery`` queue before a run and read CPU and memory from Linux's ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: Options every benchmark worker gets: no gossip, mingle or broker heartbeat
#: traffic beside the steps being measured.
QUIET_WORKER_OPTIONS = ("--without-gossip", "--without-mingle", "--without-heartbeat")


def purge_celery_queue(celery: Any) -> None:
    """Empty the broker's ``celery`` queue (a queue not declared yet is fine)."""
    with celery.connection_for_write() as connection:  # noqa: SIM117 - see below
        # Two statements: the errors to suppress come from the connection.
        with contextlib.suppress(*connection.channel_errors):
            connection.default_channel.queue_purge("celery")


def start_celery(
    app_path: str,
    arguments: list[str],
    log_path: Path,
    environment: Mapping[str, str],
    *,
    own_process_group: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``python -m celery -A APP_PATH ARGUMENTS`` from the repository root.

    ``environment`` is added to this process's environment (with the repository
    on ``PYTHONPATH``); stdout and stderr go to ``log_path`` (appended).
    ``own_process_group`` starts it in a new session, so that ``kill -9`` of the
    group takes its children too.
    """
    log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
    try:
        return subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            [sys.executable, "-m", "celery", "-A", app_path, *arguments],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **environment},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=own_process_group,
        )
    finally:
        log.close()  # the child has its own descriptor


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM (Celery's warm shutdown), then SIGKILL after ``timeout`` seconds."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit(f"no VmRSS for process {pid}")


def process_tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (Linux /proc).

    Returns 0.0 where /proc is not available. Used to print the worker's CPU cost
    per step, which stays meaningful on a busy machine where throughput does not.
    """
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        pending.extend(int(child) for child in children.split())
    return total


#: Local server processes whose CPU the benchmark also reports (Linux /proc).
SERVER_COMMANDS = frozenset({"postgres", "mariadbd", "mysqld", "redis-server"})


def server_cpu_seconds() -> float:
    """User + system CPU seconds of the local database and broker processes.

    Sums every process whose command is in :data:`SERVER_COMMANDS`; 0.0 where
    /proc is not available. Both sides' steps also cost server CPU, which the
    throughput on a shared machine reflects.
    """
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        if name in SERVER_COMMANDS:
            fields = stat.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total
