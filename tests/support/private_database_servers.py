"""Database servers of a test's own, to kill and restart (issue 41, SPEC §29).

The machine's PostgreSQL and MariaDB are shared by every test stream and must
never stop; a test that needs a database outage starts a server of its own on a
free port, in a temporary directory, and kills it with SIGKILL, as a crash or
an OOM kill would:

- :class:`PrivatePostgres`: ``initdb`` and ``postgres`` from
  ``/usr/lib/postgresql/<version>/bin`` (``initdb`` refuses root: as root the
  server runs as the ``postgres`` OS user), without ``fsync``: a killed
  server keeps every commit it acknowledged (the kernel holds them), a
  machine crash would not;
- :class:`PrivateMariaDB`: ``mariadb-install-db`` and ``mariadbd`` (as the
  ``mysql`` OS user when root), a socket in the directory, no binary log, each
  commit written to the kernel but flushed to the disk once a second.

Each :meth:`~PrivateServer.kill` sends SIGKILL to the server and every process
it started, and reaps them; :meth:`~PrivateServer.start` starts it again on the
same port and data (crash recovery included) and returns once it accepts
connections; :meth:`~PrivateServer.stop` kills it for good and removes its
directory. Nothing outlives the test process: the fixtures stop their server
(also when the test failed), and an ``atexit`` hook stops any server left
running. (``PR_SET_PDEATHSIG`` is no help: it fires when the *thread* that
started the server ends, and a test restarts its server from a thread.)

:class:`PrivatePostgres` can also run inside a network namespace of the
test's own (``namespace=``, :mod:`tests.support.network_namespaces`): it then
listens on the namespace's inner address only, so that cutting the namespace's
link cuts the test off from it (R-FLT-30..55).

:func:`required_server` skips a test (fails it under ``CI=true``) when the
programs are not installed.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest
import sqlalchemy as sa

if TYPE_CHECKING:
    from tests.support.network_namespaces import NetworkNamespace

__all__ = [
    "PrivateMariaDB",
    "PrivatePostgres",
    "PrivateServer",
    "required_server",
    "server_fixture",
]

#: Seconds a server gets to accept connections after it was started.
START_TIMEOUT = 60.0
#: Every server started and not yet stopped (stopped at exit).
_running: list[PrivateServer] = []


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _as_root() -> bool:
    return os.geteuid() == 0


def _descendants(pid: int) -> list[int]:
    """The pids descending from ``pid``: children, theirs, ... (from ``/proc``).

    A server started through ``ip netns exec`` and ``runuser`` is a grandchild
    of the process the test started.
    """
    parents: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue  # ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(Path(stat).parent.name))
    found: list[int] = []
    waiting = [pid]
    while waiting:
        children = parents.get(waiting.pop(), [])
        found += children
        waiting += children
    return found


class PrivateServer:
    """A database server of the test's own (see the module docstring).

    Args:
        namespace: Run the server inside this network namespace, listening on
            its inner address (:class:`PrivatePostgres` only); None: on
            127.0.0.1.

    Attributes:
        directory: Its temporary directory (data, socket, log).
        host: The address it listens on: 127.0.0.1, or the namespace's inner
            address.
        port: Its TCP port on ``host``.
        url: The SQLAlchemy URL of its database ``geneva``.
    """

    #: The OS user the server runs as when the tests run as root.
    os_user = ""

    def __init__(self, namespace: NetworkNamespace | None = None) -> None:
        root = "/dev/shm" if Path("/dev/shm").is_dir() else None  # noqa: S108
        self.directory = Path(tempfile.mkdtemp(prefix="geneva-db-", dir=root))
        self.namespace = namespace
        self.host = namespace.inner_address if namespace is not None else "127.0.0.1"
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.kills = 0
        if _as_root():
            entry = pwd.getpwnam(self.os_user)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)

    # -- what a dialect provides --------------------------------------------------

    def _initialize(self) -> None:
        raise NotImplementedError

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _admin_url(self) -> str:
        raise NotImplementedError

    def _create_database(self, connection: sa.Connection) -> None:
        raise NotImplementedError

    # -- life cycle ---------------------------------------------------------------

    def _run(self, command: list[str]) -> None:
        """Run a setup program as the server's OS user; fail with its output."""
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            user=self.os_user if _as_root() else None,
            cwd=self.directory,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{command[0]} failed ({result.returncode}):\n{result.stdout}\n"
                f"{result.stderr}"
            )

    def setup(self) -> PrivateServer:
        """Initialize the data directory, start the server, create ``geneva``."""
        _running.append(self)
        self._initialize()
        self.start()
        engine = sa.create_engine(self._admin_url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                self._create_database(connection)
        finally:
            engine.dispose()
        return self

    def start(self) -> None:
        """Start the server (after :meth:`kill`: on the same data) and wait
        until it accepts connections."""
        assert self.process is None or self.process.poll() is not None
        command = self._command()
        user = self.os_user if _as_root() else None
        if self.namespace is not None:
            # ip netns exec needs root: the server's user is taken after it.
            if user is not None:
                command = ["runuser", "-u", user, "--", *command]
                user = None
            command = self.namespace.command(*command)
        log = open(self.directory / "server.log", "ab")  # noqa: SIM115 - the child's
        try:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                user=user,
            )
        finally:
            log.close()
        self.wait_ready()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Return once a connection succeeds; fail when the server exits."""
        deadline = time.monotonic() + timeout
        engine = sa.create_engine(self._admin_url(), poolclass=sa.pool.NullPool)
        try:
            while True:
                try:
                    with engine.connect() as connection:
                        connection.execute(sa.text("SELECT 1"))
                    return
                except sa.exc.DBAPIError:
                    pass
                assert self.process is not None
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{type(self).__name__} did not start:\n{self.log()[-3000:]}"
                    )
                time.sleep(0.05)
        finally:
            engine.dispose()

    def kill(self) -> None:
        """SIGKILL the server and every process it started; reap them."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        self.kills += 1
        children = _descendants(process.pid)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.kill()
        process.wait()
        # Its children were re-parented when it died: wait until they are gone,
        # so that a restart finds no process attached to the old shared memory.
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children):
            if time.monotonic() > deadline:
                raise RuntimeError(f"server processes {children} outlived SIGKILL")
            time.sleep(0.02)

    def __enter__(self) -> PrivateServer:
        """Set up and start the server (:meth:`setup`); stopped if that fails."""
        try:
            return self.setup()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill the server for good and remove its directory (idempotent)."""
        self.kill()
        if self in _running:
            _running.remove(self)
        shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def running(self) -> bool:
        """Whether the server process is running."""
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        """What the server wrote to its log so far."""
        path = self.directory / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


class PrivatePostgres(PrivateServer):
    """A PostgreSQL server of the test's own (``initdb`` + ``postgres``)."""

    os_user = "postgres"

    @staticmethod
    def binaries() -> Path | None:
        """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb``."""
        found = sorted(
            Path(path).parent for path in glob.glob("/usr/lib/postgresql/*/bin/initdb")
        )
        return found[-1] if found else None

    def _bin(self, name: str) -> str:
        binaries = self.binaries()
        assert binaries is not None
        return str(binaries / name)

    def _initialize(self) -> None:
        self._run(
            [
                self._bin("initdb"),
                "-D",
                str(self.directory / "data"),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        if self.namespace is not None:
            # The test's side of the namespace's link connects from its address.
            with (self.directory / "data" / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.namespace.host_address}/32 trust\n")

    def _command(self) -> list[str]:
        settings = {
            "listen_addresses": self.host,
            "unix_socket_directories": str(self.directory),
            # A killed process loses what it had not written to the kernel:
            # commits keep waiting for the WAL write, not for the disk.
            "fsync": "off",
            "full_page_writes": "off",
            "max_connections": "60",
            "shared_buffers": "16MB",
        }
        command = [self._bin("postgres"), "-D", str(self.directory / "data")]
        command += ["-p", str(self.port)]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        return command

    def _admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/postgres"

    def _create_database(self, connection: sa.Connection) -> None:
        connection.execute(sa.text("CREATE DATABASE geneva"))
        self.url = f"postgresql+psycopg://postgres@{self.host}:{self.port}/geneva"


class PrivateMariaDB(PrivateServer):
    """A MariaDB server of the test's own (``mariadb-install-db`` + ``mariadbd``)."""

    os_user = "mysql"

    def __init__(self, namespace: NetworkNamespace | None = None) -> None:
        if namespace is not None:
            raise ValueError(
                "PrivateMariaDB does not run in a network namespace (its root "
                "user is granted to local addresses only): use PrivatePostgres"
            )
        super().__init__()

    @staticmethod
    def binaries() -> tuple[str, str] | None:
        """``(mariadb-install-db, mariadbd)`` when both are installed."""
        install = shutil.which("mariadb-install-db")
        server = shutil.which("mariadbd") or (
            "/usr/sbin/mariadbd" if Path("/usr/sbin/mariadbd").exists() else None
        )
        return (install, server) if install and server else None

    def _initialize(self) -> None:
        binaries = self.binaries()
        assert binaries is not None
        command = [
            binaries[0],
            "--no-defaults",
            f"--datadir={self.directory / 'data'}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        if _as_root():
            command.append(f"--user={self.os_user}")
        try:
            self._run(command)
        except RuntimeError as first:
            # Seen once in CI under load ("Installation of system tables
            # failed!"): keep what the bootstrap server logged, start again
            # from an empty data directory once.
            data = self.directory / "data"
            logged = "".join(
                path.read_text(errors="replace")[-4000:] for path in data.glob("*.err")
            )
            shutil.rmtree(data, ignore_errors=True)
            try:
                self._run(command)
            except RuntimeError as second:
                raise RuntimeError(
                    f"{second}\nthe first attempt: {first}\nits log: {logged}"
                ) from first

    def _command(self) -> list[str]:
        binaries = self.binaries()
        assert binaries is not None
        return [
            binaries[1],
            "--no-defaults",
            f"--datadir={self.directory / 'data'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.directory / 'mariadb.sock'}",
            f"--pid-file={self.directory / 'mariadb.pid'}",
            "--skip-log-bin",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=16M",
            "--innodb-log-file-size=16M",
            # Each commit written to the kernel (a killed process loses none),
            # flushed to the disk once a second.
            "--innodb-flush-log-at-trx-commit=2",
            "--max-connections=60",
        ]

    def _admin_url(self) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/mysql?ssl_disabled=true"

    def _create_database(self, connection: sa.Connection) -> None:
        connection.execute(
            sa.text("CREATE DATABASE geneva CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        )
        self.url = (
            f"mysql+pymysql://root@127.0.0.1:{self.port}/geneva?ssl_disabled=true"
        )


def required_server(kind: type[PrivateServer]) -> None:
    """Skip the test (locally) or fail it (``CI=true``) when ``kind``'s programs
    or its OS user (as root) are missing."""
    missing = kind.binaries() is None  # type: ignore[attr-defined]
    if not missing and _as_root():
        try:
            pwd.getpwnam(kind.os_user)
        except KeyError:
            missing = True
    if missing:
        what = f"{kind.__name__}'s programs (or OS user {kind.os_user!r}) missing"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{what} in CI")
        pytest.skip(what)


@contextlib.contextmanager
def server_fixture(
    kind: type[PrivateServer], namespace: NetworkNamespace | None = None
) -> Iterator[Any]:
    """A started :class:`PrivateServer` of ``kind`` (inside ``namespace`` when
    given), stopped and removed after the block however it ends (for a
    fixture: ``with server_fixture(...) as server: yield server``)."""
    required_server(kind)
    with kind(namespace) as server:
        yield server


@atexit.register
def _stop_every_server() -> None:
    for server in list(_running):
        server.stop()
