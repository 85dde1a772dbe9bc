"""Answering one admitted generation request: the SSE stream (or one JSON body) plus its faults.

Every event is written with its own `await resp.write()` (no buffering, no compression), and its
perf_counter_ns() is recorded immediately before the write, so the truth record says when the bytes
left the server.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lpxtop.sim.faults import Faults
from lpxtop.sim.records import SimRecord
from lpxtop.sim.scheduler import SimRequest
from lpxtop.sim.wire import SSE_CONTENT_TYPE, ChunkMaker, compact_json, error_body, sse

if TYPE_CHECKING:
    from lpxtop.sim.server import SimServer

_TOKEN_KINDS = ("content", "empty_content", "finish", "body")


class StreamSession:
    """Turns the engine's token events for one request into the response, injecting its faults."""

    def __init__(
        self,
        server: SimServer,
        request: web.Request,
        record: SimRecord,
        faults: Faults,
        sim_request: SimRequest,
        chunks: ChunkMaker,
        include_usage: bool,
    ) -> None:
        self.server = server
        self.config = server.config
        self.request = request
        self.record = record
        self.faults = faults
        self.sim_request = sim_request
        self.chunks = chunks
        self.include_usage = include_usage
        self._resp: web.StreamResponse | None = None
        self._sent_tokens = 0
        self._stalled = False
        self._bad_json_sent = False
        self._role_sent = False

    async def stream(self) -> web.StreamResponse:
        """Serve the request as text/event-stream."""
        resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": SSE_CONTENT_TYPE,
                "Cache-Control": "no-cache",
                "X-Sim-Response-Id": self.record.response_id,
            },
        )
        self._resp = resp
        try:
            await resp.prepare(self.request)
            await self._stream_events()
        except ConnectionError:
            self.record.outcome = "client_disconnect"
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client goes away.
            if self.record.outcome == "pending":
                self.record.outcome = "client_disconnect"
            raise
        finally:
            self._finish()
        return resp

    async def respond_once(self) -> web.StreamResponse:
        """Serve the request as one JSON body once generation has finished."""
        f = self.faults
        words = self.server.words
        text_parts: list[str] = []
        reason = None
        try:
            while reason is None:
                event = await self.sim_request.events.get()
                if event[0] == "admitted":
                    continue
                if event[0] == "finished":
                    return self._cut(outcome="aborted")  # the server is stopping
                _, n, _, reason = event
                text_parts.extend(words.token() for _ in range(n))
            if f.stall_after_tokens is not None:
                await asyncio.sleep(f.stall_s)
            if f.cut_after_tokens is not None:
                return self._cut()
            if f.error_event_after_tokens is not None:
                return self._error_response(500, "Injected error (lpxtop sim error_event_after_tokens).")
            completion = 0 if f.empty else self.sim_request.generated
            text = "" if f.empty else "".join(text_parts)
            self.record.completion_tokens = completion
            self.record.finish_reason = reason
            body_text = compact_json(
                self.chunks.full_response(text, reason, self.record.prompt_tokens, completion)
            )
            if f.bad_json:
                body_text = body_text[: max(1, len(body_text) // 2)]
            self.record.events.append((time.perf_counter_ns(), "body", completion))
            self.record.outcome = "ok"
            return web.Response(
                body=body_text.encode(),
                headers={"Content-Type": "application/json", "X-Sim-Response-Id": self.record.response_id},
            )
        except asyncio.CancelledError:
            if self.record.outcome == "pending":
                self.record.outcome = "client_disconnect"
            raise
        finally:
            self._finish()

    async def _stream_events(self) -> None:
        cfg = self.config
        f = self.faults
        chunks = self.chunks
        words = self.server.words
        if cfg.role_chunk_at == "received":
            await self._send_role()
        pending_n = 0
        pending_text = ""
        carry = ""  # text held back by an empty (split UTF-8) chunk
        while True:
            event = await self.sim_request.events.get()
            if event[0] == "admitted":
                if cfg.role_chunk_at == "admitted":
                    await self._send_role()
                continue
            if event[0] == "finished":
                # Only a stopping server ends a request under its handler: drop the connection.
                self._cut(outcome="aborted")
                return
            _, n, _, finish = event
            await self._send_role()
            pending_n += n
            if not f.empty:
                pending_text += "".join(words.token() for _ in range(n))
            if finish is None and pending_n < cfg.tokens_per_chunk:
                continue
            if await self._fault_ends_stream():
                return
            if f.bad_json and not self._bad_json_sent:
                self._bad_json_sent = True
                await self._send("bad_json", 0, chunks.bad_json())
            text, carry = carry + pending_text, ""
            if finish is not None:
                if f.empty:  # no token at all: the stream ends with a finish-only chunk
                    await self._send("finish", 0, chunks.finish_only(finish))
                else:
                    await self._send("finish", pending_n, chunks.content(text, finish))
                self.record.finish_reason = finish
                break
            if (
                pending_n == 1
                and cfg.empty_chunk_rate > 0
                and self.server.rng.random() < cfg.empty_chunk_rate
            ):
                carry = text
                await self._send("empty_content", 1, chunks.content(""))
            else:
                await self._send("content", pending_n, chunks.content(text))
            pending_n, pending_text = 0, ""

        completion = 0 if f.empty else self.sim_request.generated
        self.record.completion_tokens = completion
        if self.include_usage:
            if await self._fault_ends_stream():
                return
            await self._send("usage", 0, chunks.usage(self.record.prompt_tokens, completion))
        if await self._fault_ends_stream():
            return
        await self._send("done", 0, "[DONE]")
        self.record.outcome = "ok"
        await self._resp_or_fail().write_eof()

    async def _fault_ends_stream(self) -> bool:
        """Apply the 'after K tokens' faults before the next event; True when the stream is over."""
        f = self.faults
        sent = self._sent_tokens
        if f.stall_after_tokens is not None and not self._stalled and sent >= f.stall_after_tokens:
            self._stalled = True
            await asyncio.sleep(f.stall_s)
        if f.cut_after_tokens is not None and sent >= f.cut_after_tokens:
            self._cut()
            return True
        if f.error_event_after_tokens is not None and sent >= f.error_event_after_tokens:
            error: dict[str, Any] = {
                "error": {
                    "message": "Injected error (lpxtop sim error_event_after_tokens).",
                    "type": "server_error",
                    "code": 500,
                }
            }
            await self._send("error", 0, error)
            self.server.scheduler.abort(self.sim_request, reason="error")
            self.record.outcome = "error_event"
            await self._resp_or_fail().write_eof()
            return True
        return False

    def _cut(self, outcome: str = "cut") -> web.Response:
        """Close the connection now: what was written is flushed, the body is never completed."""
        self.record.outcome = outcome
        self.server.scheduler.abort(self.sim_request)
        transport = self.request.transport
        if transport is not None:
            transport.close()
        # aiohttp's attempt to finish this response meets the closed transport and is dropped quietly.
        return web.Response(status=200)

    def _error_response(self, status: int, message: str) -> web.Response:
        self.record.status = status
        self.record.outcome = f"http_{status}"
        return web.json_response(
            error_body(status, message),
            status=status,
            headers={"X-Sim-Response-Id": self.record.response_id},
            dumps=compact_json,
        )

    async def _send_role(self) -> None:
        if self.chunks.api == "chat" and not self._role_sent:
            self._role_sent = True
            await self._send("role", 0, self.chunks.role())

    async def _send(self, kind: str, n_tokens: int, payload: dict[str, Any] | str) -> None:
        data = sse(payload)
        resp = self._resp_or_fail()
        # Recorded before the write so a client that already saw these bytes also sees the record.
        event = (time.perf_counter_ns(), kind, n_tokens)
        self.record.events.append(event)
        try:
            await resp.write(data)
        except BaseException:
            self.record.events.pop()
            raise
        if kind in _TOKEN_KINDS:
            self._sent_tokens += n_tokens

    def _resp_or_fail(self) -> web.StreamResponse:
        assert self._resp is not None, "stream not started"
        return self._resp

    def _finish(self) -> None:
        self.server.scheduler.abort(self.sim_request)  # no-op when it finished normally
        self.record.t_done_ns = time.perf_counter_ns()
