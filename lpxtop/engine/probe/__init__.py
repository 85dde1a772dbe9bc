"""The probe wing: the one measured stream every request lpxtop sends goes through, what its events mean
for each API, and what is around it (when probes leave, lpxtop's own lateness, error classes).

- `stream.py`: `measured_stream`, the one function that sends a streaming request (with a fresh
  `traceparent`), stamps every read with `time.perf_counter_ns()` as its bytes arrive, reads it to its
  end and classifies every failure (`StreamOutcome`);
- `reads.py`: the reads handed to the sink (at once until the first token, then in batches), and a body
  that is not an event stream told apart;
- `sink.py`: `StreamSink`, what a stream means for one API, and how to add an API;
- `chunks.py`: the one chunk rule for OpenAI-style streams (token, finish, usage, error) as `ChunkSink`;
- sinks per API: `chat.py` (the chat and completions probe, as a `Sample`; the load generator's
  requests too), `agentcall.py` (an agent step's calls, with tool calls reassembled by `toolcalls.py`),
  `difyapp.py` (a Dify app or chatflow), `difyworkflow.py` (a Dify workflow), `cozechat.py` (a Coze bot),
  and what the Dify streams share, `difyevents.py` (event parsing, errors, the nodes' timeline);
- `tracecontext.py`: the W3C trace context sent with each request;
- `errors.py`: `StreamError` and the error classes of transport failures, statuses and error bodies;
- `models.py`: the endpoint's model list (`GET /v1/models`);
- `schedule.py`: when the next probe leaves (random gaps, bounded, mean kept);
- `clientlimit.py`: lpxtop's own lateness while a request runs (loop lag, CPU wait).

Definitions (TTFT, ITL, token events, error kinds, traceparent): docs/measurement.md.
"""

from lpxtop.engine.probe.chat import (
    build_body,
    endpoint_path,
    failed_sample,
    rejects_stream_options,
    run_probe,
)
from lpxtop.engine.probe.chunks import ChunkSink
from lpxtop.engine.probe.clientlimit import LoopLag, ThreadCpuWait
from lpxtop.engine.probe.errors import StreamError
from lpxtop.engine.probe.models import fetch_models
from lpxtop.engine.probe.sink import StreamSink
from lpxtop.engine.probe.stream import TTFT_FROM, StreamOutcome, measured_stream, redirect_target
from lpxtop.engine.probe.tracecontext import TraceContext, new_trace_context

__all__ = [
    "TTFT_FROM",
    "ChunkSink",
    "LoopLag",
    "StreamError",
    "StreamOutcome",
    "StreamSink",
    "ThreadCpuWait",
    "TraceContext",
    "build_body",
    "endpoint_path",
    "failed_sample",
    "fetch_models",
    "measured_stream",
    "new_trace_context",
    "redirect_target",
    "rejects_stream_options",
    "run_probe",
]
