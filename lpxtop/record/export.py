"""A recording as plain data: JSON lines, CSV, or OpenMetrics text for a Prometheus backfill.

JSONL is the complete form: a probe line carries every field of the recorded sample (so fields other
developers add appear without a change here) next to the stable keys `type`, `endpoint`, `time` (Unix
seconds, when the probe was sent), `ok`, `error` (the kind, or null), `ttft_ms`, `e2e_ms`, `itl_ms`
(list) and `output_tokens`; it is written by lpxtop/jsonout.py (a non-finite number is null), so every
line is RFC 8259 JSON.

CSV has one kind of line per file (lists joined by spaces, nested values as JSON). Text that a
spreadsheet would run as a formula — a cell starting with `=`, `+`, `-`, `@`, tab or carriage return,
as a model id or a server's error message may — is written with a leading `'` (OWASP's advice for CSV
injection), which spreadsheets show as text and do not run; a cell that is a plain number (`-1.5`,
`+3`, `-2e-05`) is left as it is, so numbers stay numbers whichever way they reached the row. Python's
`csv` reads every cell back as written, the `'` included.

OpenMetrics holds gauges with their recorded timestamps, each family contiguous, each series of a
family contiguous and in time order (OpenMetrics and Prometheus' own parser require both: "invalid
metric grouping" otherwise), ending with `# EOF`, as `promtool tsdb create-blocks-from openmetrics`
requires. Values no float holds and times outside 1970–9999 are left out. The lines are spooled through
a temporary SQLite file and read back by family and series, so a long recording is not held in memory.
"""

from __future__ import annotations

import csv
import heapq
import math
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import fields, is_dataclass
from typing import IO, Any

from lpxtop.jsonout import dumps, json_safe
from lpxtop.model.agent import AgentStepEvent
from lpxtop.model.chain import ChainEvent
from lpxtop.model.events import AlertsEvent, ControlEvent, GpuEvent, SampleEvent, ScrapeEvent, SystemEvent
from lpxtop.record.reading import Event, Recording
from lpxtop.record.records import Mark
from lpxtop.record.store import is_time
from lpxtop.textsafe import printable

FORMATS = ("jsonl", "csv", "openmetrics")
LOAD_MARKS = ("load_step", "load")  # lpxtop load's marks (lpxtop/load/recording.py)
WHAT = ("probes", "agent", "chain", "server", "gpu", "host", "alerts", "load", "marks")
_STREAM_TYPES: dict[str, tuple[type, ...]] = {
    "probes": (SampleEvent,),
    "agent": (AgentStepEvent,),
    "chain": (ChainEvent,),
    "server": (ScrapeEvent,),
    "gpu": (GpuEvent,),
    "host": (SystemEvent,),
    "alerts": (AlertsEvent,),
    "marks": (ControlEvent,),
    "load": (),
}


def export(recording: Recording, out: IO[str], *, fmt: str = "jsonl", what: Sequence[str] | None = None,
           t_from: float | None = None, t_to: float | None = None) -> dict[str, int]:
    """Write the recording's `what` between `t_from` and `t_to` to `out`; returns lines per type."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    if what is None:
        what = ["probes"] if fmt == "csv" else list(WHAT)
    unknown = [w for w in what if w not in WHAT]
    if unknown:
        raise ValueError(f"--what: unknown {', '.join(map(repr, unknown))} (choose from {', '.join(WHAT)})")
    if fmt == "csv" and len(what) != 1:
        raise ValueError("--format csv writes one kind of line: give one --what (probes, chain, server, gpu, host, "
                         "alerts, load or marks), or use jsonl")
    rows = _rows(recording, what, t_from, t_to)
    if fmt == "jsonl":
        return _write_jsonl(rows, out)
    if fmt == "csv":
        return _write_csv(rows, out)
    return _write_openmetrics(rows, out)


# ---- rows: one dict per line, in time order ----

def _rows(recording: Recording, what: Sequence[str], t_from: float | None, t_to: float | None) -> Iterator[dict]:
    types = tuple(t for w in what for t in _STREAM_TYPES[w])
    streams: list[Iterable[tuple[float, int, dict]]] = []
    if types:
        streams.append(_stream_rows(recording.events(t_from=t_from, t_to=t_to, types=types), what))
    marks = [m for m in recording.marks()
             if (t_from is None or m.t >= t_from) and (t_to is None or m.t <= t_to)
             and (("load" in what and m.kind in LOAD_MARKS) or ("marks" in what and m.kind not in LOAD_MARKS))]
    if marks:
        streams.append((m.t, i, _mark_row(m)) for i, m in enumerate(marks))
    for _, _, row in heapq.merge(*streams, key=lambda x: (x[0], x[1])):
        yield row


def _stream_rows(events: Iterable[Event], what: Sequence[str]) -> Iterator[tuple[float, int, dict]]:
    active: dict[tuple[str, str, str], Any] = {}
    for event in events:
        record = event.record
        kind = type(record)
        rows: list[dict] = []
        if kind is SampleEvent:
            rows = [probe_row(record, event.t)]
        elif kind is AgentStepEvent:
            rows = [agent_step_row(record, event.t)]
        elif kind is ChainEvent:
            rows = [chain_row(record)]
        elif kind is ScrapeEvent:
            rows = [{"type": "server", "endpoint": record.endpoint, "time": record.wall_time,
                     **record.metrics.to_json()}]
        elif kind is GpuEvent:
            rows = list(_gpu_rows(record))
        elif kind is SystemEvent:
            rows = list(_system_rows(record))
        elif kind is AlertsEvent:
            rows = list(_alert_rows(record, active))
        elif kind is ControlEvent and "marks" in what:
            rows = [{"type": "control", "time": record.wall_time, "command": record.command, "value": record.value}]
        for row in rows:
            yield event.t, event.seq, row  # in the order recorded (a probe's "time" is when it was sent)


def probe_row(event: SampleEvent, recorded_at: float | None = None) -> dict:
    """One probe as a JSON object: the stable keys first, then every other field of the sample."""
    s = event.sample
    row: dict[str, Any] = {
        "type": "probe",
        "endpoint": event.endpoint,
        "time": s.wall_time,
        "ok": s.ok,
        "error": s.error_kind,
        "ttft_ms": s.ttft_ms,
        "e2e_ms": s.e2e_ms,
        "itl_ms": list(s.itl_ms),
        "output_tokens": s.output_tokens,
        "tpot_ms": s.tpot_ms,
        "decode_tokens_per_s": s.decode_tokens_per_s,
    }
    for f in fields(s):
        if f.name in ("endpoint", "wall_time", "error_kind") or f.name in row:
            continue
        row[f.name] = _plain(getattr(s, f.name))
    if recorded_at is not None:
        row["recorded_at"] = recorded_at
    return row


def agent_step_row(event: AgentStepEvent, recorded_at: float | None = None) -> dict:
    """One agent step as a JSON object: `type` "agent_step", `endpoint`, `time` (Unix seconds, when call 1
    was sent), `ok`, `error` (the kind, or null), then every other field of the step (times in ms)."""
    step = event.step
    row: dict[str, Any] = {"type": "agent_step", "endpoint": event.endpoint, "time": step.wall_time, "ok": step.ok,
                           "error": step.error_kind}
    for f in fields(step):
        if f.name in ("endpoint", "wall_time", "error_kind"):
            continue
        row[f.name] = _plain(getattr(step, f.name))
    if recorded_at is not None:
        row["recorded_at"] = recorded_at
    return row


def chain_row(event: ChainEvent) -> dict:
    """A request joined to its server span (--traces-listen), or given up on: `type` "chain", `endpoint`,
    `time` (Unix seconds, when it was sent), `joined`, `reason` (why not, or null), then the segments (ms)."""
    settled = event.joined or event.unjoined
    row: dict[str, Any] = {"type": "chain", "endpoint": event.endpoint,
                           "time": settled.wall_time if settled is not None else event.wall_time,
                           "joined": event.joined is not None,
                           "reason": event.unjoined.reason if event.unjoined is not None else None}
    if event.joined is not None:
        row.update({k: v for k, v in event.joined.to_json().items() if k != "endpoint"})
        row["tag"] = event.joined.tag
    elif event.unjoined is not None:
        row.update({"trace_id": event.unjoined.trace_id, "kind": event.unjoined.kind, "tag": event.unjoined.tag})
    row["recorded_at"] = event.wall_time
    return row


def _gpu_rows(event: GpuEvent) -> Iterator[dict]:
    gpu = event.gpu
    devices = list(gpu.all_devices())
    if not devices:
        yield {"type": "gpu", "time": event.wall_time, "status": gpu.status}
        return
    for device in devices:
        values = device.to_json()
        values.pop("mig_devices", None)
        yield {"type": "gpu", "time": event.wall_time, "status": gpu.status, "key": device.key, **values}


def _system_rows(event: SystemEvent) -> Iterator[dict]:
    if event.host is not None:
        yield {"type": "host", "time": event.wall_time, **event.host.to_json()}
    for port in event.ports:
        yield {"type": "port", "time": event.wall_time, **port.to_json()}
    for leftover in event.leftovers:
        yield {"type": "leftover", "time": event.wall_time, **leftover.to_json()}


def _alert_rows(event: AlertsEvent, active: dict) -> Iterator[dict]:
    now = {(a.kind, a.subject, a.severity): a for a in event.alerts}
    for key, alert in now.items():
        if key not in active:
            yield {"type": "alert", "time": event.wall_time, "event": "began", **alert.to_json()}
    for key, alert in active.items():
        if key not in now:
            yield {"type": "alert", "time": event.wall_time, "event": "ended", **alert.to_json()}
    active.clear()
    active.update(now)


def _mark_row(mark: Mark) -> dict:
    if mark.kind in LOAD_MARKS:  # a load test's step ("load_step"), or its start or end ("load")
        return {"type": mark.kind, "time": mark.t, **_except(mark.payload, "type", "time")}
    return {"type": "mark", "kind": mark.kind, "time": mark.t, **_except(mark.payload, "type", "kind", "time")}


def _except(payload: dict, *keys: str) -> dict:
    return {k: v for k, v in payload.items() if k not in keys}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    return str(value)


# ---- writers ----

def _write_jsonl(rows: Iterable[dict], out: IO[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        out.write(dumps(_plain(row), ensure_ascii=False))
        out.write("\n")
        counts[row["type"]] = counts.get(row["type"], 0) + 1
    return counts


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def csv_safe(text: str) -> str:
    """`text` as a CSV cell no spreadsheet runs as a formula: a leading `'` when it starts with a formula
    character, unless it is a plain number (see the module's docstring)."""
    if text.startswith(FORMULA_START) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def _cell(value: Any) -> Any:
    value = json_safe(_plain(value))  # what JSONL writes as null (non-finite, beyond 64 bits) is empty here
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        value = " ".join(repr(v) for v in value)
    elif isinstance(value, (list, dict)):
        value = dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        return csv_safe(value)
    return value


def _write_csv(rows: Iterable[dict], out: IO[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    writer: csv.DictWriter | None = None
    for row in rows:
        if writer is None:
            writer = csv.DictWriter(out, fieldnames=list(row), extrasaction="ignore", lineterminator="\n")
            writer.writerow({name: csv_safe(str(name)) for name in row})  # the header, as the cells
        writer.writerow({k: _cell(v) for k, v in row.items()})
        counts[row["type"]] = counts.get(row["type"], 0) + 1
    return counts


# (family, help, row type, value from a row, labels from a row)
Family = tuple[str, str, str, Callable[[dict], Any], Callable[[dict], dict[str, str]]]


def _ms_to_s(key: str) -> Callable[[dict], Any]:
    return lambda row: None if row.get(key) is None else row[key] / 1000.0


def _endpoint(row: dict) -> dict[str, str]:
    return {"endpoint": str(row["endpoint"])}


def _itl_mean(row: dict) -> float | None:
    gaps = row.get("itl_ms") or []
    return sum(gaps) / len(gaps) / 1000.0 if gaps else None


def _gpu_labels(row: dict) -> dict[str, str]:
    return {"gpu": str(row.get("key")), "name": str(row.get("name")), "uuid": str(row.get("uuid"))}


def _ratio(key: str) -> Callable[[dict], Any]:
    return lambda row: None if row.get(key) is None else row[key] / 100.0


def _key(key: str) -> Callable[[dict], Any]:
    return lambda row: row.get(key)


FAMILIES: tuple[Family, ...] = (
    ("lpxtop_probe_ok", "1 when the probe succeeded, 0 when it failed", "probe",
     lambda r: 1 if r["ok"] else 0, _endpoint),
    ("lpxtop_probe_ttft_seconds", "time to first token of one probe", "probe", _ms_to_s("ttft_ms"), _endpoint),
    ("lpxtop_probe_e2e_seconds", "time to the last token of one probe", "probe", _ms_to_s("e2e_ms"), _endpoint),
    ("lpxtop_probe_tpot_seconds", "time per output token of one probe", "probe", _ms_to_s("tpot_ms"), _endpoint),
    ("lpxtop_probe_itl_mean_seconds", "mean inter-token latency of one probe", "probe", _itl_mean, _endpoint),
    ("lpxtop_probe_output_tokens", "output tokens of one probe", "probe", _key("output_tokens"), _endpoint),
    ("lpxtop_agent_step_seconds", "one agent step: call 1's send to the answer's last token", "agent_step",
     _ms_to_s("step_ms"), _endpoint),
    ("lpxtop_agent_time_to_tool_call_seconds", "one agent step: call 1's send to its tool call's last fragment",
     "agent_step", _ms_to_s("time_to_tool_call_ms"), _endpoint),
    ("lpxtop_server_requests_running", "requests the server is running", "server", _key("requests_running"),
     _endpoint),
    ("lpxtop_server_requests_waiting", "requests waiting in the server's queue", "server",
     _key("requests_waiting"), _endpoint),
    ("lpxtop_server_kv_cache_usage_ratio", "KV cache in use, 0-1", "server", _key("kv_cache_usage"), _endpoint),
    ("lpxtop_server_preemptions", "preemptions since the server started", "server", _key("preemptions_total"),
     _endpoint),
    ("lpxtop_server_generation_tokens_per_second", "tokens the server generated per second", "server",
     _key("generation_tokens_per_s"), _endpoint),
    ("lpxtop_server_prompt_tokens_per_second", "prompt tokens the server processed per second", "server",
     _key("prompt_tokens_per_s"), _endpoint),
    ("lpxtop_gpu_utilization_ratio", "GPU busy share, 0-1", "gpu", _ratio("util_pct"), _gpu_labels),
    ("lpxtop_gpu_memory_used_bytes", "GPU memory used", "gpu", _key("mem_used_bytes"), _gpu_labels),
    ("lpxtop_gpu_memory_total_bytes", "GPU memory in all", "gpu", _key("mem_total_bytes"), _gpu_labels),
    ("lpxtop_gpu_temperature_celsius", "GPU temperature", "gpu", _key("temp_c"), _gpu_labels),
    ("lpxtop_gpu_power_watts", "GPU power draw", "gpu", _key("power_w"), _gpu_labels),
    ("lpxtop_host_cpu_ratio", "host CPU busy share, 0-1", "host", _ratio("cpu_pct"), lambda r: {}),
    ("lpxtop_host_memory_used_bytes", "host memory used", "host", _key("mem_used_bytes"), lambda r: {}),
    ("lpxtop_host_memory_available_bytes", "host memory available", "host", _key("mem_available_bytes"),
     lambda r: {}),
    ("lpxtop_alert_active", "1 while the alert is active, 0 when it ended", "alert",
     lambda r: 1 if r["event"] == "began" else 0,
     lambda r: {"kind": str(r["kind"]), "subject": str(r.get("subject", "")), "severity": str(r["severity"])}),
)


def _label_value(text: str) -> str:
    """A label value as OpenMetrics escapes it (backslash, double quote); newlines become spaces and other
    control characters are dropped (the text is shown by Grafana and terminals later)."""
    text = printable(str(text))
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: Any) -> str | None:
    """A sample value as OpenMetrics writes it, or None when no finite float holds it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        as_float = float(value)
    except OverflowError:
        return None
    if not math.isfinite(as_float):
        return None
    return repr(value) if isinstance(value, float) else str(value)


def _write_openmetrics(rows: Iterable[dict], out: IO[str]) -> dict[str, int]:
    by_type: dict[str, list[int]] = {}
    for index, family in enumerate(FAMILIES):
        by_type.setdefault(family[2], []).append(index)
    series_ids: dict[str, int] = {}
    last: dict[str, float] = {}  # series -> its last timestamp: each series strictly in time order
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="lpxtop-export-") as spool_dir:
        spool = sqlite3.connect(os.path.join(spool_dir, "lines.db"), isolation_level=None)
        try:
            spool.execute("PRAGMA journal_mode = OFF")
            spool.execute("PRAGMA synchronous = OFF")
            spool.execute("CREATE TABLE lines (family INTEGER NOT NULL, series INTEGER NOT NULL, line TEXT NOT NULL)")
            spool.execute("BEGIN")
            batch: list[tuple[int, int, str]] = []
            for row in rows:
                time_s = row.get("time")
                if not is_time(time_s):
                    continue
                stamp = round(float(time_s), 3)
                for index in by_type.get(row["type"], ()):
                    name, _, _, value_of, labels_of = FAMILIES[index]
                    try:
                        number = _number(value_of(row))
                        labels = labels_of(row)
                    except (ArithmeticError, TypeError, ValueError, KeyError):
                        continue
                    if number is None:
                        continue
                    text = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
                    series = f"{name}{{{text}}}" if text else name
                    if last.get(series, float("-inf")) >= stamp:
                        continue
                    last[series] = stamp
                    series_id = series_ids.setdefault(series, len(series_ids))
                    batch.append((index, series_id, f"{series} {number} {stamp:.3f}\n"))
                    counts[name] = counts.get(name, 0) + 1
                if len(batch) >= 10_000:
                    spool.executemany("INSERT INTO lines VALUES (?, ?, ?)", batch)
                    batch.clear()
            spool.executemany("INSERT INTO lines VALUES (?, ?, ?)", batch)
            spool.execute("COMMIT")
            spool.execute("CREATE INDEX lines_order ON lines (family, series)")  # rowid: time order within
            for index, (name, help_text, _, _, _) in enumerate(FAMILIES):
                if not counts.get(name):
                    continue
                out.write(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
                for (line,) in spool.execute("SELECT line FROM lines WHERE family = ? ORDER BY series, rowid",
                                             (index,)):
                    out.write(line)
            out.write("# EOF\n")
        finally:
            spool.close()
    return counts
