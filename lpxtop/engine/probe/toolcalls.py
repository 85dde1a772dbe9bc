"""Reassembling streamed tool calls (`choices[].delta.tool_calls`) into whole calls.

Servers disagree on the shape, and client parsers break on each difference (dropped or duplicated
arguments are a long-standing class of bug). Every shape below is handled, and each has a real capture
or a simulator capture in tests/fixtures/toolcalls/ (see SOURCES.md there):

- `id`, `type` and `function.name` on the first delta only (OpenAI, vLLM), or repeated on every delta
  (llama.cpp before its PR 13800): a repeated name or id is the same call, never concatenated;
- `function.arguments` split anywhere: inside a string, inside a `\\u` escape, between the two halves of
  a surrogate pair (joined back into one character at the end);
- several calls in one chunk, told apart by `index`;
- a first delta that carries the name, the id and the opening `{` together (llama.cpp, vLLM's named
  tool choice): its arguments fragment is kept, not dropped;
- an `"arguments": "{}"` placeholder on the naming delta followed by the real arguments (seen from
  gateways that translate other providers' streams): the placeholder is dropped when more arguments follow,
  instead of giving `{}{"city": ...}`;
- a delta without `index` (some servers, for a single call): it continues the last call unless it carries
  a new id.

The assembler only reassembles; `lpxtop.engine.agent.step` judges the result (valid JSON, schema).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

PLACEHOLDER_ARGS = "{}"
# The arguments of one answer's calls, all together, are kept up to this many characters: past it the
# call that overflowed is marked `truncated` and nothing more of any call is kept (a runaway stream
# cannot grow lpxtop's memory). The step judges a truncated call a `bad_tool_args` (engine/agent/step.py).
MAX_ARGUMENT_CHARS = 1 << 20
MAX_CALLS = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class ToolCall:
    """One tool call as reassembled so far; `first_ns` / `name_ns` / `last_ns` are arrival times.

    The argument fragments wait in a list and are joined when the call is read (`ToolCallAssembler.ordered`,
    `arguments_text`): adding each to a string would copy the arguments so far once per fragment.
    """

    index: int
    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: str = ""
    first_ns: int | None = None
    name_ns: int | None = None
    last_ns: int | None = None
    fragments: int = 0
    placeholder: bool = False  # the arguments so far are a `{}` placeholder from the naming delta
    too_deep: bool = False  # arguments sent as an object nested too deep to write back as JSON text
    truncated: bool = False  # fragments were dropped at the bound (MAX_ARGUMENT_CHARS): the arguments are cut
    parts: list[str] = field(default_factory=list, repr=False, compare=False)  # fragments not yet joined

    def settle(self) -> None:
        """Join the waiting fragments onto `arguments`."""
        if self.parts:
            self.arguments += "".join(self.parts)
            self.parts.clear()

    @property
    def arguments_text(self) -> str:
        """The arguments, with surrogate halves split across fragments joined back into characters."""
        self.settle()
        text = self.arguments
        if _SURROGATE.search(text):
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return text


@dataclass
class ToolCallAssembler:
    """Feed it each chunk's `delta.tool_calls` with the chunk's arrival time; read `calls` at the end."""

    calls: dict[int, ToolCall] = field(default_factory=dict)
    quirks: set[str] = field(default_factory=set)
    first_name_ns: int | None = None  # the first delta that named a function
    last_ns: int | None = None  # the last delta that carried anything for a call
    chars: int = 0  # argument characters kept, all calls together (at most MAX_ARGUMENT_CHARS)
    overflowed: bool = False  # the bound was reached: no more arguments are kept

    def feed(self, tool_calls: object, t_ns: int) -> bool:
        """Take one delta's `tool_calls` list; True when it carried anything (a token event for TTFT)."""
        if not isinstance(tool_calls, list):
            return False
        carried = False
        for position, item in enumerate(tool_calls):
            if isinstance(item, dict) and self._take(item, position, len(tool_calls), t_ns):
                carried = True
        if carried:
            self.last_ns = t_ns
        return carried

    def ordered(self) -> list[ToolCall]:
        """The calls by index, their arguments joined."""
        calls = [self.calls[i] for i in sorted(self.calls)]
        for call in calls:
            call.settle()
        return calls

    def _take(self, item: dict, position: int, count: int, t_ns: int) -> bool:
        call = self._call_for(item, position, count)
        if call is None:
            return False
        if call.first_ns is None:
            call.first_ns = t_ns
        call.last_ns = t_ns
        carried = False
        new_id = item.get("id")
        if isinstance(new_id, str) and new_id:
            if call.id is None:
                call.id = new_id
            elif new_id != call.id:
                self.quirks.add("id_changed")  # the first id stays: it is the one an answer must echo
            else:
                self.quirks.add("repeated_id")
            carried = True
        kind = item.get("type")
        if isinstance(kind, str) and kind and call.type is None:
            call.type = kind
        function = item.get("function")
        if isinstance(function, dict):
            carried = self._take_name(call, function.get("name"), t_ns) or carried
            carried = self._take_arguments(call, function.get("arguments")) or carried
        return carried

    def _call_for(self, item: dict, position: int, count: int) -> ToolCall | None:
        index = item.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            # No usable index: a new id starts a call; otherwise the delta continues the last one
            # (or, for several calls in one delta, the position in the list tells them apart).
            self.quirks.add("missing_index")
            new_id = item.get("id")
            known_ids = {c.id for c in self.calls.values()}
            if count > 1:
                index = position
            elif self.calls and not (isinstance(new_id, str) and new_id and new_id not in known_ids):
                index = max(self.calls)
            else:
                index = (max(self.calls) + 1) if self.calls else 0
        call = self.calls.get(index)
        if call is None:
            if len(self.calls) >= MAX_CALLS:
                return None
            call = self.calls[index] = ToolCall(index=index)
        return call

    def _take_name(self, call: ToolCall, name: object, t_ns: int) -> bool:
        if not isinstance(name, str) or not name:
            return False
        if not call.name:
            call.name = name
        elif name == call.name:
            self.quirks.add("repeated_name")
        elif name.startswith(call.name):
            call.name = name  # a server that resends the growing name
            self.quirks.add("repeated_name")
        else:
            call.name += name  # a name streamed in pieces
        if call.name_ns is None:
            call.name_ns = t_ns
            if self.first_name_ns is None:
                self.first_name_ns = t_ns
        return True

    def _take_arguments(self, call: ToolCall, fragment: object) -> bool:
        if isinstance(fragment, (dict, list)):
            # A server that sends the arguments as an object instead of a JSON string (seen from some
            # gateways): keep its JSON text, as a client would have to.
            self.quirks.add("arguments_object")
            try:
                fragment = json.dumps(fragment, ensure_ascii=False)
            except RecursionError:  # nested deeper than Python's JSON goes: no arguments a tool can take
                call.too_deep = True
                return True
        if not isinstance(fragment, str):
            return False
        if fragment == "":
            return False  # the naming delta's empty arguments (or an empty token): nothing to add
        if call.placeholder:
            # `{}` came with the name, and now the real arguments follow: the placeholder was not part of them.
            call.settle()
            self.chars -= len(call.arguments)
            call.arguments = ""
            call.placeholder = False
            self.quirks.add("placeholder_args")
        elif call.fragments == 0 and fragment.strip() == PLACEHOLDER_ARGS and call.name_ns is not None:
            call.placeholder = True
        if self.overflowed or self.chars + len(fragment) > MAX_ARGUMENT_CHARS:
            # Past the bound nothing more is kept, not even a small fragment that would still fit: the
            # call's arguments would then be its start and its end with the middle missing.
            self.overflowed = True
            call.truncated = True
            return True
        call.parts.append(fragment)
        self.chars += len(fragment)
        call.fragments += 1
        return True
