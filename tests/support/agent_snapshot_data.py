"""Fixed agent-probe data for UI tests and SVG snapshots: the fixed snapshot with agent steps added.

vllm-llama is probed with chat and agent steps (steps of ~210-330 ms, one bad tool call, one slow tool);
a fourth endpoint is a Dify app (agent steps only). Every value is written here or by a plain formula.
"""

from __future__ import annotations

from dataclasses import replace

from lpxtop.engine.agent.window import summarize
from lpxtop.model.agent import AgentStep
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.snapshot import EndpointView, Snapshot
from tests.support.snapshot_data import NOW, fixed_snapshot


def _chat_step(i: int) -> AgentStep:
    ttft1 = 40.0 + 5 * (i % 4)
    call = ttft1 + 60.0 + 4 * (i % 3)
    tool = 30.0 if i != 17 else 250.0  # one slow tool
    ttft2 = 45.0 + 3 * (i % 5)
    e2e2 = ttft2 + 80.0 + 6 * (i % 4)
    bad = i == 9
    return AgentStep(
        endpoint="vllm-llama", api="chat", wall_time=NOW - 2.0 * (30 - i), start_ns=i, tool_name="get_weather",
        tool_calls=1, args_valid_json=not bad, args_valid_schema=None if bad else True,
        error_kind="bad_tool_args" if bad else None,
        error_message="get_weather: arguments are not valid JSON (Extra data: line 1 column 43)" if bad else None,
        call1_ttft_ms=ttft1, time_to_tool_name_ms=ttft1, time_to_tool_call_ms=call, call1_e2e_ms=call,
        tool_ms=tool, call2_start_ms=call + 4.0 + tool, answer_ttft_ms=ttft2, answer_e2e_ms=e2e2,
        step_ms=call + 4.0 + tool + e2e2,
    )


def _dify_step(i: int) -> AgentStep:
    decision = 380.0 + 20 * (i % 3)
    observation = decision + 120.0
    return AgentStep(
        endpoint="dify-support-bot", api="dify", wall_time=NOW - 2.0 * (30 - i), start_ns=i, tool_name="get_weather",
        tool_calls=1, args_valid_json=True, time_to_tool_name_ms=decision, time_to_tool_call_ms=decision,
        time_to_observation_ms=observation, tool_ms=120.0, answer_ttft_ms=observation + 210.0,
        answer_e2e_ms=observation + 610.0, step_ms=observation + 610.0, app_latency_ms=observation + 598.0,
        client_latency_ms=observation + 612.0,
    )


def agent_snapshot() -> Snapshot:
    """The fixed snapshot, vllm-llama with agent steps, and a Dify app endpoint."""
    base = fixed_snapshot()
    llama = base.endpoints[0]
    steps = tuple(_chat_step(i) for i in range(30))
    agent = summarize(steps, api="chat", chain_steps=5, sent=41, ok=39, failed=2,
                      errors={"bad_tool_args": 1, "no_tool_call": 1}, last_error=steps[9].error_text,
                      last_error_time=steps[9].wall_time)
    llama = replace(llama, config=replace(llama.config, probes=("chat", "agent"), tool_latency_s=0.03), agent=agent)
    dify_steps = tuple(_dify_step(i) for i in range(30))
    dify = EndpointView(
        config=EndpointConfig(name="dify-support-bot", url="http://127.0.0.1:5001/v1", api="dify", probes=("agent",),
                              api_key_env="DIFY_APP_KEY"),
        status="up", model=None, server_kind="unknown", probes_sent=0, probes_ok=0, probes_failed=0, errors={},
        ttft_ms=None, itl_ms=None, tpot_ms=None, e2e_ms=None, output_tokens_per_s=None, output_tokens=None,
        output_tokens_approx=False, last_error=None, last_error_time=None, samples=(),
        agent=summarize(dify_steps, api="dify", chain_steps=3),
    )
    return replace(base, endpoints=(llama, *base.endpoints[1:], dify), seq=base.seq + 1)


def _coze_step(i: int) -> AgentStep:
    decision = 520.0 + 15 * (i % 4)
    tool = 180.0 + 10 * (i % 3)
    ttft = decision + tool + 240.0
    e2e = ttft + 380.0 + 5 * (i % 5)
    return AgentStep(
        endpoint="coze-weather-bot", api="coze", wall_time=NOW - 2.0 * (30 - i), start_ns=i, tool_name="get_weather",
        tool_calls=1, args_valid_json=True, time_to_tool_name_ms=decision, time_to_tool_call_ms=decision,
        time_to_observation_ms=decision + tool, tool_ms=tool, answer_ttft_ms=ttft, answer_e2e_ms=e2e, step_ms=e2e,
        client_latency_ms=e2e + 30.0, app_latency_ms=1000.0 if i % 3 else 2000.0, app_latency_resolution_ms=1000.0,
        input_tokens=614, output_tokens=19 + i % 4, total_tokens=633 + i % 4,
    )


def _workflow_step(i: int) -> AgentStep:
    from lpxtop.model.platform import AgentNode

    offsets = (5.0, 6.0, 450.0 + 10 * (i % 3), 600.0 + 10 * (i % 3), 1180.0 + 10 * (i % 3))
    seen = (0.4, 444.0 + 10 * (i % 3), 150.0, 580.0, 0.3)
    own = (0.2, 430.0 + 10 * (i % 3), 141.0, 566.0, 0.1)
    titles = (("Start", "start"), ("Decide", "llm"), ("Weather API", "tool"), ("Answer", "llm"), ("End", "end"))
    nodes = tuple(AgentNode(title=t, node_type=k, node_id=f"17170000000{n}", status="succeeded", start_ms=o,
                            seen_ms=s, elapsed_ms=e) for n, ((t, k), o, s, e) in enumerate(zip(titles, offsets, seen, own)))
    end = offsets[-1] + 2.0
    return AgentStep(
        endpoint="dify-weather-flow", api="dify-workflow", wall_time=NOW - 2.0 * (30 - i), start_ns=i,
        tool_name="Weather API", tool_calls=1, time_to_tool_name_ms=offsets[2], time_to_tool_call_ms=offsets[2],
        time_to_observation_ms=offsets[2] + seen[2], tool_ms=seen[2], answer_ttft_ms=offsets[3] + 190.0,
        answer_e2e_ms=offsets[3] + seen[3], step_ms=end, client_latency_ms=end, app_latency_ms=end - 12.0,
        total_tokens=410, nodes=nodes,
    )


def _agent_only(name: str, url: str, api: str, agent, **config) -> EndpointView:
    return EndpointView(
        config=EndpointConfig(name=name, url=url, api=api, probes=("agent",), api_key_env="PLATFORM_KEY", **config),
        status="up", model=None, server_kind="unknown", probes_sent=0, probes_ok=0, probes_failed=0, errors={},
        ttft_ms=None, itl_ms=None, tpot_ms=None, e2e_ms=None, output_tokens_per_s=None, output_tokens=None,
        output_tokens_approx=False, last_error=None, last_error_time=None, samples=(), agent=agent,
    )


def platform_snapshot() -> Snapshot:
    """The agent snapshot with a Coze bot and a Dify workflow beside its Dify app."""
    base = agent_snapshot()
    coze = _agent_only("coze-weather-bot", "https://api.coze.com/v1", "coze",
                       summarize(tuple(_coze_step(i) for i in range(30)), api="coze", chain_steps=3),
                       bot_id="7379462189365198898")
    flow = _agent_only("dify-weather-flow", "http://127.0.0.1:5001/v1", "dify-workflow",
                       summarize(tuple(_workflow_step(i) for i in range(30)), api="dify-workflow", chain_steps=3),
                       inputs=(("query", "{prompt}"),))
    return replace(base, endpoints=(*base.endpoints, coze, flow), seq=base.seq + 1)
