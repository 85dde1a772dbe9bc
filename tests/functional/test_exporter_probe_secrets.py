"""`/probe` and lpxtop's secret registry, over real sockets: whoever reaches `/probe` sends target URLs
with credential-looking query values; none is registered (the registry does not grow, whatever the
number of calls: each one registered and recompiled a pattern of all, 3 → 30 ms a call and RSS 33 → 105
MB over 800) and none is masked in the rest of lpxtop's output, yet what the exporter logs of that
request masks them."""

from __future__ import annotations

import logging

import httpx
import pytest

from lpxtop import textsafe
from lpxtop.cli.assemble import build_engine
from lpxtop.export.exporter import Exporter
from lpxtop.export.settings import ExporterSettings
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(90)
CALLS = 120


def test_probe_targets_from_strangers_register_nothing_and_their_keys_stay_out_of_the_log(caplog):
    closed = free_port()  # nothing listens: each probe fails at once with "refused"
    registered = len(textsafe._secrets)
    caplog.set_level(logging.DEBUG, logger="lpxtop.export")
    with Exporter(build_engine([]), ExporterSettings(listen_port=0)) as exporter, httpx.Client(timeout=10) as client:
        for i in range(CALLS):
            response = client.get(f"{exporter.url}/probe", params={
                "target": f"http://127.0.0.1:{closed}/v1?api_key=stranger-{i:04d}-sk-live&x=1", "model": "m"})
            assert response.status_code == 200 and "lpxtop_probe_success 0.0" in response.text
    assert len(textsafe._secrets) == registered, "a stranger's value was registered"
    # nobody outside chooses what lpxtop masks everywhere
    assert textsafe.scrub("model stranger-0007-sk-live") == "model stranger-0007-sk-live"
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "lpxtop.export")
    assert "/probe" in logged and "stranger-" not in logged
