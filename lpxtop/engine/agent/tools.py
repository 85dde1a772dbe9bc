"""The tools an agent step offers the model, the question it asks, and what each tool "returns".

The default set is three small, realistic functions with JSON schemas. A file (`tools_file`, JSON) can
replace it: either a list of OpenAI tool objects (`{"type": "function", "function": {"name",
"description", "parameters"}}`), or an object `{"tools": [...], "prompt": "...", "results": {"name": any
JSON}}` where `prompt` is the user's question and `results` what each tool returns (default: a short
JSON object naming the tool and echoing its arguments).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lpxtop.engine.agent.schema import MAX_JSON_DEPTH, deeper_than

MAX_TOOLS_FILE_BYTES = 1 << 20
TOOL_CHOICES = ("required", "auto")  # or the name of one tool (a named tool choice)

DEFAULT_PROMPT = "What is the weather in Paris right now? Answer in one short sentence."
SYSTEM_PROMPT = "You are a helpful assistant. Use the tools when they help; call them with valid JSON arguments."

DEFAULT_TOOLS: tuple[dict, ...] = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the product documentation.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": 10},
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The current local time in an IANA time zone.",
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string", "description": "e.g. Europe/Paris"}},
                "required": ["timezone"],
            },
        },
    },
)
DEFAULT_RESULTS: dict[str, object] = {
    "get_weather": {"city": "Paris", "temperature_c": 18, "conditions": "light rain", "wind_kmh": 12},
    "search_docs": {"results": [{"title": "Getting started", "snippet": "Install with pip, then run lpxtop."}]},
    "get_time": {"timezone": "Europe/Paris", "time": "14:05"},
}


@dataclass(frozen=True, eq=False)
class ToolSet:
    """Tools (OpenAI tool objects), the user's question, and each tool's canned result."""

    tools: tuple[dict, ...] = DEFAULT_TOOLS
    prompt: str = DEFAULT_PROMPT
    results: Mapping[str, object] = field(default_factory=lambda: dict(DEFAULT_RESULTS))
    source: str = "built-in"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t["function"]["name"] for t in self.tools)

    def schema_for(self, name: str) -> dict | None:
        """The `parameters` schema of tool `name`; None for an unknown tool."""
        for tool in self.tools:
            if tool["function"]["name"] == name:
                params = tool["function"].get("parameters")
                return params if isinstance(params, dict) else {}
        return None

    def result_for(self, name: str, arguments: object) -> str:
        """What the tool returns, as the JSON text of a `tool` message."""
        if name in self.results:
            return json.dumps(self.results[name], ensure_ascii=False)
        return json.dumps({"tool": name, "ok": True, "arguments": arguments}, ensure_ascii=False)

    def tool_choice(self, choice: str) -> str | dict:
        """The request's `tool_choice` for a setting: "required", "auto", or a named function."""
        if choice in TOOL_CHOICES:
            return choice
        return {"type": "function", "function": {"name": choice}}


def check_tool_choice(choice: str, tools: ToolSet) -> None:
    """Raise ValueError unless `choice` is "required", "auto" or the name of one of `tools`."""
    if choice in TOOL_CHOICES or choice in tools.names:
        return
    raise ValueError(
        f"tool_choice {choice!r}: use \"required\", \"auto\" or the name of a tool ({', '.join(tools.names)})"
    )


def load_tool_set(path: str | Path | None) -> ToolSet:
    """The default tool set (path None) or the one in a JSON file; ValueError says what is wrong."""
    if path is None:
        return ToolSet()
    path = Path(path)
    try:
        raw = path.read_bytes()[: MAX_TOOLS_FILE_BYTES + 1]
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the tools file: {exc.strerror or exc}") from None
    if len(raw) > MAX_TOOLS_FILE_BYTES:
        raise ValueError(f"{path}: the tools file is larger than {MAX_TOOLS_FILE_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: the tools file is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    return tool_set_from_json(data, str(path))


def tool_set_from_json(data: Any, source: str = "tools") -> ToolSet:
    """A ToolSet from a list of tools or a `{"tools", "prompt", "results"}` object.

    Nothing nested deeper than MAX_JSON_DEPTH levels is taken: no tool needs it, and it would reach
    Python's recursion limit when a request is written or an answer checked.
    """
    if deeper_than(data):
        raise ValueError(f"{source}: the tools file is nested deeper than {MAX_JSON_DEPTH} levels")
    prompt = DEFAULT_PROMPT
    results: dict[str, object] = {}
    if isinstance(data, dict):
        unknown = set(data) - {"tools", "prompt", "results"}
        if unknown:
            raise ValueError(f"{source}: unknown key(s) {', '.join(sorted(unknown))} (expected tools, prompt, results)")
        if "prompt" in data:
            if not isinstance(data["prompt"], str) or not data["prompt"].strip():
                raise ValueError(f"{source}: 'prompt' must be a non-empty string")
            prompt = data["prompt"]
        if "results" in data:
            if not isinstance(data["results"], dict):
                raise ValueError(f"{source}: 'results' must be an object of tool name -> result")
            results = dict(data["results"])
        data = data.get("tools")
    tools = _check_tools(data, source)
    names = [t["function"]["name"] for t in tools]
    for name in results:
        if name not in names:
            raise ValueError(f"{source}: 'results' names {name!r}, which is not one of the tools ({', '.join(names)})")
    if not results and tools == DEFAULT_TOOLS:
        results = dict(DEFAULT_RESULTS)
    return ToolSet(tools=tools, prompt=prompt, results=results, source=source)


def _check_tools(data: Any, source: str) -> tuple[dict, ...]:
    if not isinstance(data, list) or not data:
        raise ValueError(f"{source}: expected a non-empty list of tools ({{\"type\": \"function\", \"function\": ...}})")
    tools: list[dict] = []
    seen: set[str] = set()
    for i, tool in enumerate(data):
        where = f"{source}: tool #{i + 1}"
        if not isinstance(tool, dict) or not isinstance(tool.get("function"), dict):
            raise ValueError(f"{where}: expected {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}")
        if tool.get("type", "function") != "function":
            raise ValueError(f"{where}: only \"type\": \"function\" tools are supported")
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name):
            raise ValueError(f"{where}: 'name' must be letters, digits, _ or - (got {name!r})")
        if name in seen:
            raise ValueError(f"{where}: two tools are named {name!r}")
        seen.add(name)
        params = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ValueError(f"{where} ({name}): 'parameters' must be a JSON schema object")
        tools.append({"type": "function", "function": {**function, "parameters": params}})
    return tuple(tools)


def conversation(tools: ToolSet, prompt: str) -> list[dict]:
    """Call 1's messages: a short system message and the user's question."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]


def tool_names(tools: Sequence[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]
