"""The agent platforms' settings: `api = "coze"` with its bot, `api = "dify-workflow"` with its inputs (a
table, or --inputs-file), and each mistake named with its line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lpxtop.checks import ConfigError
from lpxtop.config import load_config_file, read_inputs_file, settle_agent_settings
from lpxtop.model.endpoint import PLATFORM_APIS, EndpointConfig


def test_platform_endpoints_from_a_file(tmp_path):
    path = tmp_path / "lpxtop.toml"
    path.write_text('[[endpoint]]\nurl = "https://api.coze.com"\napi = "coze"\nbot_id = "7379462189365198898"\n'
                    'api_key_env = "COZE_API_TOKEN"\n\n'
                    '[[endpoint]]\nurl = "127.0.0.1:5001"\napi = "dify-workflow"\n'
                    'inputs = {query = "{prompt}", city = "Paris", days = 3, flags = {metric = true}}\n')
    bot, flow = load_config_file(path).endpoints
    assert bot.api == "coze" and bot.bot_id == "7379462189365198898" and bot.probes == ("agent",) and bot.is_platform
    assert bot.to_json()["bot_id"] == "7379462189365198898" and "inputs" not in bot.to_json()
    assert flow.inputs == (("query", "{prompt}"), ("city", "Paris"), ("days", 3), ("flags", {"metric": True}))
    assert flow.to_json()["inputs"] == ["city", "days", "flags", "query"]  # the names only: values are user data
    assert set(PLATFORM_APIS) == {"dify", "dify-workflow", "coze"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('api = "coze"', "needs the bot to probe: --bot-id ID"),
        ('api = "coze"\nbot_id = "has space"', "without spaces"),
        ('api = "coze"\nbot_id = "7"\nprobe = ["chat", "agent"]', "a Coze bot with agent steps only"),
        ('api = "dify-workflow"\ninputs = {when = 1979-05-27T07:32:00Z}', "a value is not JSON"),
        ('api = "dify-workflow"\ninputs = "query"', "must be a table"),
        ('api = "cozee"', 'must be one of "chat", "completions", "dify", "dify-workflow", "coze"'),
    ],
)
def test_platform_mistakes_name_the_line(tmp_path, text, message):
    path = tmp_path / "lpxtop.toml"
    path.write_text(f'[[endpoint]]\nurl = "127.0.0.1:8000"\n{text}\n')
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    assert message in str(err.value) and f"{path}:" in str(err.value)


def test_inputs_file(tmp_path):
    good = tmp_path / "inputs.json"
    good.write_text(json.dumps({"query": "{prompt}", "n": [1, 2]}))
    assert read_inputs_file(str(good)) == (("query", "{prompt}"), ("n", [1, 2]))
    for content, message in (("[1, 2]", "must be an object"), ("{", "not JSON"), ("[" * 100 + "]" * 100, "deeper")):
        bad = tmp_path / "bad.json"
        bad.write_text('{"a": ' + content + "}" if message == "deeper" else content)
        with pytest.raises(ConfigError, match=message):
            read_inputs_file(str(bad))
    with pytest.raises(ConfigError, match="cannot read it"):
        read_inputs_file(str(tmp_path / "missing.json"))
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"a": "x" * (1 << 20)}))
    with pytest.raises(ConfigError, match="larger than"):
        read_inputs_file(str(huge))


def test_settle_sets_a_platform_to_agent_steps():
    flow = settle_agent_settings(EndpointConfig(name="f", url="http://h/v1", api="dify-workflow"))
    assert flow.probes == ("agent",)
    with pytest.raises(ValueError, match="--bot-id"):
        settle_agent_settings(EndpointConfig(name="c", url="http://h/v1", api="coze"))


def test_command_line_flags(tmp_path):
    inputs = tmp_path / "inputs.json"
    inputs.write_text('{"question": "{prompt}"}')

    def lpxtop(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lpxtop", *args], capture_output=True, text=True, timeout=60)

    missing = lpxtop("once", "127.0.0.1:9", "--api", "coze")
    assert missing.returncode == 2 and "--bot-id" in missing.stderr
    bad_file = lpxtop("once", "127.0.0.1:9", "--api", "dify-workflow", "--inputs-file", str(tmp_path / "nope.json"))
    assert bad_file.returncode == 2 and "--inputs-file" in bad_file.stderr and "cannot read it" in bad_file.stderr
    help_text = lpxtop("--help").stdout
    assert "--bot-id" in help_text and "--inputs-file" in help_text and "dify-workflow" in help_text


def test_a_workflow_step_with_its_nodes_survives_a_recording():
    from lpxtop.model.agent import AgentStep, AgentStepEvent
    from lpxtop.model.platform import AgentNode
    from lpxtop.record.codec import Decoder, Encoder, record_types
    from lpxtop.record.export import agent_step_row
    from lpxtop.record.records import STREAM_TYPES

    step = AgentStep(endpoint="flow", api="dify-workflow", wall_time=1.0, start_ns=5, step_ms=900.0,
                     app_latency_ms=880.0, total_tokens=12, nodes=(
                         AgentNode(title="Start", node_type="start", node_id="1", status="succeeded", start_ms=2.0,
                                   seen_ms=0.5, elapsed_ms=0.2),
                         AgentNode(title="Answer", node_type="llm", start_ms=3.0)))
    event = AgentStepEvent("flow", step)
    encoder = Encoder()
    data = encoder.encode(event)
    decoder = Decoder(encoder.layouts, record_types(STREAM_TYPES))
    assert decoder.decode(encoder.type_name(AgentStepEvent), json.loads(json.dumps(data))) == event
    row = agent_step_row(event)
    assert row["nodes"][1] == {"title": "Answer", "node_type": "llm", "node_id": None, "status": "unfinished",
                               "start_ms": 3.0, "seen_ms": None, "elapsed_ms": None, "error": None}
