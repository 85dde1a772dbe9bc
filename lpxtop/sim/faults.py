"""Faults the simulated server can inject, set at start-up, from Python or over HTTP.

What each one does on the wire (generation requests, /v1/chat/completions and /v1/completions):
- fail_rate: that share of requests gets HTTP 500 with an OpenAI-style error JSON.
- api_key: every /v1/* request needs `Authorization: Bearer <key>`, else HTTP 401.
- rate_limit: HTTP 429 with `Retry-After: 2`.
- forbidden: HTTP 403.
- cut_after_tokens=K: after K tokens the connection is closed mid-body, with no finish chunk and no [DONE].
- stall_after_tokens=K, stall_s: after K tokens nothing is sent for stall_s seconds; the connection
  stays open, then the stream goes on.
- error_event_after_tokens=K: after K tokens a `data: {"error": {...}}` event is sent and the stream ends
  cleanly without [DONE] (what llama.cpp does).
- first_token_delay_ms: the request's first token comes that much later (its prefill is held back
  without slowing the other requests).
- bad_json: one malformed `data:` line is sent right before the first content chunk.
- empty: the request finishes ("stop") without any token: a finish-only chunk (`delta: {}`).
- slow_headers_s: the response headers (or error) are sent that many seconds late.
- tool_fault: "no_tool_call", "bad_tool_args" or "tool_args_schema" for a request with tools (sim/tools.py);
  "requires_action" for the simulated Coze bot (its tool is a client-side plugin, sim/coze.py).

The simulated agent platforms (sim/dify.py, sim/difyworkflow.py, sim/coze.py) say in their docstrings
what each fault does to them.

`count=N` on set() makes the given faults apply to the next N generation requests only, on top of the
standing ones; this is how a test makes exactly one request faulty.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from lpxtop.sim.config import SimConfig
from lpxtop.sim.toolcall_options import TOOL_FAULTS


@dataclass(frozen=True)
class Faults:
    """The faults that apply to one request (or the standing ones)."""

    fail_rate: float = 0.0
    api_key: str | None = None
    rate_limit: bool = False
    forbidden: bool = False
    cut_after_tokens: int | None = None
    stall_after_tokens: int | None = None
    stall_s: float = 30.0
    error_event_after_tokens: int | None = None
    first_token_delay_ms: float = 0.0
    bad_json: bool = False
    empty: bool = False
    slow_headers_s: float = 0.0
    tool_fault: str | None = None

    @classmethod
    def from_config(cls, config: SimConfig) -> Faults:
        """The start-up faults written in a SimConfig."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})

    def active(self) -> list[str]:
        """Names of the faults that differ from 'no fault' (api_key included), for records and logs."""
        clean = Faults(stall_s=self.stall_s)
        return [
            f.name
            for f in dataclasses.fields(self)
            if f.name != "stall_s" and getattr(self, f.name) != getattr(clean, f.name)
        ]

    def to_json(self) -> dict[str, Any]:
        """JSON form; the API key itself is never shown, only whether one is set."""
        data = dataclasses.asdict(self)
        data["api_key"] = "set" if self.api_key else None
        return data


FAULT_NAMES = tuple(f.name for f in dataclasses.fields(Faults))
PLATFORM_TOOL_FAULTS = ("requires_action",)  # the Coze bot's only (an OpenAI-style request ignores it)
_OPTIONAL_INT = ("cut_after_tokens", "stall_after_tokens", "error_event_after_tokens")
_FLOATS = ("fail_rate", "stall_s", "first_token_delay_ms", "slow_headers_s")
_BOOLS = ("rate_limit", "forbidden", "bad_json", "empty")


def validate_faults(values: dict[str, Any]) -> dict[str, Any]:
    """Check names and types of fault settings; return them normalized or raise ValueError."""
    clean: dict[str, Any] = {}
    for name, value in values.items():
        if name not in FAULT_NAMES:
            raise ValueError(f"unknown fault {name!r}; known faults: {', '.join(FAULT_NAMES)}")
        if name in _OPTIONAL_INT:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a token count >= 0 or null")
        elif name in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0")
            if name == "fail_rate" and value > 1:
                raise ValueError("fail_rate must be between 0 and 1")
            value = float(value)
        elif name in _BOOLS:
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false")
        elif name == "api_key" and value is not None and (not isinstance(value, str) or not value):
            raise ValueError("api_key must be a non-empty string or null")
        elif name == "tool_fault" and value is not None:
            known = (*TOOL_FAULTS, *PLATFORM_TOOL_FAULTS)
            if value not in known:
                raise ValueError(f"tool_fault must be one of {', '.join(known)} or null")
        clean[name] = value
    return clean


class FaultState:
    """Standing faults plus one-shot overrides for the next N requests. Thread-safe.

    Tests call set() from their own thread while the server's loop calls take().
    """

    def __init__(self, config: SimConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._base = Faults.from_config(config)
        # Each entry: [settings, remaining requests]; bounded so a runaway caller cannot grow it.
        self._pending: deque[list[Any]] = deque(maxlen=64)

    def set(self, count: int | None = None, **values: Any) -> None:
        """Change the standing faults, or with count=N apply `values` to the next N requests only."""
        clean = validate_faults(values)
        with self._lock:
            if count is None:
                self._base = dataclasses.replace(self._base, **clean)
            else:
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise ValueError("count must be a positive number of requests")
                self._pending.append([clean, count])

    def reset(self) -> None:
        """Back to the start-up faults; pending one-shot faults are dropped."""
        with self._lock:
            self._base = Faults.from_config(self._config)
            self._pending.clear()

    def peek(self) -> Faults:
        """The standing faults (for requests that must not use up a one-shot fault, like /v1/models)."""
        with self._lock:
            return self._base

    def take(self) -> Faults:
        """The faults for one generation request, using up one turn of the oldest one-shot override."""
        with self._lock:
            if not self._pending:
                return self._base
            entry = self._pending[0]
            entry[1] -= 1
            if entry[1] <= 0:
                self._pending.popleft()
            return dataclasses.replace(self._base, **entry[0])

    def to_json(self) -> dict[str, Any]:
        """Standing faults and pending one-shot overrides, for GET /sim/faults."""
        with self._lock:
            pending = [
                {"count": remaining, **{k: ("set" if k == "api_key" and v else v) for k, v in values.items()}}
                for values, remaining in self._pending
            ]
            return {"faults": self._base.to_json(), "pending": pending}
