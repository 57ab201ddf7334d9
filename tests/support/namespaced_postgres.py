"""A PostgreSQL server of the test's own, inside a network namespace (issue 41).

Never the machine's server: ``initdb`` makes a fresh data directory (as the
``postgres`` user, since initdb refuses root) and the server listens only on
the namespace's address (:mod:`tests.support.network_namespaces`), on the usual
port, which inside its own namespace is free. Trust authentication for the
test's side, no fsync. Leaving :func:`postgres_in_namespace` stops the server
(fast shutdown, then SIGKILL of its process group) and deletes the directory,
also after a failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from tests.support.network_namespaces import NetworkNamespace

__all__ = ["postgres_binaries", "postgres_in_namespace"]

_PORT = 5432
_OWNER = "postgres"


def postgres_binaries() -> Path | None:
    """The directory of ``initdb`` and ``postgres``, or None without them."""
    found = shutil.which("initdb")
    if found is not None:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def _as_owner(*args: str) -> list[str]:
    return ["runuser", "-u", _OWNER, "--", *args]


def _wait_until_ready(
    url_parts: dict[str, object], server: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + 60
    while True:
        if server.poll() is not None:
            raise RuntimeError(
                f"the test's PostgreSQL server exited ({server.returncode}): "
                f"{log.read_text(errors='replace')[-2000:]}"
            )
        try:
            psycopg.connect(**url_parts, connect_timeout=2).close()  # type: ignore[arg-type]
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
        else:
            return


def _stop(server: subprocess.Popen[bytes], data: Path) -> None:
    pid_file = data / "postmaster.pid"
    with contextlib.suppress(OSError, ValueError, IndexError):
        postmaster = int(pid_file.read_text().split()[0])
        os.kill(postmaster, signal.SIGINT)  # fast shutdown
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=20)


@contextlib.contextmanager
def postgres_in_namespace(namespace: NetworkNamespace) -> Iterator[str]:
    """Run a fresh PostgreSQL server inside ``namespace``.

    Yields:
        Its SQLAlchemy URL (psycopg, database ``postgres``, user ``postgres``).

    Raises:
        RuntimeError: No PostgreSQL binaries, or the server did not start.
    """
    binaries = postgres_binaries()
    if binaries is None:
        raise RuntimeError("no initdb/postgres found")
    owner = pwd.getpwnam(_OWNER)
    data = Path(tempfile.mkdtemp(prefix="geneva-netns-pg-"))
    try:
        os.chown(data, owner.pw_uid, owner.pw_gid)
        subprocess.run(
            _as_owner(
                str(binaries / "initdb"), "-D", str(data), "-A", "trust",
                "-U", _OWNER, "-E", "UTF8", "--no-sync", "--no-instructions",
            ),
            check=True,
            capture_output=True,
        )  # fmt: skip
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {namespace.host_address}/32 trust\n")
        log = data / "server.log"
        with log.open("wb") as output:
            server = namespace.popen(
                _as_owner(
                    str(binaries / "postgres"), "-D", str(data),
                    "-p", str(_PORT), "-k", str(data),
                    "-c", f"listen_addresses={namespace.inner_address}",
                    "-c", "fsync=off", "-c", "synchronous_commit=off",
                    "-c", "full_page_writes=off", "-c", "max_connections=30",
                    "-c", "shared_buffers=16MB",
                ),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            _wait_until_ready(
                {"host": namespace.inner_address, "port": _PORT, "user": _OWNER},
                server,
                log,
            )
            yield (
                f"postgresql+psycopg://{_OWNER}@{namespace.inner_address}:{_PORT}"
                "/postgres"
            )
        finally:
            _stop(server, data)
    finally:
        shutil.rmtree(data, ignore_errors=True)
