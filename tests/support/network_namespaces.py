"""A network namespace of the test's own, joined to the test's by a veth pair (issue 41).

A network cut is what this gives a test: a server started inside the namespace
is reached at :attr:`NetworkNamespace.inner_address`, and :meth:`cut` drops
every packet between the two sides without any error, as a cut behind a router
does (:meth:`restore` brings the link back; TCP connections open across it
live on). Both sides get fixed neighbour entries, so that the cut is silent:
with address resolution left to ARP, connecting to a neighbour that stopped
answering fails with "no route to host" after a few seconds, which a cut across
a router never does.

Needs root (``ip netns add``): :func:`namespaces_unavailable` says why not,
for a skip. The addresses are a /30 of 10.231.0.0/16 that no interface of the
test's namespace uses; the namespace (and with it both ends of the pair) is
deleted on leaving :func:`network_namespace`, also after a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

__all__ = [
    "IP",
    "NetworkNamespace",
    "namespaces_unavailable",
    "network_namespace",
]

#: The ``ip`` command of iproute2.
IP = shutil.which("ip") or "/usr/sbin/ip"
_PREFIX = ipaddress.ip_network("10.231.0.0/16")


@dataclasses.dataclass(frozen=True)
class NetworkNamespace:
    """A namespace and the veth pair that joins it to the test's namespace.

    Attributes:
        name: The namespace's name (``ip netns list``).
        host_link: The pair's end in the test's namespace.
        inner_link: The pair's end inside the namespace.
        host_address: The test's side's address.
        inner_address: The address a server inside listens on.
    """

    name: str
    host_link: str
    inner_link: str
    host_address: str
    inner_address: str

    def command(self, *args: str) -> list[str]:
        """``args`` run inside the namespace (``ip netns exec``)."""
        return [IP, "netns", "exec", self.name, *args]

    def popen(self, args: Sequence[str], **options: Any) -> subprocess.Popen[bytes]:
        """Start ``args`` inside the namespace; ``options`` go to ``Popen``."""
        return subprocess.Popen(self.command(*args), **options)

    def cut(self) -> None:
        """Drop every packet between the two sides, silently (link down inside)."""
        _ip("-n", self.name, "link", "set", self.inner_link, "down")

    def restore(self) -> None:
        """Bring the link back; connections open across the cut resume."""
        _ip("-n", self.name, "link", "set", self.inner_link, "up")


def _ip(*args: str) -> str:
    done = subprocess.run([IP, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def namespaces_unavailable() -> str | None:
    """Why this process cannot make network namespaces, or None when it can."""
    if not os.path.exists(IP):
        return f"no ip command (iproute2) at {IP}"
    if os.geteuid() != 0:
        return "ip netns needs root (CI runs as root)"
    probe = f"genevaprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except RuntimeError as error:
        return f"ip netns is not permitted here: {error}"
    _ip("netns", "del", probe)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 of 10.231.0.0/16 that no address of this namespace falls in."""
    used = [
        ipaddress.ip_interface(f"{entry['local']}/{entry['prefixlen']}").network
        for link in json.loads(_ip("-j", "addr", "show"))
        for entry in link.get("addr_info", [])
        if entry.get("family") == "inet"
    ]
    subnets = list(_PREFIX.subnets(new_prefix=30))
    start = os.getpid() % len(subnets)
    for offset in range(len(subnets)):
        subnet = subnets[(start + offset) % len(subnets)]
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise RuntimeError("no free /30 in 10.231.0.0/16")


def _mac(*namespace_args: str, link: str) -> str:
    (shown,) = json.loads(_ip(*namespace_args, "-j", "link", "show", link))
    return str(shown["address"])


@contextlib.contextmanager
def network_namespace() -> Iterator[NetworkNamespace]:
    """Make a namespace joined by a veth pair; delete it on leaving.

    Yields:
        The namespace, its link up and both neighbour entries fixed.
    """
    tag = f"{os.getpid()}"
    subnet = _free_subnet()
    host_address, inner_address = (str(address) for address in subnet.hosts())
    namespace = NetworkNamespace(
        name=f"geneva{tag}",
        host_link=f"gvh{tag}",
        inner_link=f"gvn{tag}",
        host_address=host_address,
        inner_address=inner_address,
    )
    _ip("netns", "add", namespace.name)
    try:
        _ip(
            "link", "add", namespace.host_link, "type", "veth",
            "peer", "name", namespace.inner_link,
        )  # fmt: skip
        _ip("link", "set", namespace.inner_link, "netns", namespace.name)
        inside = ("-n", namespace.name)
        _ip("addr", "add", f"{host_address}/30", "dev", namespace.host_link)
        _ip(*inside, "addr", "add", f"{inner_address}/30", "dev", namespace.inner_link)
        _ip("link", "set", namespace.host_link, "up")
        _ip(*inside, "link", "set", namespace.inner_link, "up")
        _ip(*inside, "link", "set", "lo", "up")
        # Fixed neighbours: a cut stays silent (see the module's docstring).
        _ip(
            "neigh", "replace", inner_address,
            "lladdr", _mac(*inside, link=namespace.inner_link),
            "dev", namespace.host_link, "nud", "permanent",
        )  # fmt: skip
        _ip(
            *inside, "neigh", "replace", host_address,
            "lladdr", _mac(link=namespace.host_link),
            "dev", namespace.inner_link, "nud", "permanent",
        )  # fmt: skip
        yield namespace
    finally:
        # Deleting the namespace deletes its end of the pair, and so the other.
        _ip("netns", "del", namespace.name)
        with contextlib.suppress(RuntimeError):
            _ip("link", "del", namespace.host_link)
