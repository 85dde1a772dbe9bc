"""The chain on screen, in the real Textual app driven by its pilot: the Gap column exact from the joined
probes, the detail screen's Chain tab (percentiles, reasons, a bar per recent probe), added when a
receiver's chain arrives; the load steps' TTFT split."""

from __future__ import annotations

from dataclasses import replace

from rich.style import Style

from lpxtop.engine.traces.join import TraceJoin
from lpxtop.model.chain import SpanSegments
from lpxtop.model.snapshot import Snapshot
from lpxtop.ui.palette import Palette
from lpxtop.ui.widgets.chain_panel import ChainPanel, render_chain
from lpxtop.ui.widgets.endpoints_table import EndpointsTable
from lpxtop.ui.widgets.load_steps import columns_for, render_steps
from tests.support.load_snapshot_data import load_state
from tests.support.snapshot_data import NOW, fixed_snapshot
from tests.support.ui import bump, make_app, text_of

PALETTE = Palette(ok=Style(), warning=Style(), critical=Style(), muted=Style(), accent=Style(),
                  chart=((1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 4, 4), (5, 5, 5)))


def chained(snapshot: Snapshot, name: str = "vllm-llama", probes: int = 8) -> Snapshot:
    """`snapshot` with `name`'s chain from a real TraceJoin: `probes` probes joined (queue growing with i),
    one without its span."""
    clock = [0.0]
    join = TraceJoin(clock=lambda: clock[0], wall=lambda: NOW, wait_s=5.0)
    for i in range(probes):
        trace = f"{i + 1:032x}"
        sent = int((NOW - 60 + i) * 1e9)
        join.note_request(trace, endpoint=name, sent_wall_ns=sent, client_ttft_ms=30.0 + 4 * i, same_host=True)
        join.add_segments([SpanSegments(trace_id=trace, server="vllm", source="vllm#x", start_wall_ns=sent + 1_000_000,
                                        queue_ms=2.0 * i, prefill_ms=20.0, decode_ms=150.0,
                                        server_ttft_ms=25.0 + 4.0 * i)])
    join.note_request(f"{99:032x}", endpoint=name, sent_wall_ns=int((NOW - 5) * 1e9), client_ttft_ms=30.0)
    clock[0] += 10.0  # past the wait: counted as no_span
    views = tuple(replace(v, chain=join.snapshot(v.name, now=NOW)) if v.name == name else v for v in snapshot.endpoints)
    return replace(snapshot, endpoints=views)


def test_the_chain_text_says_what_joined_what_did_not_and_draws_each_probes_ttft():
    view = chained(fixed_snapshot()).endpoints[0]
    text = render_chain(view, NOW, PALETTE, 100).plain
    assert "8 probes joined · 1 unjoined" in text and "unjoined: no span 1" in text
    for label in ("to server", "queue", "prefill", "server TTFT", "outside", "decode"):
        assert f"\n  {label}" in text
    bars = [line for line in text.splitlines() if line.rstrip().endswith(" ms") and "ago" in line]
    assert len(bars) == 8
    assert bars[0].rstrip().endswith("58 ms")  # newest first: the slowest (30 + 4 × 7)
    assert bars[0].count("▒") > bars[-1].count("▒")  # its queue (14 ms) is drawn, the first probe's (0) is not
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "--traces-listen" in render_chain(replace(view, chain=None), NOW, PALETTE).plain


async def test_gap_is_exact_from_the_spans_and_the_chain_tab_shows_them():
    snapshot = chained(fixed_snapshot())
    _, app = make_app(snapshot)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(EndpointsTable)
        view = snapshot.endpoints[0]
        assert view.ttft_gap.method == "joined_spans"
        # each probe's outside is 5 ms (client 30 + 4i − server 25 + 4i): their mean, exact, with no "~"
        assert table.get_cell(view.name, "gap").strip() == "+5.0"
        await pilot.press(*(["down"] * table.row_names.index(view.name)), "enter")
        await pilot.pause()
        assert "exact: 8 probes' own server spans" in text_of(app.screen.query_one("#detail-summary"))
        tabs = app.screen.query_one("#detail-tabs")
        await pilot.press("right", "right")
        await pilot.pause()
        assert tabs.active == "tab-chain"
        panel = app.screen.query_one(ChainPanel)
        assert "8 probes joined" in text_of(panel)


async def test_the_chain_tab_comes_when_the_receiver_does_and_not_before():
    plain = fixed_snapshot()
    source, app = make_app(plain)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(EndpointsTable)
        await pilot.press(*(["down"] * table.row_names.index("vllm-llama")), "enter")
        await pilot.pause()
        assert not app.screen.query(ChainPanel)  # no receiver: no tab
        source.publish(bump(chained(plain)))
        app.poll()
        await pilot.pause()
        await pilot.pause()
        assert app.screen.query("#tab-chain")


def test_load_steps_show_the_ttft_split_only_with_a_receiver():
    from lpxtop.model.chain import ChainSummary, StepChain, TtftSplit

    state, _ = load_state()
    assert "p95 q/p/out" not in columns_for(200)
    split = TtftSplit(95, 180.0, 120.0, 40.0, 2.0, 18.0, 3)
    steps = tuple(replace(s, chain=StepChain(ChainSummary(probes_joined=10), (split,))) for s in state.steps)
    table = render_steps(replace(state, steps=steps), 200, PALETTE)
    headers = [c.header for c in table.columns]
    assert "p95 q/p/out" in headers and "p50 q/p/out" in headers
    cells = list(table.columns[headers.index("p95 q/p/out")].cells)
    assert cells[0] == "120/40/18" and list(table.columns[headers.index("p50 q/p/out")].cells)[0] == "--"
