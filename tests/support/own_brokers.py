"""Brokers of one test: a private ``redis-server`` and a private RabbitMQ node.

Tests of broker outages start their own server on free loopback ports and stop
it themselves; the machine's Redis and RabbitMQ are never stopped or touched.
Both classes start their processes through the test's
:class:`~tests.support.worker_harness.Processes`, so whatever is still running
at the end of the test is stopped with the other processes.

- :class:`OwnRedis`: stopped to refuse connections (``stop``), frozen with
  ``SIGSTOP`` so that connections hang (``freeze``/``thaw``), started again on
  the same port (``start``). No persistence: a restart loses every message.
- :class:`OwnRabbitMQ`: a node of its own (node name, ports, data directory,
  Erlang cookie and ``epmd``); ``restart_app`` stops and starts the broker
  application (every AMQP connection is closed, the node's VM stays up), which
  takes about two seconds where a restart of the whole node takes about ten.
"""

from __future__ import annotations

import secrets
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support.worker_harness import Processes
from tests.support.worker_harness import required_program
from tests.support.worker_harness import run
from tests.support.worker_harness import stop
from tests.support.worker_harness import wait_for

#: The RabbitMQ scripts, run as the current user (``/usr/sbin``'s wrappers
#: switch to the ``rabbitmq`` user and its home, hence the machine's cookie).
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


def free_port() -> int:
    """A TCP port free on the loopback interface at the time of the call."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OwnRedis:
    """A ``redis-server`` of this test on a free loopback port."""

    def __init__(self, processes: Processes) -> None:
        self.port = free_port()
        self.processes = processes
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.frozen = False

    def start(self) -> None:
        """Start the server and wait until it answers."""
        import redis

        self.process = self.processes.start(
            [
                required_program("redis-server"),
                *("--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no"),
                *("--dir", str(self.processes.directory)),
            ],
            name="redis-server",
        )
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        wait_for(lambda: _answers(client), timeout=20, interval=0.05)

    def stop(self) -> None:
        """Stop the server: connections are refused from now on."""
        if self.process is None:
            return
        self.thaw()
        stop(self.process, timeout=10)
        self.process = None

    def freeze(self) -> None:
        """SIGSTOP: the port still accepts connections, nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        if self.process is not None and self.frozen:
            self.process.send_signal(signal.SIGCONT)
        self.frozen = False


def _answers(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


class OwnRabbitMQ:
    """A RabbitMQ node of this test: its own node name, AMQP and distribution
    ports, ``epmd`` port, data and log directories and Erlang cookie, in
    ``processes.directory / "rabbitmq"``. Without plugins or configuration
    files; the ``guest`` user may connect over the loopback interface."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.directory = processes.directory / "rabbitmq"
        self.home = self.directory / "home"
        self.home.mkdir(parents=True)
        cookie = self.home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(20).upper())
        cookie.chmod(0o400)
        (self.directory / "enabled_plugins").write_text("[].\n")
        self.node = f"geneva{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self.environment = {
            "HOME": str(self.home),
            "ERL_EPMD_PORT": str(free_port()),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_PID_FILE": str(self.directory / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            # Missing files: no configuration of the machine's node applies.
            "RABBITMQ_CONFIG_FILE": str(self.directory / "none"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.directory / "none.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.directory / "none.env"),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, timeout: float = 90) -> float:
        """Start ``epmd`` and the node; wait until AMQP answers.

        Returns:
            The seconds the node took to answer.
        """
        required_program("epmd")
        server = RABBITMQ_BIN / "rabbitmq-server"
        if not server.exists():
            required_program("rabbitmq-server")  # skips (locally) or fails (CI)
        started = time.monotonic()
        self.processes.start(
            ["epmd", "-port", self.environment["ERL_EPMD_PORT"]],
            name="epmd",
            env=self.environment,
        )
        self.process = self.processes.start(
            [str(server)], name="rabbitmq-server", env=self.environment
        )
        wait_for(
            lambda: _amqp_answers(self.port),
            timeout=timeout,
            interval=0.25,
            running=[self.process],
        )
        return time.monotonic() - started

    def ctl(self, *arguments: str) -> None:
        """``rabbitmqctl -n <node> *arguments``; raise when it fails.

        Each call starts an Erlang VM of its own, which CI's loaded machine has
        been seen to take over a minute for: allowed 180 s.
        """
        result = run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.node, *arguments],
            timeout=180,
            env=self.environment,
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def restart_app(self) -> tuple[float, float]:
        """Stop the broker application (every AMQP connection is closed) and
        start it again.

        Returns:
            ``(seconds down, seconds until AMQP answered again)`` from the moment
            the stop was asked for: how long connections were refused, and the
            whole outage as a client sees it.
        """
        asked = time.monotonic()
        self.ctl("stop_app")
        stopped = time.monotonic()
        self.ctl("start_app")
        wait_for(lambda: _amqp_answers(self.port), timeout=120, interval=0.1)
        return stopped - asked, time.monotonic() - asked

    def stop(self) -> None:
        """Stop the node (SIGTERM to its script, which stops the VM)."""
        if self.process is None:
            return
        stop(self.process, timeout=30)
        self.process = None
        pid_file = self.directory / "pid"
        if pid_file.exists():  # the VM, should the script have been killed
            pid = int(pid_file.read_text().strip() or 0)
            if pid and _alive(pid):
                _kill(pid)


def _amqp_answers(port: int) -> bool:
    """True when an AMQP 0-9-1 protocol header on ``port`` gets a reply."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
            probe.sendall(b"AMQP\x00\x00\x09\x01")
            return bool(probe.recv(8))
    except OSError:
        return False


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _kill(pid: int) -> None:
    import os

    os.kill(pid, signal.SIGKILL)
