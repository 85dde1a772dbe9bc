"""The tool-call shapes and faults a SimConfig may name (what each one sends: sim/tools.py).

In a module of their own, below the config, the faults and the tool-call streaming that all check or
use them, so that none of those has to import another to know the names.
"""

from __future__ import annotations

TOOL_CALL_SHAPES = ("vllm", "openai", "name_with_args", "repeated", "placeholder", "parallel", "whole")
TOOL_FAULTS = ("no_tool_call", "bad_tool_args", "tool_args_schema")
