"""Frozen dataclass records to compact JSON values and back, generically.

A record is written as a JSON array of its fields' values in the order of its type's *layout* (the field
names, stored once per type in the file), so a probe sample is ~400 bytes instead of ~900 with its keys.
Reading maps the file's layout onto the class as it is now: fields the file has and the class lost are
ignored, fields the class gained take their defaults (or an empty value of their type). Other developers
add fields to `Sample`, `ServerMetrics` and the snapshot while recordings exist; none of that needs a
change here, and an older file still opens.

Types are recovered from the classes' annotations (`typing.get_type_hints`): a nested record, a tuple of
records, an optional value, a mapping. Text goes through a filter on the way in (the recorder passes
`lpxtop.textsafe.redact`), so a registered secret never reaches the file whatever field carries it.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

TextFilter = Callable[[str], str]
# Strings shorter than this cannot hold a secret worth masking (textsafe.MIN_SECRET_LEN, and a bearer
# credential needs more), so the filter is skipped for them: most strings in a record are short.
MIN_FILTERED_LEN = 6


class Encoder:
    """Records to JSON-able values; remembers each record type's layout the first time it is seen."""

    def __init__(
        self,
        text: TextFilter | None = None,
        sanitizers: Mapping[type, Callable[[Any], Any]] | None = None,
    ) -> None:
        self._text = text
        self._sanitizers = dict(sanitizers or {})
        self._fields: dict[type, tuple[str, ...]] = {}
        self.layouts: dict[str, tuple[str, ...]] = {}
        self.new_layouts: list[tuple[str, tuple[str, ...]]] = []  # not yet written to the file

    def known(self, layouts: Mapping[str, Iterable[str]]) -> None:
        """Layouts the file already holds (appending to an existing recording)."""
        for name, fields in layouts.items():
            self.layouts[name] = tuple(fields)

    def type_name(self, cls: type) -> str:
        """The name a record type is stored under, registering its layout on first use."""
        fields = self._fields.get(cls)
        if fields is None:
            fields = self._fields[cls] = tuple(f.name for f in dataclasses.fields(cls))
            name = cls.__name__
            if self.layouts.get(name) != fields:
                self.layouts[name] = fields
                self.new_layouts.append((name, fields))
        return cls.__name__

    def encode(self, value: Any) -> Any:
        """A JSON-able form of `value` (records become arrays in their layout's order)."""
        kind = type(value)
        if value is None or kind is float or kind is int or kind is bool:
            return value
        if kind is str:
            text = self._text
            return text(value) if text is not None and len(value) >= MIN_FILTERED_LEN else value
        if kind is tuple or kind is list:
            return [self.encode(v) for v in value]
        fields = self._fields.get(kind)
        if fields is None and dataclasses.is_dataclass(kind):
            self.type_name(kind)
            fields = self._fields[kind]
        if fields is not None:
            sanitize = self._sanitizers.get(kind)
            if sanitize is not None:
                value = sanitize(value)
            return [self.encode(getattr(value, name)) for name in fields]
        if isinstance(value, Mapping):
            return {str(k): self.encode(v) for k, v in value.items()}
        for plain in (bool, int, float, str):  # subclasses: IntEnum, StrEnum ...
            if isinstance(value, plain):
                return self.encode(plain(value))
        return self.encode(str(value))


def record_types(roots: Iterable[type]) -> dict[str, type]:
    """Every dataclass reachable from `roots` through annotations, by the name it is stored under."""
    found: dict[str, type] = {}

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            name = tp.__name__
            if name in found:
                if found[name] is not tp:
                    raise TypeError(f"two record types are both named {name!r}: {found[name]} and {tp}")
                return
            found[name] = tp
            for hint in _hints(tp).values():
                visit(hint)
            return
        for arg in typing.get_args(tp):
            visit(arg)

    for root in roots:
        visit(root)
    return found


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        try:
            hints = typing.get_type_hints(cls)
        except NameError:  # an annotation names a record its module loads on first use (lpxtop/lazy.py)
            hints = typing.get_type_hints(cls, localns=_OnDemand(sys.modules[cls.__module__]))
        _HINTS[cls] = hints
    return hints


class _OnDemand(Mapping[str, Any]):
    """A module's names as `eval` locals, including those its `__getattr__` provides on first use."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self._module, name)
        except AttributeError:
            raise KeyError(name) from None

    def __iter__(self) -> typing.Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class DecodeError(ValueError):
    """A stored value does not fit the type it is read as."""


class Decoder:
    """JSON values back to records, by the file's layouts and the classes' current fields."""

    def __init__(self, layouts: Mapping[str, Iterable[str]], types_by_name: Mapping[str, type]) -> None:
        self._layouts = {name: tuple(fields) for name, fields in layouts.items()}
        self._types = dict(types_by_name)
        self._plans: dict[type, Callable[[Any], Any]] = {}

    def add_layouts(self, layouts: Mapping[str, Iterable[str]]) -> None:
        for name, fields in layouts.items():
            self._layouts[name] = tuple(fields)
        self._plans.clear()

    def type_for(self, name: str) -> type | None:
        return self._types.get(name)

    def decode(self, type_name: str, data: Any) -> Any:
        cls = self._types.get(type_name)
        if cls is None:
            raise DecodeError(f"unknown record type {type_name!r} (written by a newer lpxtop?)")
        return self.record(cls, data)

    def record(self, cls: type, data: Any) -> Any:
        plan = self._plans.get(cls)
        if plan is None:
            plan = self._plans[cls] = self._plan(cls)
        return plan(data)

    def _plan(self, cls: type) -> Callable[[Any], Any]:
        layout = self._layouts.get(cls.__name__)
        if layout is None:
            raise DecodeError(f"the file has no layout for {cls.__name__}")
        hints = _hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        steps: list[tuple[int, str, Callable[[Any], Any]]] = []
        for index, name in enumerate(layout):
            if name in fields:
                steps.append((index, name, self._converter(hints.get(name, Any))))
        present = {name for _, name, _ in steps}
        fill: dict[str, Any] = {}
        for name, f in fields.items():
            if name not in present and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                fill[name] = _empty(hints.get(name, Any))  # a required field this file does not have
        size = len(layout)

        def build(data: Any) -> Any:
            if not isinstance(data, list) or len(data) != size:
                raise DecodeError(f"{cls.__name__}: expected {size} values, got {_describe(data)}")
            values = dict(fill)
            for index, name, convert in steps:
                values[name] = convert(data[index])
            return cls(**values)

        return build

    def _converter(self, tp: Any) -> Callable[[Any], Any]:
        if tp is Any or tp is object:
            return _identity
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return lambda v, cls=tp: None if v is None else self.record(cls, v)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Union or origin is types.UnionType:
            options = [a for a in args if a is not type(None)]
            if len(options) == 1:
                inner = self._converter(options[0])
                return lambda v: None if v is None else inner(v)
            records = [a for a in options if isinstance(a, type) and dataclasses.is_dataclass(a)]
            if len(records) == 1:
                inner = self._converter(records[0])
                return lambda v: inner(v) if isinstance(v, list) else v
            return _identity
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                item = self._converter(args[0])
                return lambda v: tuple(item(x) for x in _list(v)) if v is not None else ()
            if args:
                items = [self._converter(a) for a in args]

                def fixed(v: Any) -> Any:
                    if v is None:
                        return None
                    if len(_list(v)) != len(items):
                        raise DecodeError(f"expected {len(items)} values, got {len(v)}")
                    return tuple(c(x) for c, x in zip(items, v))

                return fixed
            return lambda v: tuple(_list(v)) if v is not None else ()
        if origin in (list, typing.List) or origin is _abc_sequence():  # noqa: UP006
            item = self._converter(args[0]) if args else _identity
            return lambda v: [item(x) for x in _list(v)] if v is not None else []
        if origin in (dict, typing.Dict) or origin is _abc_mapping():  # noqa: UP006
            key = self._converter(args[0]) if args else _identity
            val = self._converter(args[1]) if len(args) > 1 else _identity
            return lambda v: {key(k): val(x) for k, x in _dict(v).items()} if v is not None else {}
        # Plain values are checked against their type: a crafted file's "fast" where a float belongs
        # is a DecodeError here (the record is skipped and the damage said), never a TypeError later in
        # whatever reads the record (export, replay, the dashboard).
        if tp is float:
            return _float
        if tp is int:
            return _int
        if tp is bool:
            return lambda v: v if isinstance(v, bool) else _wrong(v, "true or false")
        if tp is str:
            return lambda v: v if isinstance(v, str) else _wrong(v, "text")
        return _identity


def _identity(v: Any) -> Any:
    return v


def _wrong(v: Any, expected: str) -> Any:
    raise DecodeError(f"{type(v).__name__} where {expected} belongs")


def _float(v: Any) -> float:
    if isinstance(v, float):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:
            return float("inf") if v > 0 else float("-inf")
    return _wrong(v, "a number")


MAX_INT = 10**300  # beyond this no float holds it (1e308), and arithmetic with floats raises


def _int(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        if -MAX_INT <= v <= MAX_INT:
            return v
        return _wrong(v, "an integer a float holds")
    if isinstance(v, str) and v.lstrip("-").isdigit() and v.isascii() and len(v) < 30:
        return int(v)
    return _wrong(v, "an integer")


def _list(v: Any) -> list:
    return v if isinstance(v, list) else _wrong(v, "a list")


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else _wrong(v, "an object")


def _abc_mapping() -> Any:
    import collections.abc

    return collections.abc.Mapping


def _abc_sequence() -> Any:
    import collections.abc

    return collections.abc.Sequence


def _empty(tp: Any) -> Any:
    """A stand-in for a required field that an older file does not have."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return None
    if tp is str:
        return ""
    if tp is bool:
        return False
    if tp in (int, float):
        return tp(0)
    if origin is tuple:
        return ()
    if origin in (list,):
        return []
    return None


def _describe(data: Any) -> str:
    if isinstance(data, list):
        return f"{len(data)}"
    return type(data).__name__
