"""Each API's stream written in its own dialect (chat chunks, completion chunks, tool-call deltas, Dify app
events, Dify workflow events, Coze events): the stream-ending and platform tests send these bytes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}



ERROR = {"message": "the engine is overloaded", "type": "server_error"}



DONE = b"data: [DONE]\n\n"



SSE_COMMENT = b": keep-alive\n\n"



def event(obj: dict, name: str | None = None) -> bytes:
    return (f"event: {name}\n" if name else "").encode() + b"data: " + json.dumps(obj).encode() + b"\n\n"



@dataclass(frozen=True)
class Dialect:
    """How one API's stream looks: its opening, a piece of its answer, and its proper end."""

    name: str
    opening: Callable[[], list[bytes]]
    finish: Callable[[str], bytes] | None  # a chunk ending the answer with this finish_reason (None: no such thing)
    error_beside_answer: bytes  # an answer piece that carries an error object too
    end: list[bytes]  # what ends a good stream, the last piece being the end marker
    body: dict  # the same answer as one JSON document (the API's non-streamed answer)
    marker: bytes = b"[DONE]"  # the end marker in the last piece of `end`
    keepalive: bytes = SSE_COMMENT  # what the API sends to keep a quiet stream open



def chat_chunk(delta: dict, finish: str | None = None, **extra) -> bytes:
    return event({**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})



def text_chunk(text: str, finish: str | None = None, **extra) -> bytes:
    return event({**HEAD, "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}],
                  **extra})



def tool_delta(arguments: str, name: str | None = None) -> bytes:
    call: dict = {"index": 0, "function": {"arguments": arguments}}
    if name:
        call.update(id="call_1", type="function")
        call["function"]["name"] = name
    return chat_chunk({"tool_calls": [call]})



CHAT_BODY = {"id": "c", "object": "chat.completion", "model": "m",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": "It rains."}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 5, "completion_tokens": 3}}



CHAT = Dialect(
    "chat",
    opening=lambda: [chat_chunk({"role": "assistant", "content": ""}), chat_chunk({"content": "It"}),
                     chat_chunk({"content": " rains."})],
    finish=lambda reason: chat_chunk({}, reason),
    error_beside_answer=chat_chunk({"content": "!"}, error=ERROR),
    end=[chat_chunk({}, "stop"), DONE],
    body=CHAT_BODY,
)



COMPLETIONS = Dialect(
    "completions",
    opening=lambda: [text_chunk("It"), text_chunk(" rains.")],
    finish=lambda reason: text_chunk("", reason),
    error_beside_answer=text_chunk("!", error=ERROR),
    end=[text_chunk("", "length"), DONE],
    body={"id": "c", "object": "text_completion", "model": "m",
          "choices": [{"index": 0, "text": "It rains.", "finish_reason": "length"}]},
)



TOOL_CALL = Dialect(
    "tool call",
    opening=lambda: [chat_chunk({"role": "assistant", "content": ""}),
                     tool_delta('{"city": ', name="get_weather"), tool_delta('"Paris"}')],
    finish=lambda reason: chat_chunk({}, reason),
    error_beside_answer=chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": " "}}]}, error=ERROR),
    end=[chat_chunk({}, "tool_calls"), DONE],
    body={"id": "c", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
              "role": "assistant", "content": None, "tool_calls": [
                  {"id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}}]},
)



DIFY = Dialect(
    "dify",
    opening=lambda: [
        event({"event": "agent_thought", "message_id": "m1", "tool": "get_weather",
               "tool_input": json.dumps({"get_weather": {"city": "Paris"}})}),
        event({"event": "agent_thought", "message_id": "m1", "tool": "get_weather", "observation": "rain"}),
        event({"event": "agent_message", "message_id": "m1", "answer": "It"}),
        event({"event": "agent_message", "message_id": "m1", "answer": " rains."}),
    ],
    finish=None,
    error_beside_answer=event({"event": "agent_message", "message_id": "m1", "answer": "!", "error": ERROR}),
    end=[event({"event": "message_end", "message_id": "m1", "metadata": {"usage": {"latency": 0.01}}})],
    body={"event": "message", "message_id": "m1", "conversation_id": "c1", "answer": "It rains.",
          "metadata": {"usage": {"latency": 0.01}}},
    marker=b"message_end",
    keepalive=b"event: ping\n\n",
)



def workflow_event(kind: str, **data) -> bytes:
    return event({"event": kind, "task_id": "t1", "workflow_run_id": "r1", "data": data})



def node(kind: str, run_id: str, title: str, node_type: str, **finished) -> bytes:
    return workflow_event(kind, id=run_id, node_id=f"n-{run_id}", title=title, node_type=node_type, index=1, **finished)



DIFY_WORKFLOW = Dialect(
    "dify workflow",
    opening=lambda: [
        workflow_event("workflow_started", id="r1", workflow_id="w1", sequence_number=1, created_at=1),
        node("node_started", "x1", "Weather", "tool"),
        node("node_finished", "x1", "Weather", "tool", status="succeeded", elapsed_time=0.012),
        node("node_started", "x2", "Answer", "llm"),  # never finishes unless the stream goes on
        workflow_event("text_chunk", text="It"),
        workflow_event("text_chunk", text=" rains."),
    ],
    finish=None,
    error_beside_answer=event({"event": "text_chunk", "workflow_run_id": "r1", "data": {"text": "!"}, "error": ERROR}),
    end=[node("node_finished", "x2", "Answer", "llm", status="succeeded", elapsed_time=0.02),
         workflow_event("workflow_finished", id="r1", status="succeeded", elapsed_time=0.05, total_tokens=9)],
    body={"workflow_run_id": "r1", "task_id": "t1", "data": {"id": "r1", "status": "succeeded",
                                                             "outputs": {"text": "It rains."}, "elapsed_time": 0.05}},
    marker=b"workflow_finished",
    keepalive=b"event: ping\n\n",
)



def coze(name: str, obj: dict) -> bytes:
    return event(obj, name)



def coze_message(kind: str, content: str, **extra) -> dict:
    return {"id": "m1", "conversation_id": "c1", "bot_id": "b1", "chat_id": "7", "role": "assistant", "type": kind,
            "content": content, "content_type": "text", **extra}



COZE_CHAT = {"id": "7", "conversation_id": "c1", "bot_id": "b1", "created_at": 1, "status": "in_progress"}



COZE = Dialect(
    "coze",
    opening=lambda: [
        coze("conversation.chat.created", {**COZE_CHAT, "status": "created"}),
        coze("conversation.message.completed",
             coze_message("function_call", json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}))),
        coze("conversation.message.completed", coze_message("tool_response", '{"temperature": 18}')),
        coze("conversation.message.delta", coze_message("answer", "It")),
        coze("conversation.message.delta", coze_message("answer", " rains.")),
    ],
    finish=None,
    error_beside_answer=coze("conversation.message.delta", coze_message("answer", "!", error=ERROR)),
    end=[coze("conversation.chat.completed", {**COZE_CHAT, "status": "completed", "completed_at": 2,
                                              "usage": {"token_count": 9, "output_count": 3, "input_count": 6}}),
         b'event: done\ndata: "[DONE]"\n\n'],
    body={"code": 0, "msg": "", "data": {**COZE_CHAT, "status": "in_progress"}},
    marker=b"done",
)
