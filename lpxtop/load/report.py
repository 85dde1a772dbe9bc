"""A load test's report: JSON (`lpxtop-load/1`), CSV (one row per step) and the text table.

The JSON is a stable interface like `once --json`: keys may be added, none renamed without bumping the
schema. Files are written whole to a temporary name and renamed, so a report interrupted half-way never
leaves a truncated file behind.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import os
import socket
import sys
import tempfile
from collections.abc import Sequence

from lpxtop import __version__, jsonout
from lpxtop.humanize import spoken_ms
from lpxtop.model.chain import SPLIT_PARTS
from lpxtop.model.load import SCHEMA, LoadState, StepResult, format_level


def report_json(
    state: LoadState,
    *,
    plan_summary: dict,
    outcome: str,
    error: str | None = None,
    server_kind: str | None = None,
    warnings: Sequence[str] = (),
    started_at: float | None = None,
    finished_at: float | None = None,
) -> dict:
    """The whole report as a JSON-ready dict."""

    def iso(t: float | None) -> str | None:
        if t is None:
            return None
        return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat().replace("+00:00", "Z")

    cap = state.capacity
    return {
        "schema": SCHEMA,
        "lpxtop": __version__,
        "host": socket.gethostname(),
        "started": iso(started_at),
        "finished": iso(finished_at),
        "target": {
            "url": state.target,
            "model": state.model,
            "server_kind": server_kind,
            "api": plan_summary.get("api"),
        },
        "plan": plan_summary,
        "slo": state.slo_text,
        "outcome": outcome,  # done | stopped | target_down | error
        "partial": outcome != "done" or any(s.status == "partial" for s in state.steps),
        "error": error,
        "steps": [s.to_json() for s in state.steps],
        "capacity": cap.to_json() if cap is not None else
        {"concurrency": None, "request_rate": None, "input_tokens": None, "step": None,
         "reason": error or "no step finished", "summary": None},
        "knee_step": state.knee_index,
        "warnings": list(warnings),
    }


CSV_SKIP = ("errors", "slo", "client", "server", "rhythm", "chain", "ttft_split")


def steps_csv(steps: Sequence[StepResult]) -> str:
    """One row per step: the step's JSON keys, with errors, client and server figures flattened."""
    rows = []
    for step in steps:
        data = step.to_json()
        row = {k: v for k, v in data.items() if k not in CSV_SKIP}
        row["errors"] = ";".join(f"{k}:{v}" for k, v in sorted(step.errors))
        row["slo_failed"] = ";".join(r.objective for r in step.slo if not r.met)
        for key, value in step.client.to_json().items():
            row[f"client_{key}" if not key.startswith("client") else key] = value
        server = step.server.to_json() if step.server is not None else {}
        rhythm = step.rhythm.to_json() if step.rhythm is not None else {}
        for key in ("schedule", "synchrony", "dispersion"):
            row[f"rhythm_{key}"] = rhythm.get(key)
        for key in ("kind", "peak_requests_waiting", "peak_requests_running", "peak_kv_cache_usage", "preemptions",
                    "prefix_cache_hit_rate", "mean_ttft_ms", "mean_queue_ms", "energy_j", "joules_per_output_token"):
            row[f"server_{key}"] = server.get(key)
        # --traces-listen: the TTFT at p50 and p95 split by the requests' own server spans (empty without)
        chain = data.get("chain") or {}
        row["chain_requests_joined"] = chain.get("probes_joined")
        for q, split in (data.get("ttft_split") or {"p50": None, "p95": None}).items():
            for part in SPLIT_PARTS:
                row[f"ttft_{q}_{part}"] = (split or {}).get(part)
        rows.append(row)
    if not rows:
        return ""
    out = io.StringIO()
    fields = list(rows[0].keys())
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in fields})
    return out.getvalue()


def write_text(path: str, text: str) -> None:
    """Write `text` to `path` ("-": stdout) whole: a temporary file in the same directory, then a rename."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".lpxtop-load-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def dumps(report: dict) -> str:
    """The report as JSON that every reader parses (a non-finite number is null: lpxtop/jsonout.py)."""
    return jsonout.dumps(report, indent=2) + "\n"


def step_table(state: LoadState) -> str:
    """The finished steps as a plain table, for the terminal after a headless run."""
    split = any(s.chain is not None for s in state.steps)  # --traces-listen: TTFT p50/p95 as queue/prefill/outside
    header = ("step", "load", "status", "ok", "fail", "req/s", "tok/s", "TTFT p50", "TTFT p95", "TPOT p50",
              "ITL p50", "E2E p95", "rhythm", *(("p50 q/p/out ms", "p95 q/p/out ms") if split else ()), "SLO")
    lines = [header]
    for s in state.steps:
        def ms(d, q: str) -> str:
            return "--" if d is None else spoken_ms(getattr(d, q))

        slo = "--" if s.slo_met is None else ("met" if s.slo_met else "missed")
        if s.client.limited:
            slo += " (client-limited)"
        if s.saturated:
            slo += " (saturated)"
        lines.append((
            str(s.index + 1), format_level(s.mode, s.level), s.status, str(s.completed), str(s.failed),
            "--" if s.request_throughput is None else f"{s.request_throughput:.2f}",
            "--" if s.output_throughput is None else f"{s.output_throughput:.1f}",
            ms(s.ttft_ms, "p50"), ms(s.ttft_ms, "p95"), ms(s.tpot_ms, "p50"), ms(s.itl_ms, "p50"),
            ms(s.e2el_ms, "p95"), s.rhythm.describe() if s.rhythm is not None else "--",
            *((_split_text(s, 50), _split_text(s, 95)) if split else ()), slo,
        ))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in lines)


def _split_text(step: StepResult, quantile: int) -> str:
    split = step.chain.split_at(quantile) if step.chain is not None else None
    if split is None:
        return "--"
    return f"{split.queue_ms:.1f}/{split.prefill_ms:.1f}/{split.outside_ms:.1f}"
