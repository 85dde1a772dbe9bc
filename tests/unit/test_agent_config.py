"""The agent probe's settings: probe kinds, durations, the tools file, and the config file's keys."""

from __future__ import annotations

import json

import pytest

from lpxtop.checks import ConfigError
from lpxtop.config import load_config_file, parse_duration_s, parse_probes, settle_agent_settings
from lpxtop.engine.agent.tools import DEFAULT_TOOLS, ToolSet, load_tool_set, tool_set_from_json
from lpxtop.model.endpoint import EndpointConfig


def test_durations_and_probe_kinds():
    assert [parse_duration_s(v) for v in ("0ms", "250ms", "1.5s", "2", 0.5, 3)] == [0.0, 0.25, 1.5, 2.0, 0.5, 3.0]
    for bad in ("fast", "-1ms", "61s", "nan", True):
        with pytest.raises(ValueError):
            parse_duration_s(bad)
    assert parse_probes("agent") == ("agent",)
    assert parse_probes("chat, agent,chat") == ("chat", "agent")
    assert parse_probes(["agent", "chat"]) == ("agent", "chat")
    for bad in ("", "tools", ["chat", 3]):
        with pytest.raises(ValueError):
            parse_probes(bad)


def test_config_file_keys(tmp_path):
    tools = tmp_path / "my-tools.json"
    tools.write_text(json.dumps({"tools": [DEFAULT_TOOLS[2]], "prompt": "What time is it in Oslo?",
                                 "results": {"get_time": {"time": "09:00"}}}))
    path = tmp_path / "lpxtop.toml"
    path.write_text('[defaults]\nprobe = "agent"\ntool_latency = "40ms"\n\n'
                    '[[endpoint]]\nurl = "127.0.0.1:8000"\nprobe = ["chat", "agent"]\ntools_file = "my-tools.json"\n'
                    'tool_choice = "get_time"\nchain_steps = 8\n\n'
                    '[[endpoint]]\nurl = "127.0.0.1:5001"\napi = "dify"\n')
    first, second = load_config_file(path).endpoints
    assert first.probes == ("chat", "agent") and first.tool_latency_s == 0.04 and first.chain_steps == 8
    assert first.tools_file == str(tmp_path / "my-tools.json") and first.tool_choice == "get_time"
    assert second.api == "dify" and second.probes == ("agent",)
    assert load_tool_set(first.tools_file).prompt == "What time is it in Oslo?"
    assert first.to_json()["probes"] == ["chat", "agent"] and first.to_json()["tool_latency_s"] == 0.04


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('probe = "agnet"', "not a probe kind"),
        ('probe = "agent"\ntool_latency = "soon"', "not a duration"),
        ('probe = "agent"\nchain_steps = 0', "between 1 and 50"),
        ('probe = "agent"\ntools_file = "missing.json"', "cannot read the tools file"),
        ('api = "dify"\nprobe = ["chat", "agent"]', "agent steps only"),
    ],
)
def test_config_file_mistakes_name_the_line(tmp_path, text, message):
    path = tmp_path / "lpxtop.toml"
    path.write_text(f'[[endpoint]]\nurl = "127.0.0.1:8000"\n{text}\n')
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_tools_file_shapes_and_mistakes():
    plain = tool_set_from_json(list(DEFAULT_TOOLS))
    assert plain.names == ToolSet().names and plain.results  # the default tools keep their canned results
    assert json.loads(plain.result_for("get_weather", {}))["city"] == "Paris"
    custom = tool_set_from_json([{"type": "function", "function": {"name": "lookup"}}])
    assert custom.schema_for("lookup") == {"type": "object", "properties": {}} and custom.schema_for("x") is None
    assert json.loads(custom.result_for("lookup", {"q": 1})) == {"tool": "lookup", "ok": True, "arguments": {"q": 1}}
    assert custom.tool_choice("required") == "required"
    assert custom.tool_choice("lookup") == {"type": "function", "function": {"name": "lookup"}}
    for bad, message in (
        ([], "non-empty list"),
        ([{"type": "function", "function": {"name": "a b"}}], "letters, digits"),
        ([{"function": {"name": "a"}}, {"function": {"name": "a"}}], "two tools are named"),
        ({"tools": list(DEFAULT_TOOLS), "results": {"nope": 1}}, "not one of the tools"),
        ({"tools": list(DEFAULT_TOOLS), "extra": 1}, "unknown key"),
    ):
        with pytest.raises(ValueError, match=message):
            tool_set_from_json(bad)
    with pytest.raises(ValueError, match="tool_choice 'nope'"):
        settle_agent_settings(EndpointConfig(name="e", url="http://x/v1", probes=("agent",), tool_choice="nope"))
