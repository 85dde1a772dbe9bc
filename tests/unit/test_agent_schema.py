"""The tool-argument check: its subset of JSON Schema, held to the `jsonschema` library by a differential test."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lpxtop.engine.agent.schema import unchecked_keywords, validate
from lpxtop.engine.agent.tools import DEFAULT_TOOLS

jsonschema = pytest.importorskip("jsonschema")

WEATHER = DEFAULT_TOOLS[0]["function"]["parameters"]
SEARCH = DEFAULT_TOOLS[1]["function"]["parameters"]


@pytest.mark.parametrize(
    ("instance", "schema", "errors"),
    [
        ({"city": "Paris"}, WEATHER, []),
        ({"city": "Paris", "unit": "celsius"}, WEATHER, []),
        ({}, WEATHER, ["$: missing required property 'city'"]),
        ({"city": "Paris", "unit": "kelvin"}, WEATHER, ["$.unit: 'kelvin' is not one of ['celsius', 'fahrenheit']"]),
        ({"city": 3}, WEATHER, ["$.city: expected string, got integer"]),
        ([], WEATHER, ["$: expected object, got array"]),
        ({"query": "x", "top_k": 0}, SEARCH, ["$.top_k: 0 is below the minimum 1"]),
        ({"query": "x", "top_k": 2.0}, SEARCH, []),  # an integer is a number without a fraction
        ({"query": "x", "top_k": 2.5}, SEARCH, ["$.top_k: expected integer, got number"]),
        ({"query": "x", "top_k": True}, SEARCH, ["$.top_k: expected integer, got boolean"]),
        ({"a": 1, "b": 2}, {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
         ["$: unexpected property 'b'"]),
        ({"xs": [1, "2"]}, {"properties": {"xs": {"type": "array", "items": {"type": "integer"}}}},
         ["$.xs[1]: expected integer, got string"]),
        (True, {"enum": [1]}, ["$: True is not one of [1]"]),  # JSON: true is not 1
        (1.0, {"enum": [1]}, []),  # but 1.0 is
    ],
)
def test_cases(instance, schema, errors):
    assert validate(instance, schema) == errors


def test_unchecked_keywords_are_named():
    schema = {"type": "object", "description": "d", "properties": {"id": {"type": "string", "pattern": "^x"}},
              "anyOf": [{}]}
    assert unchecked_keywords(schema) == {"pattern", "anyOf"}
    assert unchecked_keywords(WEATHER) == set()


def _schemas(depth: int = 2):
    leaf = st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(st.sampled_from(["string", "integer", "number", "boolean", "null", "array", "object"]),
                              st.lists(st.sampled_from(["string", "integer", "null"]), min_size=1, max_size=2,
                                       unique=True)),
            "enum": st.lists(st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from(["a", "b"]), st.none()),
                             min_size=1, max_size=3),
            "minimum": st.integers(-5, 5),
            "maximum": st.integers(-5, 5),
        },
    )
    if depth == 0:
        return leaf
    sub = _schemas(depth - 1)
    return st.one_of(
        leaf,
        st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), sub, max_size=3),
                "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True),
                "additionalProperties": st.one_of(st.booleans(), sub),
            },
        ),
        st.fixed_dictionaries({"type": st.just("array")}, optional={"items": sub}),
    )


_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-6, 6), st.floats(-6, 6, allow_nan=False, allow_infinity=False),
              st.sampled_from([1.0, 2.0, -0.0]), st.sampled_from(["a", "b", "zz"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), inner, max_size=4)),
    max_leaves=8,
)


def _agree(schema, instance) -> None:
    expected = jsonschema.Draft202012Validator(schema).is_valid(instance)
    assert (validate(instance, schema) == []) == expected, (schema, instance, validate(instance, schema))


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas(), instance=_values)
def test_agrees_with_jsonschema(schema, instance):
    """Valid or not, as the maintained library says (Draft 2020-12), for every schema of the subset."""
    _agree(schema, instance)


@pytest.mark.slow
@settings(max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas(3), instance=_values)
def test_agrees_with_jsonschema_long(schema, instance):
    """The same, deeper schemas and many more cases (-m slow)."""
    _agree(schema, instance)
