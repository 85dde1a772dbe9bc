"""HTTP endpoints of the sim: the OpenAI-compatible API, /metrics, /health, /version and /sim/* controls."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lpxtop.sim.coze import CozeBot
from lpxtop.sim.dify import DifyApp
from lpxtop.sim.difyworkflow import DifyWorkflow
from lpxtop.sim.faults import Faults
from lpxtop.sim.metrics import METRICS_CONTENT_TYPE
from lpxtop.sim.records import SimRecord
from lpxtop.sim.scheduler import SimRequest
from lpxtop.sim.streaming import StreamSession
from lpxtop.sim.text import chat_prompt_tokens, completion_prompt_tokens
from lpxtop.sim.tools import ToolCallPlan, ToolCallSession, plan_tool_call, tool_prompt_tokens
from lpxtop.sim.wire import (
    ChunkMaker,
    compact_json,
    error_body,
    new_response_id,
    openai_error_body,
    system_fingerprint,
)

if TYPE_CHECKING:
    from lpxtop.sim.server import SimServer

ID_HEADER = "X-Sim-Response-Id"


class RequestRejected(Exception):
    """An error answer for a generation request: status, JSON body and extra headers."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Compact JSON like vLLM's responses.
    return web.json_response(body, status=status, headers=headers, dumps=compact_json)


def _bad_request(message: str, param: str | None = None) -> RequestRejected:
    return RequestRejected(400, error_body(400, message, param))


class SimHandlers:
    """The request handlers of one SimServer."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.config = server.config

    def routes(self) -> list[web.RouteDef]:
        """All routes, for app.add_routes()."""
        return [
            web.post("/v1/chat/completions", self.chat_completions),
            web.post("/v1/completions", self.completions),
            web.get("/v1/models", self.models),
            web.get("/health", self.health),
            web.get("/version", self.version),
            web.get("/metrics", self.metrics),
            web.get("/sim/faults", self.get_faults),
            web.post("/sim/faults", self.post_faults),
            web.post("/sim/reset", self.reset),
            web.get("/sim/state", self.state),
            web.get("/sim/records/{response_id}", self.record),
            web.post("/v1/chat-messages", DifyApp(self.server).chat_messages),  # a Dify agent app (sim/dify.py)
            web.post("/v1/workflows/run", DifyWorkflow(self.server).run),  # a Dify workflow (sim/difyworkflow.py)
            web.post("/v3/chat", CozeBot(self.server).chat),  # a Coze bot (sim/coze.py)
        ]

    async def health(self, request: web.Request) -> web.Response:
        """200 with an empty body, like vLLM."""
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        """{"version": "0.32.0"}, like vLLM."""
        return _json({"version": self.config.version})

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus exposition text in vLLM V1's format."""
        return web.Response(body=self.server.metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def models(self, request: web.Request) -> web.Response:
        """The one served model, in vLLM's /v1/models shape."""
        denied = self._auth_error(request, self.server.faults.peek())
        if denied is not None:
            return _json(denied.body, status=denied.status)
        cfg = self.config
        created = int(self.server.started_at)
        permission = {
            "id": f"modelperm-{uuid.uuid4().hex[:16]}",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        model = {
            "id": cfg.model,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": cfg.model,
            "parent": None,
            "max_model_len": cfg.max_model_len,
            "permission": [permission],
        }
        return _json({"object": "list", "data": [model]})

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/chat/completions, streaming or not."""
        return await self._generate(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/completions, streaming or not."""
        return await self._generate(request, "completions")

    async def _generate(self, request: web.Request, api: str) -> web.StreamResponse:
        t_received_ns = time.perf_counter_ns()
        server = self.server
        faults = server.faults.take()
        record = SimRecord(
            response_id=new_response_id(api),
            model=self.config.model,
            api=api,
            stream=False,
            t_received_ns=t_received_ns,
            faults=tuple(faults.active()),
        )
        server.record_store.add(record)
        if faults.slow_headers_s > 0:
            await asyncio.sleep(faults.slow_headers_s)
        try:
            sim_request, include_usage, tool_plan = await self._admit(request, api, faults, record)
        except RequestRejected as rejected:
            record.status = rejected.status
            record.outcome = f"http_{rejected.status}"
            record.t_done_ns = time.perf_counter_ns()
            headers = {ID_HEADER: record.response_id, **rejected.headers}
            return _json(rejected.body, status=rejected.status, headers=headers)
        chunks = ChunkMaker(
            api, record.response_id, record.model, system_fingerprint(self.config.version, record.model)
        )
        if tool_plan is not None:  # a request with tools, answered with a tool call (sim/tools.py)
            session: StreamSession = ToolCallSession(server, request, record, faults, sim_request, chunks,
                                                     include_usage, plan=tool_plan)
        else:
            session = StreamSession(server, request, record, faults, sim_request, chunks, include_usage)
        if record.stream:
            return await session.stream()
        return await session.respond_once()

    async def _admit(
        self, request: web.Request, api: str, faults: Faults, record: SimRecord
    ) -> tuple[SimRequest, bool, ToolCallPlan | None]:
        """Check access and the body, then queue the request in the engine; raise RequestRejected."""
        cfg = self.config
        denied = self._auth_error(request, faults)
        if denied is not None:
            raise denied
        if faults.forbidden:
            raise RequestRejected(
                403,
                openai_error_body("You are not allowed to use this model.", "permission_error", "forbidden"),
            )
        if faults.rate_limit:
            raise RequestRejected(
                429,
                openai_error_body(
                    "Rate limit reached for requests. Please retry after 2s.",
                    "requests",
                    "rate_limit_exceeded",
                ),
                {"Retry-After": "2"},
            )
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _bad_request("The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise _bad_request("The request body must be a JSON object.")
        record.stream = bool(body.get("stream", False))
        if cfg.reject_stream_options and "stream_options" in body:
            # what an older OpenAI-compatible server with strict request validation answers
            raise RequestRejected(422, error_body(422, "Extra inputs are not permitted: stream_options", "stream_options"))
        model = body.get("model")
        if model is not None and model != cfg.model:
            raise RequestRejected(404, error_body(404, f"The model `{model}` does not exist.", "model"))
        if api == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _bad_request("`messages` must be a non-empty list.", "messages")
            prompt = chat_prompt_tokens(messages) + tool_prompt_tokens(body)
        else:
            if "prompt" not in body:
                raise _bad_request("`prompt` is required.", "prompt")
            prompt = completion_prompt_tokens(body["prompt"])
        record.prompt_tokens = len(prompt)
        max_tokens = self._max_tokens(body, api, len(prompt))
        stream_options = body.get("stream_options")
        if stream_options is not None and not record.stream:
            raise _bad_request("Stream options can only be defined when `stream=True`.", "stream_options")
        include_usage = (
            cfg.send_usage and isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
        )
        if faults.fail_rate > 0 and self.server.rng.random() < faults.fail_rate:
            raise RequestRejected(
                500, error_body(500, "Internal server error (injected by lpxtop sim fail_rate).")
            )
        target, reason = max_tokens, "length"
        if faults.empty:
            target, reason = 1, "stop"
        elif cfg.random_stop and not body.get("ignore_eos", False):
            target = self.server.rng.randint(1, max_tokens)
            reason = "stop" if target < max_tokens else "length"
        tool_plan = plan_tool_call(body, cfg, faults, self.server.rng) if api == "chat" and not faults.empty else None
        if tool_plan is not None:
            target, reason = tool_plan.target(max_tokens)
        sim_request = SimRequest(
            request_id=record.response_id,
            prompt=prompt,
            max_tokens=max_tokens,
            target_tokens=target,
            finish_reason=reason,
            first_token_delay_s=faults.first_token_delay_ms / 1000.0,
            events=asyncio.Queue(),
            received_s=record.t_received_ns / 1e9,
            traceparent=request.headers.get("traceparent"),
        )
        if not self.server.scheduler.submit(sim_request):
            raise RequestRejected(
                503,
                error_body(
                    503,
                    f"The server is overloaded: {self.server.scheduler.requests_waiting} requests are waiting "
                    f"(max_waiting={cfg.max_waiting}). Retry later.",
                ),
            )
        return sim_request, include_usage, tool_plan

    def _max_tokens(self, body: dict[str, Any], api: str, prompt_len: int) -> int:
        cfg = self.config
        value = body.get("max_completion_tokens") if api == "chat" else None
        if value is None:
            value = body.get("max_tokens")
        if prompt_len >= cfg.max_model_len:
            raise _bad_request(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, your request "
                f"has {prompt_len} input tokens. Please reduce the length of the input messages."
            )
        if value is None:
            return max(1, min(cfg.default_max_tokens, cfg.max_model_len - prompt_len))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _bad_request("max_tokens must be at least 1.", "max_tokens")
        if prompt_len + value > cfg.max_model_len:
            raise _bad_request(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{prompt_len + value} tokens ({prompt_len} in the messages, {value} in the completion). "
                "Please reduce the length of the messages or completion.",
                "max_tokens",
            )
        return value

    def _auth_error(self, request: web.Request, faults: Faults) -> RequestRejected | None:
        if not faults.api_key:
            return None
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {faults.api_key}"
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
        message = "Incorrect API key provided." if given else "You didn't provide an API key."
        return RequestRejected(401, openai_error_body(message, "invalid_request_error", "invalid_api_key"))

    async def get_faults(self, request: web.Request) -> web.Response:
        """The standing faults and pending one-shot faults."""
        return _json(self.server.faults.to_json())

    async def post_faults(self, request: web.Request) -> web.Response:
        """Set faults from a JSON object; `"count": N` makes them apply to the next N requests only."""
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object of fault settings")
            self.server.set_faults(**body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _json(error_body(400, "The request body is not valid JSON."), status=400)
        except (ValueError, TypeError) as exc:
            return _json(error_body(400, str(exc)), status=400)
        return _json(self.server.faults.to_json())

    async def reset(self, request: web.Request) -> web.Response:
        """Faults back to the start-up ones, records cleared (metrics keep counting, like a live server)."""
        self.server.reset()
        return _json(self.server.faults.to_json())

    async def state(self, request: web.Request) -> web.Response:
        """The engine's live state, for a sim started as a separate process."""
        s = self.server
        return _json(
            {
                "requests_running": s.requests_running,
                "requests_waiting": s.requests_waiting,
                "kv_cache_usage": s.kv_cache_usage,
                "preemptions_total": s.preemptions_total,
                "records": len(s.records),
            }
        )

    async def record(self, request: web.Request) -> web.Response:
        """One truth record as JSON (404 when unknown)."""
        record = self.server.record_for(request.match_info["response_id"])
        if record is None:
            return _json(error_body(404, "No record with that response id."), status=404)
        return _json(record.to_json())
