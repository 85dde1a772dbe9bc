"""What a stream means: the interface between the one measured stream and each API.

`measured_stream` (stream.py) sends the request, stamps every read with `time.perf_counter_ns()` as its
bytes arrive, splits the body into SSE events and hands each event, with the arrival time of the read
that completed it, to a **sink**. The sink says what the event means for its API, and raises
`StreamError` (errors.py) when the event is a failure. Everything else (timeouts, HTTP statuses, a body
that is not an event stream, a stream cut before its end, batching reads after the first token) is the
measured stream's and the same for every API.

The sinks of this wing:

- `ChunkSink` (chunks.py): any OpenAI-style stream read by the one chunk rule; the chat and completions
  probes use it as it is (chat.py);
- `ToolCallSink` (agentcall.py): the chunk rule plus the answer's text and its tool calls reassembled
  (an agent step's call 1 and call 2);
- `DifyAppSink` (difyapp.py): a Dify app's `chat-messages` stream (agent thoughts, answer, a chatflow's
  nodes, message_end);
- `DifyWorkflowSink` (difyworkflow.py): a Dify workflow's `workflows/run` stream (nodes, text chunks,
  workflow_finished);
- `CozeChatSink` (cozechat.py): a Coze bot's `v3/chat` stream (chat and message events, done).

Adding an API: write a subclass of `StreamSink` in a module of its own
here, named for the API, that

1. sets `first_event_ns` at the first non-empty event and `first_token_ns` at the first event that shows
   the server working on the answer (it ends the first-token limit: from then on only the whole request's
   limit applies, so a long tool round is not a first-token timeout);
2. sets `done` when its end marker comes (reading stops there) and answers `finished` True once the
   answer ended properly (else a body that ends is `stream_cut`);
3. raises `StreamError("error_event", ...)` for an `event: error` SSE event, an error object, or its
   API's own failure event; `StreamError("bad_json", ...)` for an event it cannot read;
4. names in `markers` the bytes that may end or fail its stream (after the first token the reads are
   parsed in batches; a read holding one of these is parsed at once);
5. says in `whole_body` whether one JSON document is its API's non-streamed answer (it is then
   `not_streamed`; an `{"error": ...}` body is `error_event` before the sink is asked).

Then its caller (the agent wing, say) runs `measured_stream(client, endpoint, url, body, sink)` and builds
its record from the sink and the returned `StreamOutcome`. Add the API's dialect to the table of
tests/functional/test_stream_endings.py, which runs every hostile ending through every path.
"""

from __future__ import annotations


class StreamSink:
    """What one API's stream means. Subclasses override `event`, and `whole_body` and `finished` as needed."""

    # Bytes that may end the stream or fail it: after the first token, a read holding one is parsed at once.
    markers: tuple[bytes, ...] = (b"error",)

    def __init__(self) -> None:
        self.first_event_ns: int | None = None  # the first non-empty event of any kind
        self.first_token_ns: int | None = None  # the first sign of the answer (ends the first-token limit)
        self.done = False  # the stream's end marker came: stop reading

    @property
    def finished(self) -> bool:
        """The answer ended properly (its end marker, or a finish reason): a body that ends before is cut."""
        return self.done

    @property
    def token_events(self) -> int:
        """Token events so far (for the message of a stalled stream)."""
        return 0 if self.first_token_ns is None else 1

    def event(self, data: str, name: str | None, t_ns: int) -> None:
        """One SSE event (`data`, the `event:` field's `name`), completed by a read that arrived at `t_ns`.
        Raises StreamError for a failure."""
        raise NotImplementedError

    def whole_body(self, obj: dict) -> bool:
        """Whether a body that was one JSON object is this API's non-streamed answer (`not_streamed`); it may
        take what it can from it (token counts). False makes it `bad_json`."""
        return False
