"""The agent-step probe: a streamed tool call, the tool, and the streamed answer, measured like the chat probe.

- `tools.py`: the tool set (a small default one, or one from a file) and the conversation it is asked in;
- `schema.py`: checking a call's arguments against the tool's JSON schema (the subset tools use);
- `step.py`: one agent step against an OpenAI-compatible server (two calls per step);
  each call is the probe wing's measured stream (`lpxtop.engine.probe`), read by its `ToolCallSink`;
- agent platforms, one request per step (the platform runs its own model and tools), each read by its
  sink in the probe wing: `dify.py` (a Dify app or chatflow, `POST /v1/chat-messages`, `DifyAppSink`),
  `difyworkflow.py` (a Dify workflow, `POST /v1/workflows/run`, `DifyWorkflowSink`), `coze.py` (a Coze
  bot, `POST /v3/chat`, `CozeChatSink`), and what they share, `platform.py`;
- `nodes.py`: a workflow's nodes summarized over the window;
- `chain.py`: what a chain of N steps costs, from the window's own step samples;
- `window.py`: the bounded window of steps and its summary (`lpxtop.model.agent.AgentView`);
- `prober.py`: what the engine runs per endpoint (`AgentProber`).

Nothing here imports Textual or Rich. The names below are imported on first use (lpxtop/lazy.py), except
which probes an endpoint runs (`wants_agent`, `wants_chat`), defined here: the engine asks that of every
endpoint without loading the agent probe (`prober.py` and its platforms load only for an endpoint that
runs agent steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lpxtop.lazy import lazy_exports

if TYPE_CHECKING:
    from lpxtop.model.endpoint import EndpointConfig

__all__ = [
    "AgentProber",
    "AgentWindow",
    "ToolSet",
    "agent_view",
    "chain_budget",
    "check_tool_choice",
    "deeper_than",
    "load_tool_set",
    "run_agent_step",
    "run_coze_step",
    "run_dify_step",
    "run_dify_workflow_step",
    "wants_agent",
    "wants_chat",
    "with_agent",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "lpxtop.engine.agent.prober": ("AgentProber", "agent_view", "with_agent"),
    "lpxtop.engine.agent.window": ("AgentWindow",),
    "lpxtop.engine.agent.tools": ("ToolSet", "load_tool_set", "check_tool_choice"),
    "lpxtop.engine.agent.chain": ("chain_budget",),
    "lpxtop.engine.agent.step": ("run_agent_step",),
    "lpxtop.engine.agent.coze": ("run_coze_step",),
    "lpxtop.engine.agent.dify": ("run_dify_step",),
    "lpxtop.engine.agent.difyworkflow": ("run_dify_workflow_step",),
    "lpxtop.engine.agent.schema": ("deeper_than",),
})


def wants_agent(config: EndpointConfig) -> bool:
    return "agent" in config.probes


def wants_chat(config: EndpointConfig) -> bool:
    return "chat" in config.probes
