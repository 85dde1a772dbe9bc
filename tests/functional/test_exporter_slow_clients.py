"""The exporter's listener against slow clients (a slow-loris), with real sockets: connections that send
their request a byte at a time hold no serving slot, are cut by a whole-request deadline however
regularly they trickle, and Prometheus' scrapes are answered all the while."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from lpxtop.cli.assemble import build_engine
from lpxtop.export import server
from lpxtop.export.exporter import Exporter
from lpxtop.export.settings import ExporterSettings

pytestmark = pytest.mark.timeout(60)
SLOW_CLIENTS = 40  # more than the serving slots (server.MAX_CONNECTIONS)


def _exporter() -> Exporter:
    return Exporter(build_engine([]), ExporterSettings(listen_port=0, probe_enabled=False))


def _slow(address: tuple[str, int], count: int) -> list[socket.socket]:
    clients = []
    for _ in range(count):
        client = socket.create_connection(address, timeout=5)
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # ... and the rest a byte at a time
        clients.append(client)
    return clients


def _answer(client: socket.socket, timeout: float) -> bytes:
    """What the server sent before closing (b"" when it closed without a word)."""
    client.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = client.recv(4096)
            if not chunk:
                return data
            data += chunk
    except TimeoutError:
        return data + b"<still open>"
    except OSError:
        return data


def test_scrapes_are_answered_while_slow_clients_trickle_and_each_is_cut_by_the_whole_request_deadline(monkeypatch):
    deadline_s = 2.0
    monkeypatch.setattr(server, "HEADER_DEADLINE_S", deadline_s)
    assert SLOW_CLIENTS > server.MAX_CONNECTIONS
    with _exporter() as exporter:
        slow = _slow(exporter.address, SLOW_CLIENTS)
        began = time.monotonic()
        statuses = []
        try:
            # each slow client sends a header byte every 0.4 s: never quiet long enough for a per-read timeout
            while time.monotonic() - began < deadline_s - 0.3:
                for client in slow:
                    try:
                        client.send(b"X")
                    except OSError:
                        pass
                response = httpx.get(f"{exporter.url}/metrics", timeout=5)
                statuses.append(response.status_code)
                assert b"lpxtop" in response.content
                time.sleep(0.4)
            answers = [_answer(client, timeout=deadline_s + 2.0) for client in slow]
            cut_after = time.monotonic() - began
        finally:
            for client in slow:
                client.close()
        after = httpx.get(f"{exporter.url}/metrics", timeout=5).status_code
    assert len(statuses) >= 3 and set(statuses) == {200}, statuses
    assert all(a.startswith(b"HTTP/1.0 408") for a in answers), {a[:40] for a in answers}
    assert cut_after < deadline_s + 2.5
    assert after == 200


def test_more_waiting_connections_than_the_cap_drop_the_longest_waiting_first(monkeypatch):
    monkeypatch.setattr(server, "MAX_WAITING", 10)
    with _exporter() as exporter:
        oldest = _slow(exporter.address, 5)
        time.sleep(0.3)
        newer = _slow(exporter.address, 10)
        try:
            assert httpx.get(f"{exporter.url}/metrics", timeout=5).status_code == 200
            dropped = [_answer(client, timeout=2.0) for client in oldest]
            kept = [_answer(client, timeout=0.3) for client in newer[-5:]]
        finally:
            for client in oldest + newer:
                client.close()
    assert all(not a.endswith(b"<still open>") for a in dropped), dropped
    assert all(a == b"<still open>" for a in kept), kept
