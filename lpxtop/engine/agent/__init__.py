"""The agent-step probe: a streamed tool call, the tool, and the streamed answer, measured like the chat probe.

- `tools.py`: the tool set (a small default one, or one from a file) and the conversation it is asked in;
- `toolcalls.py`: reassembling streamed tool calls from every shape servers send;
- `schema.py`: checking a call's arguments against the tool's JSON schema (the subset tools use);
- `stream.py`: one streamed POST, read at byte arrival with the chat probe's timeouts and error classes;
- `step.py`: one agent step against an OpenAI-compatible server (two calls per step);
- `dify.py`: one agent step against a Dify app (`POST /v1/chat-messages`, one call per step);
- `chain.py`: what a chain of N steps costs, from the window's own step samples;
- `window.py`: the bounded window of steps and its summary (`lpxtop.model.agent.AgentView`).

Nothing here imports Textual or Rich.
"""
