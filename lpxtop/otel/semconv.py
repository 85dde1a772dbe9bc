"""The names lpxtop's metrics and spans carry: the OpenTelemetry GenAI semantic conventions, and lpxtop's own.

Two naming modes (docs/opentelemetry.md lists every name with its source):

- **default**: semantic-conventions v1.41.0 (commit e018fe6f91862f5ed63c082f87697cddac596784), the last
  release of open-telemetry/semantic-conventions that held the GenAI conventions (docs/gen-ai/
  gen-ai-metrics.md, gen-ai-spans.md, gen-ai-agent-spans.md; v1.41.1 changed none of them). This is what
  the `opentelemetry-semantic-conventions` package and most backends' GenAI dashboards know.
- **latest** (`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`): the names the conventions'
  own repository now defines, open-telemetry/semantic-conventions-genai (its migration guide
  docs/gen-ai/non-normative/migration.md at 32c328e85013588c6fe32ebc30934ab5b1752b6a, model/gen-ai/
  metrics.yaml at 024a4f944a1291fcb627c9c47da69e79868dd15e, token-metrics.yaml at
  066d4a7f356f8600de6f10c42874626ab88692fb). What changed for a client like lpxtop:
    gen_ai.client.operation.duration             -> gen_ai.client.inference.duration (chat, text_completion)
    gen_ai.client.operation.time_to_first_chunk  -> gen_ai.client.inference.time_to_first_chunk
    gen_ai.client.operation.time_per_output_chunk-> gen_ai.client.inference.time_per_output_chunk
    gen_ai.client.token.usage{gen_ai.token.type} -> counters gen_ai.client.inference.usage.{input,output}_tokens
                                                    (with gen_ai.token.modality) and histograms
                                                    gen_ai.client.inference.operation.{input,output}_tokens
    an in-process agent's invoke_agent duration  -> gen_ai.invoke_agent.duration
    an execute_tool duration                     -> gen_ai.execute_tool.duration
  gen_ai.client.operation.duration stays for client operations that are not inference (a Dify app's
  invoke_agent). Span names, kinds and attributes lpxtop sets did not change.

Nothing here imports OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lpxtop.export.settings import DEFAULT_BUCKETS

STABLE_VERSION = "1.41.0"
STABLE_COMMIT = "e018fe6f91862f5ed63c082f87697cddac596784"
LATEST_COMMIT = "024a4f944a1291fcb627c9c47da69e79868dd15e"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{STABLE_VERSION}"

# ExplicitBucketBoundaries the conventions give (v1.41.0 gen-ai-metrics.md; unchanged in the new repository's
# client-inference.md and gen-ai-token-metrics.md).
DURATION_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BOUNDS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
# lpxtop's own ITL histogram: the conventions' per-chunk bounds start at 10 ms, where a token gap of a
# healthy server (5-30 ms) would fall in one or two buckets; these are the Prometheus exporter's.
ITL_BOUNDS = DEFAULT_BUCKETS["itl"]

# Attribute keys (the conventions' registry: docs/registry/attributes/gen-ai.md, server.md, error.md)
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
MAX_TOKENS = "gen_ai.request.max_tokens"
STREAM = "gen_ai.request.stream"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOKEN_TYPE = "gen_ai.token.type"
TOKEN_MODALITY = "gen_ai.token.modality"
AGENT_NAME = "gen_ai.agent.name"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"

# lpxtop's own attributes
ENDPOINT = "lpxtop.endpoint"
REQUEST_KIND = "lpxtop.request.kind"  # probe | agent_step | load
CLIENT_LIMITED = "lpxtop.client_limited"
TOKENS_APPROX = "lpxtop.output_tokens.approximate"
LOAD_STEP = "lpxtop.load.step"
LOAD_PHASE = "lpxtop.load.phase"
GPU_INDEX = "lpxtop.gpu.index"
GPU_NAME = "lpxtop.gpu.name"
FIRST_TOKEN_EVENT = "lpxtop.first_token"  # the span event at the first token-bearing chunk
AGENT = "lpxtop"  # gen_ai.agent.name of lpxtop's own agent-step probe

CHAT, TEXT_COMPLETION, EXECUTE_TOOL, INVOKE_AGENT = "chat", "text_completion", "execute_tool", "invoke_agent"


def operation_for(api: str) -> str:
    """The conventions' operation name for an endpoint's API: /chat/completions or the legacy /completions."""
    return TEXT_COMPLETION if api == "completions" else CHAT


def provider_for(server_kind: str | None, api: str = "chat") -> str:
    """`gen_ai.provider.name`: the conventions' well-known `openai` for OpenAI itself; otherwise the server
    lpxtop detected (`vllm`, `sglang`, `tgi`, `llamacpp`, `triton`, `lmdeploy`, `ollama`), `dify` for a Dify
    app or workflow, `coze` for a Coze bot, `unknown` before detection: values of lpxtop's own, as the conventions allow for providers they do
    not list (an OpenAI-compatible server is not OpenAI)."""
    if api in ("dify", "dify-workflow"):
        return "dify"
    if api == "coze":
        return "coze"
    return server_kind or "unknown"


@dataclass(frozen=True)
class MetricDef:
    name: str
    kind: str  # histogram | counter | gauge
    unit: str
    description: str
    bounds: tuple[float, ...] = ()


def _h(name: str, unit: str, description: str, bounds: tuple[float, ...] = DURATION_BOUNDS) -> MetricDef:
    return MetricDef(name, "histogram", unit, description, bounds)


def _c(name: str, unit: str, description: str) -> MetricDef:
    return MetricDef(name, "counter", unit, description)


def _g(name: str, unit: str, description: str) -> MetricDef:
    return MetricDef(name, "gauge", unit, description)


# keys the measures use; the names differ between the modes
STABLE_METRICS: Mapping[str, MetricDef] = {
    "inference_duration": _h("gen_ai.client.operation.duration", "s", "GenAI operation duration."),
    "operation_duration": _h("gen_ai.client.operation.duration", "s", "GenAI operation duration."),
    "agent_duration": _h("gen_ai.client.operation.duration", "s", "GenAI operation duration."),
    "tool_duration": _h("gen_ai.client.operation.duration", "s", "GenAI operation duration."),
    "ttfc": _h("gen_ai.client.operation.time_to_first_chunk", "s",
               "Time to receive the first chunk, from when the client issues the generation request."),
    "tpoc": _h("gen_ai.client.operation.time_per_output_chunk", "s",
               "Time per output chunk after the first, from the end of the previous chunk to the end of this one."),
    "token_usage": _h("gen_ai.client.token.usage", "{token}", "Number of input and output tokens used.",
                      TOKEN_BOUNDS),
}
LATEST_METRICS: Mapping[str, MetricDef] = {
    "inference_duration": _h("gen_ai.client.inference.duration", "s", "GenAI client inference operation duration."),
    "operation_duration": _h("gen_ai.client.operation.duration", "s", "GenAI operation duration."),
    "agent_duration": _h("gen_ai.invoke_agent.duration", "s",
                         "The end-to-end duration of a single in-process agent invocation."),
    "tool_duration": _h("gen_ai.execute_tool.duration", "s", "The duration of a single tool execution."),
    "ttfc": _h("gen_ai.client.inference.time_to_first_chunk", "s",
               "Time to receive the first chunk, from when the client issues the generation request."),
    "tpoc": _h("gen_ai.client.inference.time_per_output_chunk", "s",
               "Time per output chunk after the first, from the end of the previous chunk to the end of this one."),
    "usage_input": _c("gen_ai.client.inference.usage.input_tokens", "{token}",
                      "The number of input (prompt) tokens used, including cached tokens."),
    "usage_output": _c("gen_ai.client.inference.usage.output_tokens", "{token}",
                       "The number of output (completion) tokens used, including reasoning tokens."),
    "operation_input": _h("gen_ai.client.inference.operation.input_tokens", "{token}",
                          "The number of input (prompt) tokens used per inference operation.", TOKEN_BOUNDS),
    "operation_output": _h("gen_ai.client.inference.operation.output_tokens", "{token}",
                           "The number of output (completion) tokens used per inference operation.", TOKEN_BOUNDS),
}
LPXTOP_METRICS: Mapping[str, MetricDef] = {
    "itl": _h("lpxtop.probe.itl", "s", "Gap between consecutive token-bearing chunks of a request (lpxtop's ITL).",
              ITL_BOUNDS),
    "errors": _c("lpxtop.probe.errors", "{error}", "Failed probes, agent steps and load requests, by error.type."),
    "up": _g("lpxtop.endpoint.up", "1", "1 while the endpoint answers lpxtop's probes (up or degraded), else 0."),
    "waiting": _g("lpxtop.server.requests.waiting", "{request}", "Requests queued in the server (its /metrics)."),
    "running": _g("lpxtop.server.requests.running", "{request}", "Requests running in the server (its /metrics)."),
    "kv_cache": _g("lpxtop.server.kv_cache.usage", "1", "Share of the server's KV cache in use (its /metrics)."),
    "gpu_used": _g("lpxtop.gpu.memory.used", "By", "GPU memory in use."),
    "gpu_total": _g("lpxtop.gpu.memory.total", "By", "GPU memory in all."),
    "spans_dropped": _c("lpxtop.otlp.spans.dropped", "{span}",
                        "Spans lpxtop could not deliver (backend down, slow or refusing; queue full)."),
}


def metric_defs(latest: bool) -> dict[str, MetricDef]:
    """Every metric lpxtop sends in a naming mode, by the key the measures use."""
    return {**(LATEST_METRICS if latest else STABLE_METRICS), **LPXTOP_METRICS}
