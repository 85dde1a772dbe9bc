"""Checking a tool call's arguments against the tool's JSON schema: the subset tool schemas use.

Tool schemas (OpenAI function `parameters`) are small: an object with typed `properties`, a `required`
list, `enum`s, arrays with `items`, sometimes `additionalProperties`, `minimum`/`maximum`. This module
checks exactly these keywords, with JSON Schema's meaning (an integer is a number without a fraction,
1.0 included; a boolean is neither; `enum` compares JSON values, so `1` does not match `true`). Other
keywords (`pattern`, `format`, `$ref`, `anyOf` …) are not checked, and `unchecked_keywords` names them
so the caller can say the check was partial.

Why not the `jsonschema` library: it is not a dependency of lpxtop, and importing it would cost more
than all of this module's work in a 5-minute window. Measured with `python benchmarks/agent_schema.py`
on the 2-core VM (python 3.11, jsonschema 4.26.0, the machine shared and busy): importing jsonschema
46 ms and +8.2 MB RSS (lpxtop's whole dashboard is ~52 MB); one validation of the default tools'
arguments 8.1 µs with a validator built once, this module 3.2 µs. The tests hold this module to the
library: a differential test over generated schemas and instances (tests/unit/test_agent_schema.py)
must agree on valid/invalid.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

CHECKED_KEYWORDS = frozenset({
    "type", "properties", "required", "enum", "items", "additionalProperties", "minimum", "maximum",
})
# Keywords that describe and never constrain: not worth a "partial check" note.
ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$schema", "$id", "$comment"})
MAX_ERRORS = 5
MAX_DEPTH = 32
# JSON nested deeper than this (tool-call arguments, a tools file) is refused before any recursive
# work: Python's own JSON functions raise RecursionError somewhere below ~1000 levels.
MAX_JSON_DEPTH = 64


def deeper_than(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests lists and objects more than `limit` levels deep (no recursion)."""
    level: list[object] = [value]
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        nested: list[object] = []
        for item in level:
            if isinstance(item, dict):
                nested.extend(v for v in item.values() if isinstance(v, (dict, list)))
            elif isinstance(item, list):
                nested.extend(v for v in item if isinstance(v, (dict, list)))
        level = nested
    return False


def validate(instance: object, schema: object) -> list[str]:
    """The ways `instance` breaks `schema` (at most MAX_ERRORS), [] when it is valid."""
    errors: list[str] = []
    for error in _errors(instance, schema, "$", 0):
        errors.append(error)
        if len(errors) >= MAX_ERRORS:
            break
    return errors


def unchecked_keywords(schema: object) -> set[str]:
    """Keywords in `schema` (at any depth) that `validate` does not check."""
    found: set[str] = set()
    _collect_unchecked(schema, found, 0)
    return found


def _collect_unchecked(schema: object, found: set[str], depth: int) -> None:
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return
    for key in schema:
        if key not in CHECKED_KEYWORDS and key not in ANNOTATIONS:
            found.add(key)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for sub in properties.values():
            _collect_unchecked(sub, found, depth + 1)
    for key in ("items", "additionalProperties"):
        _collect_unchecked(schema.get(key), found, depth + 1)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if math.isfinite(value) and value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: object, name: str) -> bool:
    actual = _json_type(value)
    return actual == name or (name == "number" and actual == "integer")


def _json_equal(a: object, b: object) -> bool:
    """Equality of JSON values: booleans are not numbers, 1 == 1.0, containers compared deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _errors(value: object, schema: object, path: str, depth: int) -> Iterator[str]:
    if schema is False:
        yield f"{path}: no value is allowed here"
        return
    if schema is True or not isinstance(schema, dict) or depth > MAX_DEPTH:
        return
    kind = schema.get("type")
    if isinstance(kind, str):
        kinds = [kind]
    elif isinstance(kind, list):
        kinds = [k for k in kind if isinstance(k, str)]
    else:
        kinds = []
    if kinds and not any(_is_type(value, k) for k in kinds):
        yield f"{path}: expected {' or '.join(kinds)}, got {_json_type(value)}"
        return
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_json_equal(value, choice) for choice in enum):
        yield f"{path}: {_short(value)} is not one of {_short(enum)}"
    if _is_type(value, "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if _is_number(low) and value < low:  # type: ignore[operator]
            yield f"{path}: {value} is below the minimum {low}"
        if _is_number(high) and value > high:  # type: ignore[operator]
            yield f"{path}: {value} is above the maximum {high}"
    if isinstance(value, dict):
        yield from _object_errors(value, schema, path, depth)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                yield from _errors(item, items, f"{path}[{i}]", depth + 1)


def _object_errors(value: dict, schema: dict, path: str, depth: int) -> Iterator[str]:
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if isinstance(name, str) and name not in value:
                yield f"{path}: missing required property {name!r}"
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for name, sub in properties.items():
        if name in value:
            yield from _errors(value[name], sub, f"{path}.{name}", depth + 1)
    extra = schema.get("additionalProperties")
    if extra is False:
        for name in value:
            if name not in properties:
                yield f"{path}: unexpected property {name!r}"
    elif isinstance(extra, dict):
        for name, item in value.items():
            if name not in properties:
                yield from _errors(item, extra, f"{path}.{name}", depth + 1)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
