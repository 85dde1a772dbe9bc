"""The first figures reach the screen as soon as they are measured: the engine publishes an endpoint's first
probe at once, the collectors wait for it, and the app reads snapshots often until then."""

from __future__ import annotations

import time
from dataclasses import replace

from lpxtop.cli.assemble import build_engine
from lpxtop.engine.runner import Engine
from lpxtop.humanize import fmt_ms
from lpxtop.model.events import SampleEvent, ScrapeEvent, SnapshotEvent, SystemEvent
from lpxtop.model.snapshot import Snapshot
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from lpxtop.ui.app import create_app
from lpxtop.ui.widgets.endpoints_table import EndpointsTable
from tests.support.ports import free_port
from tests.support.sim import endpoint
from tests.support.snapshot_data import fixed_snapshot
from tests.support.ui import SwitchableSource, bump
from tests.support.waiting import wait_for


def _engine(url: str) -> Engine:
    """The real engine (scrapers, host, ports, GPU), one probe every 5 s: only the first one matters here."""
    return build_engine([endpoint(url, name="first", model=None, interval_s=5.0, max_tokens=4)])


def test_the_first_probe_is_published_at_once_and_the_collectors_wait_for_it():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1)) as sim:
        engine = _engine(sim.url)
        events: list = []
        engine.add_listener(events.append)
        assert engine.warming_up()
        engine.start()
        try:
            wait_for(lambda: {ScrapeEvent, SystemEvent} <= {type(e) for e in events}, timeout=10)
            assert not engine.warming_up()
        finally:
            engine.stop()
    kinds = [type(e) for e in events]
    first_sample = kinds.index(SampleEvent)
    # the snapshot with the first figures goes out right after the sample, not at the next publish tick
    assert kinds[first_sample + 1] is SnapshotEvent
    assert events[first_sample + 1].snapshot.endpoints[0].probes_sent == 1
    # the scrape, and the port and host scan, start after the first probe, not beside it
    assert kinds.index(ScrapeEvent) > first_sample and kinds.index(SystemEvent) > first_sample


def test_a_failed_first_probe_is_published_at_once_too():
    engine = _engine(f"http://127.0.0.1:{free_port()}/v1")
    events: list = []
    engine.add_listener(events.append)
    engine.start()
    try:
        wait_for(lambda: any(isinstance(e, SampleEvent) for e in events), timeout=10)
        wait_for(lambda: not engine.warming_up(), timeout=2)
    finally:
        engine.stop()
    view = engine.snapshot().endpoints[0]
    assert view.probes_sent >= 1 and view.last_error.startswith("refused: nothing listens on")


async def test_the_app_shows_the_first_figures_without_waiting_for_its_refresh():
    """A refresh of a minute: the first probe's TTFT still shows within a fraction of a second."""
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1)) as sim:
        engine = _engine(sim.url)
        app = create_app(engine, refresh_s=60.0, ssh=False, on_ready=engine.start)
        try:
            async with app.run_test(size=(120, 40)) as pilot:
                table = app.screen.query_one(EndpointsTable)
                deadline = time.monotonic() + 10
                shown = measured = None
                figures: set[str] = set()  # the TTFT as the table writes it, of every snapshot seen with one
                while time.monotonic() < deadline and shown is None:
                    await pilot.pause(0.02)
                    view = engine.snapshot().endpoints[0] if engine.snapshot().endpoints else None
                    if view is not None and view.ttft_ms is not None:
                        measured = measured or time.monotonic()
                        figures.add(fmt_ms(view.ttft_ms.p50))
                    if measured is not None and table.row_count:
                        cells = set(" ".join(str(c) for c in table.get_row_at(0)).split())
                        if figures & cells:
                            shown = time.monotonic()
                assert measured is not None and shown is not None
                assert shown - measured < 2.0  # a poll of 50 ms, not the minute's refresh
        finally:
            engine.stop()


class _PublishesRightAfterARead(SwitchableSource):
    """A source still warming up whose first figures are published just after the app's third read, before
    the app asks whether it is still warming up: the moment the engine's thread can pick."""

    def __init__(self) -> None:
        super().__init__(fixed_snapshot())
        self.warming = True
        self.capabilities = replace(self.capabilities, warming_up=lambda: self.warming)
        self.figures = bump(self._snapshot)

    def snapshot(self) -> Snapshot:
        read = super().snapshot()
        if self.reads == 3:
            self.publish(self.figures)
            self.warming = False
        return read


async def test_figures_published_between_a_read_and_the_warming_check_still_show():
    source = _PublishesRightAfterARead()
    app = create_app(source, refresh_s=60.0, ssh=False)
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 5
        while app.snapshot is not source.figures and time.monotonic() < deadline:
            await pilot.pause(0.02)
        assert app.snapshot is source.figures  # read at the next poll, not after the minute's refresh
        await pilot.pause(0.2)  # a tick already queued behind the one that stopped the polling may still read
        reads = source.reads
        await pilot.pause(0.3)
        assert source.reads == reads  # and then the fast polling has stopped
