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
- `prober.py`: what the engine runs per endpoint (`AgentProber`), and which probes an endpoint wants.

Nothing here imports Textual or Rich. The names below are imported on first use (lpxtop/lazy.py).
"""

from lpxtop.lazy import lazy_exports

__all__ = [
    "AgentProber",
    "AgentWindow",
    "ToolSet",
    "agent_view",
    "chain_budget",
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
    "lpxtop.engine.agent.prober": ("AgentProber", "agent_view", "wants_agent", "wants_chat", "with_agent"),
    "lpxtop.engine.agent.window": ("AgentWindow",),
    "lpxtop.engine.agent.tools": ("ToolSet", "load_tool_set"),
    "lpxtop.engine.agent.chain": ("chain_budget",),
    "lpxtop.engine.agent.step": ("run_agent_step",),
    "lpxtop.engine.agent.coze": ("run_coze_step",),
    "lpxtop.engine.agent.dify": ("run_dify_step",),
    "lpxtop.engine.agent.difyworkflow": ("run_dify_workflow_step",),
})
