"""The agent-step probe: a streamed tool call, the tool, and the streamed answer, measured like the chat probe.

- `tools.py`: the tool set (a small default one, or one from a file) and the conversation it is asked in;
- `schema.py`: checking a call's arguments against the tool's JSON schema (the subset tools use);
- `step.py`: one agent step against an OpenAI-compatible server (two calls per step);
  each call is the probe wing's measured stream (`lpxtop.engine.probe`), read by its `ToolCallSink`;
- `dify.py`: one agent step against a Dify app (`POST /v1/chat-messages`, one call per step, read by the
  wing's `DifyAppSink`);
- `chain.py`: what a chain of N steps costs, from the window's own step samples;
- `window.py`: the bounded window of steps and its summary (`lpxtop.model.agent.AgentView`).

Nothing here imports Textual or Rich.
"""
