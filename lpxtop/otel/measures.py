"""What one probe, agent step or load-test request adds to the metrics, and lpxtop's own gauges read from a
snapshot. Runs on the pipeline's worker thread, never on the probe loop. No OpenTelemetry import.

Definitions (docs/opentelemetry.md says the same for users):

- operation duration: a request that answered, send to its last token-bearing chunk (lpxtop's E2E, as
  `vllm bench serve` defines it); a failed one, send to when lpxtop gave up, with `error.type` = lpxtop's
  error kind (refused, http_5xx, first_token_timeout ... lpxtop/model/probe.py ERROR_KINDS; an agent
  step's behaviour kinds lpxtop/model/agent.py BEHAVIOUR_KINDS);
- time to first chunk: to the first chunk that carries a token (a role-only chunk is not the first token,
  the chunk rule lpxtop applies everywhere); per output chunk: each gap between token-bearing chunks;
- token usage: the server's `usage` when it sent one, else output tokens counted from the chunks;
- a probe flagged client-limited (lpxtop itself was late while it ran: lpxtop/engine/probe/clientlimit.py) has
  its times in series of their own, with `lpxtop.client_limited=true`: the dashboard leaves such probes
  out of its percentiles; a backend's query can do the same (`lpxtop.client_limited` absent), and nothing
  is lost silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lpxtop.model.agent import AgentStep
from lpxtop.model.endpoint import PLATFORM_APIS, EndpointConfig
from lpxtop.model.probe import Sample
from lpxtop.model.snapshot import Snapshot
from lpxtop.otel import semconv as sc
from lpxtop.otel.aggregate import Aggregator, Attrs, attrs_key
from lpxtop.otel.semconv import MetricDef, metric_defs


@dataclass(frozen=True)
class EndpointInfo:
    """What the attributes of an endpoint's requests say about it."""

    name: str
    api: str = "chat"  # chat | completions | dify
    address: str | None = None
    port: int | None = None
    provider: str = "unknown"
    request_model: str | None = None
    max_tokens: int | None = None

    @classmethod
    def of(cls, config: EndpointConfig, model: str | None = None, server_kind: str | None = None) -> EndpointInfo:
        return cls(name=config.name, api=config.api, address=config.host or None, port=config.port,
                   provider=sc.provider_for(server_kind, config.api), request_model=model or config.model,
                   max_tokens=config.max_tokens)

    @property
    def operation(self) -> str:
        return sc.operation_for(self.api)

    def operation_attrs(self, operation: str | None = None) -> dict[str, object]:
        return {sc.OPERATION: operation or self.operation, sc.PROVIDER: self.provider,
                sc.REQUEST_MODEL: self.request_model, sc.SERVER_ADDRESS: self.address, sc.SERVER_PORT: self.port}


def infos_from(snapshot: Snapshot) -> dict[str, EndpointInfo]:
    return {v.name: EndpointInfo.of(v.config, v.model, v.server_kind) for v in snapshot.endpoints}


class Measures:
    """Turns records into the aggregator's series, in one naming mode."""

    def __init__(self, aggregator: Aggregator, *, latest: bool = False) -> None:
        self.agg = aggregator
        self.latest = latest
        self.defs: Mapping[str, MetricDef] = metric_defs(latest)

    # ---- one inference request: a probe or a load-test request ----

    def request(self, sample: Sample, info: EndpointInfo, now_ns: int, kind: str = "probe") -> None:
        d, agg = self.defs, self.agg
        base = info.operation_attrs()
        base[sc.RESPONSE_MODEL] = sample.model
        limited = {sc.CLIENT_LIMITED: True} if sample.client_limited else {}
        duration_s = request_duration_ms(sample)
        error = {sc.ERROR_TYPE: sample.error_kind} if not sample.ok else {}
        if duration_s is not None:
            agg.record(d["inference_duration"], duration_s / 1000.0, attrs_key({**base, **error, **limited}), now_ns)
        key = attrs_key({**base, **limited})
        if sample.ttft_ms is not None:
            agg.record(d["ttfc"], sample.ttft_ms / 1000.0, key, now_ns)
        if len(sample.token_event_ms) > 1:
            gaps = [g / 1000.0 for g in sample.itl_ms]
            agg.record_many(d["tpoc"], gaps, key, now_ns)
            agg.record_many(d["itl"], gaps, attrs_key({sc.ENDPOINT: info.name, sc.REQUEST_KIND: kind, **limited}),
                            now_ns)
        self._tokens(sample, base, error, now_ns)
        if not sample.ok:
            self.error(info, sample.error_kind or "other", kind, now_ns)

    def _tokens(self, sample: Sample, base: dict[str, object], error: dict[str, object], now_ns: int) -> None:
        d, agg = self.defs, self.agg
        if not self.latest:
            for token_type, n in (("input", sample.prompt_tokens), ("output", sample.output_tokens)):
                if n is not None:
                    agg.record(d["token_usage"], n, attrs_key({**base, sc.TOKEN_TYPE: token_type}), now_ns)
            return
        # the newest conventions: every inference operation counts, failed ones too, 0 when no usage came
        prompt, output = sample.prompt_tokens, sample.output_tokens
        agg.add(d["usage_input"], prompt or 0,
                attrs_key({**base, sc.TOKEN_MODALITY: "text" if prompt is not None else "unknown"}), now_ns)
        agg.add(d["usage_output"], output or 0,
                attrs_key({**base, sc.TOKEN_MODALITY: "text" if output is not None else "unknown"}), now_ns)
        key = attrs_key({**base, **error})
        agg.record(d["operation_input"], prompt or 0, key, now_ns)
        agg.record(d["operation_output"], output or 0, key, now_ns)

    def error(self, info: EndpointInfo, error_type: str, kind: str, now_ns: int) -> None:
        self.agg.add(self.defs["errors"], 1, attrs_key({sc.ENDPOINT: info.name, sc.ERROR_TYPE: error_type,
                                                        sc.REQUEST_KIND: kind}), now_ns)

    def spans_dropped(self, count: int, now_ns: int) -> None:
        self.agg.add(self.defs["spans_dropped"], count, (), now_ns)

    # ---- one agent step ----

    def agent_step(self, step: AgentStep, info: EndpointInfo, now_ns: int) -> None:
        d, agg = self.defs, self.agg
        limited = {sc.CLIENT_LIMITED: True} if step.client_limited else {}
        if step.tool_ms is not None:
            tool = {sc.OPERATION: sc.EXECUTE_TOOL, sc.TOOL_NAME: step.tool_name, **limited}
            agg.record(d["tool_duration"], step.tool_ms / 1000.0, attrs_key(tool), now_ns)
        error = {sc.ERROR_TYPE: step.error_kind} if not step.ok else {}
        if step.api in PLATFORM_APIS:  # one request to an agent that runs elsewhere: a client operation
            attrs = {**info.operation_attrs(sc.INVOKE_AGENT), **error, **limited}
            if step.step_ms is not None:
                agg.record(d["operation_duration"], step.step_ms / 1000.0, attrs_key(attrs), now_ns)
        else:
            attrs = {**info.operation_attrs(sc.INVOKE_AGENT), sc.AGENT_NAME: sc.AGENT, **error, **limited}
            if step.step_ms is not None:
                agg.record(d["agent_duration"], step.step_ms / 1000.0, attrs_key(attrs), now_ns)
            for _call, ttft, e2e, response_ok in agent_calls(step):
                call_attrs = {**info.operation_attrs(sc.CHAT), **limited}
                call_error = {} if response_ok else {sc.ERROR_TYPE: step.error_kind}
                if e2e is not None:
                    agg.record(d["inference_duration"], e2e / 1000.0, attrs_key({**call_attrs, **call_error}), now_ns)
                if ttft is not None:
                    agg.record(d["ttfc"], ttft / 1000.0, attrs_key(call_attrs), now_ns)
        if not step.ok:
            self.error(info, step.error_kind or "other", "agent_step", now_ns)

    # ---- lpxtop's own figures, read from the newest snapshot at export ----

    def gauges(self, snapshot: Snapshot | None) -> list[tuple[MetricDef, list[tuple[Attrs, float]]]]:
        if snapshot is None:
            return []
        d = self.defs
        rows: dict[str, list[tuple[Attrs, float]]] = {k: [] for k in ("up", "waiting", "running", "kv_cache",
                                                                      "gpu_used", "gpu_total")}
        for view in snapshot.endpoints:
            info = EndpointInfo.of(view.config, view.model, view.server_kind)
            key = attrs_key({sc.ENDPOINT: info.name, sc.SERVER_ADDRESS: info.address, sc.SERVER_PORT: info.port,
                             sc.PROVIDER: info.provider, sc.REQUEST_MODEL: info.request_model})
            if view.status != "pending":
                rows["up"].append((key, 1.0 if view.status in ("up", "degraded") else 0.0))
            server = view.server
            if server is not None and server.status == "ok":
                for name, value in (("waiting", server.requests_waiting), ("running", server.requests_running),
                                    ("kv_cache", server.kv_cache_usage)):
                    if value is not None:
                        rows[name].append((key, float(value)))
        for device in snapshot.gpu.devices:
            if device.lost:
                continue
            key = attrs_key({sc.GPU_INDEX: device.index, sc.GPU_NAME: device.name})
            if device.mem_used_bytes is not None:
                rows["gpu_used"].append((key, float(device.mem_used_bytes)))
            if device.mem_total_bytes is not None:
                rows["gpu_total"].append((key, float(device.mem_total_bytes)))
        return [(d[name], values) for name, values in rows.items() if values]


def request_duration_ms(sample: Sample) -> float | None:
    """Send to the last token-bearing chunk for an answer; send to when lpxtop gave up for a failure."""
    if sample.ok:
        return sample.e2e_ms
    if sample.end_wall_time is not None:
        waited = (sample.end_wall_time - sample.wall_time) * 1000.0 - (sample.pool_wait_ms or 0.0)
        return max(waited, sample.e2e_ms or 0.0, 0.0)
    return sample.e2e_ms if sample.e2e_ms is not None else sample.first_event_ms


def agent_calls(step: AgentStep) -> list[tuple[int, float | None, float | None, bool]]:
    """(call, TTFT ms, E2E ms, answered) of each model call an OpenAI-style agent step made."""
    calls = [(1, step.call1_ttft_ms, step.call1_e2e_ms, step.failed_call != 1)]
    if step.call2_start_ms is not None:
        calls.append((2, step.answer_ttft_ms, step.answer_e2e_ms, step.failed_call != 2))
    return calls
