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
- `window.py`: the bounded window of steps and its summary (`lpxtop.model.agent.AgentView`).

Nothing here imports Textual or Rich. This module itself says only which probes an endpoint runs, so the
engine asks that without loading the agent probe (`prober.py` and its platforms load only for an endpoint
that runs agent steps).
"""

from __future__ import annotations

from lpxtop.model.endpoint import EndpointConfig


def wants_agent(config: EndpointConfig) -> bool:
    return "agent" in config.probes


def wants_chat(config: EndpointConfig) -> bool:
    return "chat" in config.probes
