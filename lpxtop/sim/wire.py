"""What goes on the wire: vLLM 0.32's chunk, response and error JSON shapes, and the SSE framing.

The shapes (keys and their order) copy tests/fixtures/sse/vllm-0.32.0-chat-stream-include-usage.txt.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from typing import Any

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def new_response_id(api: str) -> str:
    """`chatcmpl-<16 hex>` for chat, `cmpl-<16 hex>` for completions, as vLLM names them."""
    prefix = "chatcmpl" if api == "chat" else "cmpl"
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def compact_json(payload: Any) -> str:
    """JSON without spaces, the way vLLM writes it."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def sse(payload: dict[str, Any] | str) -> bytes:
    """One SSE event: `data: <compact json>` and a blank line; a str payload is sent as it is."""
    text = payload if isinstance(payload, str) else compact_json(payload)
    return f"data: {text}\n\n".encode()


def system_fingerprint(version: str, model: str) -> str:
    """vLLM's `vllm-<version>-<8 hex>`; the hex is stable per model so it looks like a build id."""
    return f"vllm-{version}-{zlib.crc32(model.encode()):08x}"


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}."""
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "Error"),
            "param": param,
            "code": status,
        }
    }


def openai_error_body(message: str, error_type: str, code: str | None) -> dict[str, Any]:
    """OpenAI's own error shape (string codes), used for 401/403/429 as a gateway would send them."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


class ChunkMaker:
    """Builds the chunk dicts of one streamed response (chat or completions)."""

    def __init__(self, api: str, response_id: str, model: str, fingerprint: str) -> None:
        self.api = api
        self.response_id = response_id
        self.model = model
        self.fingerprint = fingerprint
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if api == "chat" else "text_completion"

    def _head(self) -> dict[str, Any]:
        return {"id": self.response_id, "object": self.object, "created": self.created, "model": self.model}

    def role(self) -> dict[str, Any]:
        """The role-only first chunk of a chat stream."""
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return {**self._head(), "choices": [choice], "prompt_token_ids": None, "prompt_text": None}

    def content(self, text: str, finish_reason: str | None = None) -> dict[str, Any]:
        """A content chunk; with finish_reason it is the finish chunk (vLLM puts the last token in it)."""
        if self.api == "chat":
            choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = finish_reason
        if finish_reason is not None or self.api != "chat":
            choice["stop_reason"] = None
        choice["token_ids"] = None
        return {**self._head(), "choices": [choice]}

    def finish_only(self, finish_reason: str) -> dict[str, Any]:
        """A finish chunk that carries no token (`delta: {}`, as OpenAI and llama-server send it)."""
        if self.api == "chat":
            choice: dict[str, Any] = {"index": 0, "delta": {}, "logprobs": None}
        else:
            choice = {"index": 0, "logprobs": None}
        choice["finish_reason"] = finish_reason
        return {**self._head(), "choices": [choice]}

    def usage(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        """The usage chunk (`"choices": []`) sent when stream_options.include_usage is true."""
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }
        return {**self._head(), "choices": [], "usage": usage, "system_fingerprint": self.fingerprint}

    def bad_json(self) -> str:
        """A data line cut short in the middle of its JSON."""
        return compact_json(self.content("x"))[:60]

    def full_response(
        self, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int
    ) -> dict:
        """The single JSON body of a non-streaming response."""
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        }
        if self.api == "chat":
            message = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": None,
            }
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
            return {
                "id": self.response_id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": usage,
                "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        return {
            "id": self.response_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage,
            "kv_transfer_params": None,
        }
