"""Helpers for the exporter and fleet tests: a real Prometheus on loopback, a server that never answers,
and reading an exposition back with prometheus_client's parsers."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lpxtop.cli.assemble import build_engine
from lpxtop.export.exporter import Exporter
from lpxtop.export.settings import ExporterSettings
from tests.support.ports import free_port
from tests.support.sim import endpoint

REQUIRE_ENV = "LPXTOP_REQUIRE_PROMETHEUS"
START_TIMEOUT_S = 30.0


def binary(name: str) -> str:
    """The path of `prometheus` or `promtool`; skips the test without it, fails instead in CI."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        message = (f"{name} is not installed (Debian/Ubuntu: apt-get install prometheus); "
                   f"CI sets {REQUIRE_ENV}=1 so this fails there instead of skipping")
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


class Prometheus:
    """A real Prometheus on 127.0.0.1 with a generated config and its own storage directory."""

    def __init__(self, workdir: Path, config: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        (workdir / "prometheus.yml").write_text(config)
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Prometheus:
        argv = [binary("prometheus"), f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h", "--log.level=warn"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-1500:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready in {START_TIMEOUT_S} s: {self.log.read_text()[-1500:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def query(self, promql: str) -> list[dict]:
        doc = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5.0).json()
        assert doc["status"] == "success", doc
        return doc["data"]["result"]


class HangingServer:
    """Accepts connections and reads what comes, never answers: a server that hangs."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hanging-server", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self._conns.append(conn)

    def __enter__(self) -> HangingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        for conn in self._conns:
            conn.close()
        self.sock.close()


def series(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a Prometheus text exposition, by (name, labels), parsed by prometheus_client."""
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float | None:
    """The one sample called `name` whose labels include `labels` (None when there is none)."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls)]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} samples"
    return found[0] if found else None


@contextlib.contextmanager
def running(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@contextmanager
def exported(url: str, **endpoint_kw) -> Iterator[tuple[Exporter, object]]:
    config = endpoint(url, model=None, interval_s=0.25, metrics_interval_s=0.3, **endpoint_kw)
    engine = build_engine([config], window_s=300)
    exporter = Exporter(engine, ExporterSettings(listen_port=0, host_label="test-host"))
    exporter.start()
    engine.start()
    try:
        yield exporter, engine
    finally:
        exporter.stop()
        engine.stop()



def scrape(exporter: Exporter, accept: str | None = None) -> httpx.Response:
    headers = {"Accept": accept} if accept else {}
    response = httpx.get(f"{exporter.url}/metrics", headers=headers, timeout=5.0)
    assert response.status_code == 200
    return response
