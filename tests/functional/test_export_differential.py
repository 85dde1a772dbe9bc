"""Every OpenMetrics and CSV export held to its reference parser, on a recording written by lpxtop's own
writer with hostile text and numbers in every field an export carries:

- `lpxtop export --format openmetrics`: prometheus_client's OpenMetrics parser reads every sample back,
  with the labels and values the JSONL export holds (it refused the interleaved series of a family:
  "invalid metric grouping"); `promtool tsdb create-blocks-from openmetrics` (Prometheus' own OpenMetrics
  reader) accepts the file, and `promtool check metrics` lints it (given Prometheus' text format: the same
  lines with millisecond timestamps and no `# EOF`, the only form that command reads);
- `lpxtop export --format csv`: Python's `csv` reads every cell back as JSONL says it, and no cell opens
  as a formula in a spreadsheet (OWASP: a leading `'`), while plain numbers stay numbers;
- the exporter's own `/metrics`, both encodings, with hostile model ids: prometheus_client's parsers and
  `promtool check metrics` (tests/functional/test_exporter.py holds its figures).

promtool comes with Debian's `prometheus` package; the checks that need it skip without it on a developer's
machine and fail instead where LPXTOP_REQUIRE_PROMETHEUS=1 (CI)."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from lpxtop.model.alerts import Alert
from lpxtop.model.events import AlertsEvent, GpuEvent, SampleEvent, ScrapeEvent
from lpxtop.model.gpu import GpuDevice, GpuSnapshot
from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.record.codec import Encoder
from lpxtop.record.export import FORMULA_START, export
from lpxtop.record.reading import Recording
from lpxtop.record.store import StoreWriter
from tests.support.prometheus import binary

T0 = 1_790_000_000.0
# Names a server or a user could give: quotes, backslashes, newlines, escapes, formula starters, unicode.
HOSTILE = ['plain', 'say "hi"', 'back\\slash', 'new\nline', 'esc\x1b]0;title\x07', '=cmd|\' /C calc\'!A0',
           '+1+1', '-2+3', '@SUM(A1)', '\ttab', 'ünï ✓ 模型', '-1.5', '{"json": [1]}']
NUMBERS = [0.0, 1.5, -0.0, 1e-320, 1e308, float("inf"), float("nan"), 10**30, -3, 2**63]


def _write(path: Path) -> None:
    encoder = Encoder()
    writer = StoreWriter(path, {"window_s": 300.0})
    events = []
    seq = 0

    def add(t: float, record) -> None:
        nonlocal seq
        seq += 1
        events.append((seq, t, encoder.type_name(type(record)), encoder.encode(record)))

    for step in range(6):  # the series of each family interleave in time, as live
        for i, name in enumerate(HOSTILE):
            t = T0 + step + i / 100
            number = NUMBERS[(step + i) % len(NUMBERS)]
            ok = (step + i) % 4 != 0
            sample = Sample(endpoint=name, wall_time=t, start_ns=seq, ok=ok,
                            error_kind=None if ok else "http_5xx", error_message=None if ok else HOSTILE[-1 - i],
                            model=HOSTILE[(i + 3) % len(HOSTILE)], ttft_ms=float(number) if ok else None,
                            e2e_ms=40.0 + step, token_event_ms=(10.0, 20.0 + i, 30.0),
                            tokens_per_event=(1, 1, 1), output_tokens=number if isinstance(number, int) else 3)
            add(t, SampleEvent(name, sample))
            add(t, ScrapeEvent(name, t, ServerMetrics(kind="vllm", requests_running=float(i),
                                                      requests_waiting=number if isinstance(number, float) else None,
                                                      kv_cache_usage=0.5)))
        gpus = tuple(GpuDevice(index=k, name=HOSTILE[k], uuid=f"GPU-{k}\"x", util_pct=50.0 + step,
                               mem_used_bytes=[2**30, 2**70, None][k % 3], mem_total_bytes=80 * 2**30)
                     for k in range(3))
        add(T0 + step + 0.5, GpuEvent(T0 + step + 0.5, GpuSnapshot(status="ok", devices=gpus)))
        alerts = tuple(Alert("warning", f"kind{k}", HOSTILE[k], subject=HOSTILE[-k]) for k in range(step % 3 + 1))
        add(T0 + step + 0.6, AlertsEvent(T0 + step + 0.6, alerts))
    layouts, encoder.new_layouts = encoder.new_layouts, []
    writer.write(layouts=layouts, events=events,
                 marks=[(T0 + 1, "bookmark", {"note": name}) for name in HOSTILE])
    writer.close()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("differential") / "hostile.lpxrec"
    _write(path)
    return path


def _export(path: Path, **kw) -> str:
    out = io.StringIO()
    with Recording(path) as recording:
        export(recording, out, **kw)
        assert recording.damage_summary() is None
    return out.getvalue()


def _jsonl(path: Path, what: str) -> list[dict]:
    return [json.loads(line) for line in _export(path, what=[what]).splitlines()]


def _finite(value) -> bool:
    try:
        return value is not None and not isinstance(value, bool) and math.isfinite(float(value))
    except OverflowError:
        return False


def test_openmetrics_reads_back_in_prometheus_clients_parser_as_jsonl_says(hostile):
    text = _export(hostile, fmt="openmetrics")
    parsed: dict[tuple[str, tuple], list[tuple[float, float]]] = {}
    for family in openmetrics_families(text):  # raised "invalid metric grouping" on interleaved series
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            parsed.setdefault(key, []).append((sample.timestamp, sample.value))
    # TTFT, by endpoint, against the JSONL export of the same file
    expected: dict[str, list[tuple[float, float]]] = {}
    for row in _jsonl(hostile, "probes"):
        if _finite(row["ttft_ms"]):
            expected.setdefault(row["endpoint"], []).append((round(row["time"], 3), row["ttft_ms"] / 1000.0))
    got = {dict(labels)["endpoint"]: points for (name, labels), points in parsed.items()
           if name == "lpxtop_probe_ttft_seconds"}
    assert set(got) == {" ".join(n.replace("\x1b]0;title\x07", "").split("\n")) for n in expected}
    for name, points in expected.items():
        shown = " ".join(name.replace("\x1b]0;title\x07", "").split("\n"))
        assert [(float(t), v) for t, v in got[shown]] == [pytest.approx(p) for p in points]
    # every value finite, every series in time order
    for points in parsed.values():
        assert all(math.isfinite(v) for _, v in points)
        assert [t for t, _ in points] == sorted(t for t, _ in points)
    assert any(name == "lpxtop_gpu_memory_used_bytes" for name, _ in parsed)


def test_openmetrics_passes_promtool(hostile, tmp_path):
    promtool = binary("promtool")
    text = _export(hostile, fmt="openmetrics")
    source = tmp_path / "export.om"
    source.write_text(text)
    blocks = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source),
                             str(tmp_path / "tsdb")], capture_output=True, text=True, timeout=60)
    assert blocks.returncode == 0, blocks.stderr + blocks.stdout
    lines = []
    for line in text.splitlines():
        if line == "# EOF":
            continue
        if not line.startswith("#"):
            head, value, stamp = line.rsplit(" ", 2)
            line = f"{head} {value} {round(float(stamp) * 1000)}"
        lines.append(line)
    lint = subprocess.run([promtool, "check", "metrics"], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, timeout=60)
    assert lint.returncode == 0, lint.stderr + lint.stdout


@pytest.mark.parametrize("what", ["probes", "server", "gpu", "alerts", "marks"])
def test_csv_reads_back_in_pythons_csv_as_jsonl_says_and_opens_no_formula(hostile, what):
    rows = list(csv.DictReader(io.StringIO(_export(hostile, fmt="csv", what=[what]))))
    reference = _jsonl(hostile, what)
    assert len(rows) == len(reference) > 0
    for row, ref in zip(rows, reference):
        for key, cell in row.items():
            assert not (cell.startswith(FORMULA_START) and not _is_number(cell)), (key, cell)
            value = ref.get(key)
            if isinstance(value, str):
                assert cell == value or cell == "'" + value, (key, cell, value)
            elif isinstance(value, bool):
                assert cell == str(value)
            elif isinstance(value, (int, float)):
                assert cell == ("" if value is None else repr(value) if isinstance(value, float) else str(value))
                if cell:
                    float(cell)  # a number stays a number (-1.5, -3, 1e-320)
            elif value is None:
                assert cell == ""


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_the_exporters_metrics_with_hostile_names_pass_both_parsers_and_promtool():
    """A real exporter beside a real engine probing simulated servers whose model ids, and the endpoints'
    names, hold quotes, backslashes, newlines and escapes."""
    import contextlib

    import httpx

    from lpxtop.cli.assemble import build_engine
    from lpxtop.config import normalize_url
    from lpxtop.export.exporter import Exporter
    from lpxtop.export.settings import ExporterSettings
    from lpxtop.model.endpoint import EndpointConfig
    from lpxtop.sim.config import SimConfig
    from lpxtop.sim.thread import start_sim_in_thread
    from tests.support.waiting import wait_for

    names = HOSTILE[1:5]
    with contextlib.ExitStack() as stack:
        sims = [stack.enter_context(start_sim_in_thread(SimConfig(model=HOSTILE[-1 - i], ttft_ms=5, itl_ms=1)))
                for i in range(len(names))]
        endpoints = [EndpointConfig(name=name, url=normalize_url(sim.url), interval_s=0.25, max_tokens=4,
                                    metrics_interval_s=0.3) for name, sim in zip(names, sims)]
        engine = build_engine(endpoints, window_s=300)
        exporter = stack.enter_context(Exporter(engine, ExporterSettings(listen_port=0, host_label='host "x"\\')))
        stack.enter_context(engine)
        wait_for(lambda: len(views := engine.snapshot().endpoints) == len(names)
                 and all(v.probes_ok >= 2 and v.model for v in views), timeout=20)
        plain = httpx.get(f"{exporter.url}/metrics", timeout=5).text
        open_metrics = httpx.get(f"{exporter.url}/metrics", headers={"Accept": "application/openmetrics-text"},
                                 timeout=5).text
    plain_names = {s.labels.get("endpoint") for f in text_families(plain) for s in f.samples}
    open_names = {s.labels.get("endpoint") for f in openmetrics_families(open_metrics) for s in f.samples}
    assert set(names) <= plain_names and set(names) <= open_names
    assert open_metrics.endswith("# EOF\n")
    promtool = binary("promtool")
    lint = subprocess.run([promtool, "check", "metrics"], input=plain, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stderr + lint.stdout
