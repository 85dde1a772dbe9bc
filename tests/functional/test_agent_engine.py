"""The agent probe inside the engine and the `lpxtop` command: a second loop per endpoint, the Dify app,
`once --json`'s `endpoints[].agent`, the listeners, and the flags and config keys."""

from __future__ import annotations

import json
import time

from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.model.agent import AgentStepEvent
from lpxtop.model.events import SampleEvent
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.cli import lpxtop
from tests.support.sim import endpoint
from tests.support.waiting import wait_for


def test_engine_runs_chat_and_agent_loops_and_a_dify_app():
    with start_sim_in_thread(SimConfig(model="sim-a", ttft_ms=5, itl_ms=1, dify_tool_latency_ms=5)) as sim:
        both = endpoint(sim.url, name="both", model=None, interval_s=0.25, probes=("chat", "agent"))
        dify = endpoint(sim.url, name="app", api="dify", probes=("agent",), interval_s=0.25, chain_steps=3)
        engine = Engine([both, dify], EngineSettings(scrape_metrics=False))
        seen: list[object] = []
        engine.add_listener(seen.append)
        with engine:
            def ready():
                views = {v.name: v for v in engine.snapshot().endpoints}
                if len(views) == 2 and views["both"].agent and views["both"].agent.steps_ok >= 3 \
                        and views["both"].probes_ok >= 3 and views["app"].agent and views["app"].agent.steps_ok >= 3:
                    return views
                return None

            views = wait_for(ready)
            # paused, so that at most the step in flight lands between the reset and the snapshot that shows it
            engine.set_paused(True)
            engine.reset()  # the agent windows start over too (each had 3 steps or more)
            wait_for(lambda: all(v.agent.steps_sent <= 1 and len(v.agent.samples) <= 1
                                 for v in engine.snapshot().endpoints))
            engine.set_paused(False)
        chat_view, app_view = views["both"], views["app"]
        assert chat_view.status == "up" and chat_view.agent.status == "up"
        assert chat_view.agent.api == "chat" and chat_view.agent.chain.steps == 5
        assert chat_view.agent.step_ms.p50 > chat_view.agent.time_to_tool_call_ms.p50 > 0
        # the Dify endpoint has no chat probe: its status is the agent's, and it never asked /v1/models
        assert app_view.probes_sent == 0 and app_view.status == "up"
        assert app_view.agent.api == "dify" and app_view.agent.chain.steps == 3
        assert app_view.agent.app_latency_ms.p50 <= app_view.agent.client_latency_ms.p50
        doc = json.loads(json.dumps(engine.snapshot().to_json()))
        assert {e["name"]: e["agent"]["api"] for e in doc["endpoints"]} == {"both": "chat", "app": "dify"}
        kinds = {type(e) for e in seen}
        assert AgentStepEvent in kinds and SampleEvent in kinds
        assert {e.endpoint for e in seen if isinstance(e, AgentStepEvent)} == {"both", "app"}
        records = [r for r in sim.server.records if r.api == "dify"]
        assert not any("/models" in r.response_id for r in records)


def test_pause_stops_the_agent_loop_too():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=2, itl_ms=1)) as sim:
        engine = Engine([endpoint(sim.url, model="m", interval_s=0.1, probes=("agent",))],
                        EngineSettings(scrape_metrics=False))
        with engine:
            wait_for(lambda: engine.snapshot().endpoints and (a := engine.snapshot().endpoints[0].agent)
                     and a.steps_sent >= 1)
            engine.set_paused(True)
            wait_for(lambda: not engine.snapshot().endpoints[0].in_flight)
            sent = engine.snapshot().endpoints[0].agent.steps_sent
            time.sleep(0.5)  # five intervals: unpaused, several steps would go
            assert engine.snapshot().endpoints[0].agent.steps_sent <= sent + 1
            engine.set_paused(False)
            wait_for(lambda: engine.snapshot().endpoints[0].agent.steps_sent >= sent + 2)


def test_once_json_with_the_agent_probe(tmp_path):
    with start_sim_in_thread(SimConfig(model="sim-a", ttft_ms=5, itl_ms=1, dify_tool_latency_ms=5)) as sim:
        chat = lpxtop("once", sim.url, "--probe", "chat,agent", "--samples", "2", "--json", "--tool-latency", "10ms",
                      "--chain-steps", "4", "--no-metrics")
        app = lpxtop("once", sim.url, "--api", "dify", "--samples", "2", "--json", "--no-metrics")
        table = lpxtop("once", sim.url, "--probe", "agent", "--samples", "1", "--no-metrics")
    assert chat.returncode == 0, chat.stderr
    (e,) = json.loads(chat.stdout)["endpoints"]
    agent = e["agent"]
    assert e["probes"]["sent"] == 2 and agent["steps"] == 2 and agent["steps_ok"] == 2
    assert agent["tool_call_valid_pct"] == 100.0 and agent["errors"] == {}
    for key in ("time_to_tool_name_ms", "time_to_tool_call_ms", "tool_ms", "answer_ttft_ms", "step_ms"):
        assert set(agent[key]) == {"p50", "p95", "p99", "mean", "max"}, key
    assert agent["tool_ms"]["p50"] >= 10
    assert agent["chain"]["steps"] == 4 and agent["chain"]["p95_ms"] >= agent["chain"]["p50_ms"] > 0
    assert app.returncode == 0, app.stderr
    (d,) = json.loads(app.stdout)["endpoints"]
    assert d["status"] == "up" and d["probes"]["sent"] == 0 and d["agent"]["api"] == "dify"
    assert d["agent"]["app_latency_ms"]["p50"] <= d["agent"]["client_latency_ms"]["p50"]
    assert table.returncode == 0, table.stderr
    assert "agent steps" in table.stdout and "STEP p50/p95" in table.stdout and "CHAIN p50/p95" in table.stdout


def test_flags_and_config_mistakes_are_usage_errors(tmp_path):
    bad_choice = lpxtop("once", "127.0.0.1:9", "--probe", "agent", "--tool-choice", "nope")
    assert bad_choice.returncode == 2 and "tool_choice 'nope'" in bad_choice.stderr
    bad_probe = lpxtop("once", "127.0.0.1:9", "--probe", "chat,agnet")
    assert bad_probe.returncode == 2 and "not a probe kind" in bad_probe.stderr
    bad_latency = lpxtop("once", "127.0.0.1:9", "--tool-latency", "fast")
    assert bad_latency.returncode == 2 and "not a duration" in bad_latency.stderr
    tools = tmp_path / "tools.json"
    tools.write_text('{"tools": [{"type": "function", "function": {"name": "lookup"}}], "prompt": "Look it up."}')
    config = tmp_path / "lpxtop.toml"
    config.write_text(f'[[endpoint]]\nurl = "127.0.0.1:9"\nprobe = ["chat", "agent"]\ntools_file = "{tools.name}"\n'
                      'tool_choice = "get_weather"\n')
    wrong = lpxtop("once", "--config", str(config))
    assert wrong.returncode == 2 and f"{config}:4" in wrong.stderr and "lookup" in wrong.stderr
    dify_chat = tmp_path / "dify.toml"
    dify_chat.write_text('[[endpoint]]\nurl = "127.0.0.1:9"\napi = "dify"\nprobe = ["chat", "agent"]\n')
    refused = lpxtop("once", "--config", str(dify_chat))
    assert refused.returncode == 2 and "agent steps only" in refused.stderr


def test_help_says_what_the_agent_probe_costs():
    result = lpxtop("--help")
    assert result.returncode == 0
    assert "TWO CALLS" in result.stdout and "--tool-latency" in result.stdout and "--chain-steps" in result.stdout
