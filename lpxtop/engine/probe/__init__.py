"""The probe wing: one measured streaming request, and what lpxtop needs around it.

- `stream.py`: one streaming request to an OpenAI-compatible endpoint, measured at byte arrival;
- `schedule.py`: when the next probe leaves (random gaps, bounded, mean kept);
- `clientlimit.py`: lpxtop's own lateness while a request runs (loop lag, CPU wait);
- `errors.py`: transport failures and HTTP statuses as error classes;
- `toolcalls.py`: reassembling streamed tool calls.
"""

from lpxtop.engine.probe.stream import (
    endpoint_path,
    fetch_models,
    rejects_stream_options,
    run_probe,
    shown_url,
)

__all__ = ["endpoint_path", "fetch_models", "rejects_stream_options", "run_probe", "shown_url"]
