"""The browser suite's server thread closes every file it serves, even when the
browser drops the connection mid-request (CI failed at stop 27 on a leaked
Flask-Admin asset's ResourceWarning)."""

from __future__ import annotations

import gc
import http.client
import re
import socket
import struct
import sys
import time
from typing import Any

import pytest

pytestmark = pytest.mark.browser


def _script_paths(port: int) -> list[str]:
    connection = http.client.HTTPConnection("127.0.0.1", port)
    connection.request("GET", "/geneva/")
    page = connection.getresponse().read().decode()
    connection.close()
    return re.findall(r'<script[^>]+src="(/[^"?]+)', page)


def _request_then_reset(port: int, path: str) -> None:
    """Send a GET and close with a TCP reset before reading the answer."""
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.005)
    client.close()


def test_dropped_asset_requests_leave_no_open_file(live_url, monkeypatch):
    """Twenty asset requests reset by the client leave no file for the garbage
    collector to warn about (werkzeug skips close() on that path)."""
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    port = int(live_url.rsplit(":", 1)[1])
    scripts = _script_paths(port)
    assert scripts, "the admin page names no script to request"
    for attempt in range(20):
        _request_then_reset(port, scripts[attempt % len(scripts)])
    time.sleep(1.0)
    gc.collect()
    leaked = [str(item.exc_value or item.err_msg) for item in unraisable]
    assert leaked == [], leaked
