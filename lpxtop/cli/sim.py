"""Command-line front of the simulator: `lpxtop sim ...` (and `python -m lpxtop.sim ...`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from lpxtop.cli.arguments import ArgumentParser
from lpxtop.cli.common import duration_between
from lpxtop.engine.traces import OtelUnavailable
from lpxtop.sim.config import SimConfig, parse_background_load, parse_wave_load
from lpxtop.sim.server import SimServer
from lpxtop.sim.toolcall_options import TOOL_CALL_SHAPES

DESCRIPTION = (
    "Run the simulated OpenAI-compatible inference server alone (vLLM-like batching, queueing, KV cache, "
    "/metrics in vLLM's format, injectable faults). It also plays the agent platforms: a Dify app "
    "(/v1/chat-messages), a Dify workflow (/v1/workflows/run) and a Coze bot (/v3/chat)."
)


def build_parser(command: str) -> argparse.ArgumentParser:
    """`lpxtop sim`'s parser."""
    parser = ArgumentParser(prog="lpxtop sim", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sim_arguments(parser)
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    """`lpxtop sim`: serve until SIGINT/SIGTERM."""
    return run_sim(args)


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sim's flags to `parser` (used by the `lpxtop sim` subcommand)."""
    d = SimConfig()
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument(
        "--port",
        type=int,
        default=8000,
        help="TCP port to listen on; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--model", default=d.model, help="model name served and required in requests (default: %(default)s)"
    )
    parser.add_argument(
        "--ttft-ms",
        type=float,
        default=d.ttft_ms,
        help="prefill cost of a newly admitted request, ms (default: %(default)s)",
    )
    parser.add_argument(
        "--itl-ms",
        type=float,
        default=d.itl_ms,
        help="decode step time with one running request, ms (default: %(default)s)",
    )
    parser.add_argument(
        "--max-num-seqs", type=int, default=d.max_num_seqs,
        help="most requests in the running batch; the rest wait in a FIFO queue (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--kv-tokens", type=int, default=d.kv_tokens,
        help="KV-cache capacity in tokens; overflowing it preempts the newest request (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--fail-rate", type=float, default=d.fail_rate,
        help="share of generation requests answered with HTTP 500, 0..1 (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--api-key", default=None,
        help="require `Authorization: Bearer KEY` on /v1/* (else HTTP 401); never printed",
    )  # fmt: skip
    parser.add_argument(
        "--tokens-per-chunk", type=int, default=d.tokens_per_chunk,
        help="tokens per streamed content chunk, like a stream interval or speculative decoding (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--empty-chunk-rate", type=float, default=d.empty_chunk_rate, metavar="SHARE",
        help='share of tokens streamed as `"content": ""`, as vLLM sends a token that completes no UTF-8 '
        "character (about 0.2 in real runs), 0..1 (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--background-load", default="off", metavar="MIN,MAX,PERIOD_S",
        help="virtual requests kept in flight, rising from MIN to MAX and back every PERIOD_S seconds, "
        "e.g. 2,24,60 (default: off)",
    )  # fmt: skip
    parser.add_argument(
        "--wave-load", default="off", metavar="CLIENTS,TOKENS",
        help="a closed loop of CLIENTS virtual clients asking for TOKENS tokens each, admitted in waves "
        "(new requests only once the batch has emptied), e.g. 4,64 (default: off)",
    )  # fmt: skip
    parser.add_argument(
        "--tool-call-shape", default=d.tool_call_shape, choices=TOOL_CALL_SHAPES,
        help="how streamed tool-call deltas look (openai: vLLM's; see lpxtop/sim/tools.py) (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--tool-fault-rate", type=float, default=d.tool_fault_rate,
        help="share of tool calls answered with text, bad JSON or schema-breaking arguments (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--dify-tool-latency-ms", type=float, default=d.dify_tool_latency_ms,
        help="how long the simulated platforms' tool takes, ms: the Dify app's (POST /v1/chat-messages), the Dify "
        "workflow's Tool node (POST /v1/workflows/run) and the Coze bot's plugin (POST /v3/chat) (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--otlp-traces-endpoint", default=None, metavar="URL",
        help="send one `llm_request` span per finished request to this OTLP/HTTP URL, as vLLM does "
        "(e.g. http://127.0.0.1:4318/v1/traces; needs pip install 'lpxtop[otel]') (default: off)",
    )  # fmt: skip
    parser.add_argument(
        "--otlp-schedule-delay", type=duration_between(0.001, 60.0, bare_unit=0.001), default=d.otlp_schedule_delay_s, metavar="DURATION",
        help="how often a batch of spans leaves, like OTEL_BSP_SCHEDULE_DELAY (a plain number is ms, as "
        "there) (default: %(default)gs)",
    )  # fmt: skip
    parser.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="seed of the timing jitter and generated text (default: %(default)s)",
    )


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Build a SimConfig from parsed flags; raises ValueError with a readable message."""
    return SimConfig(
        model=args.model,
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
        max_num_seqs=args.max_num_seqs,
        kv_tokens=args.kv_tokens,
        fail_rate=args.fail_rate,
        api_key=args.api_key or None,
        tokens_per_chunk=args.tokens_per_chunk,
        empty_chunk_rate=args.empty_chunk_rate,
        background_load=parse_background_load(args.background_load),
        wave_load=parse_wave_load(args.wave_load),
        seed=args.seed,
        tool_call_shape=args.tool_call_shape,
        tool_fault_rate=args.tool_fault_rate,
        dify_tool_latency_ms=args.dify_tool_latency_ms,
        otlp_traces_endpoint=args.otlp_traces_endpoint or None,
        otlp_schedule_delay_s=args.otlp_schedule_delay,
    )


def run_sim(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM. Exit status: 0 after a clean stop, 1 if it cannot listen, 2 for bad flags."""
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"lpxtop sim: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(config, args.host, args.port))
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return 0


async def serve(config: SimConfig, host: str, port: int) -> int:
    server = SimServer(config)
    try:
        bound = await server.start(host, port)
    except OtelUnavailable as exc:
        print(f"lpxtop sim: --otlp-traces-endpoint: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"lpxtop sim: cannot listen on {host}:{port} ({exc.strerror or exc}). "
            "Another process may hold the port: stop it or pick another with --port.",
            file=sys.stderr,
        )
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    url_host = f"[{host}]" if ":" in host else host
    print(f"lpxtop sim: serving {config.model} on http://{url_host}:{bound}/v1", flush=True)
    if config.otlp_traces_endpoint:
        print(f"lpxtop sim: sending request spans to {config.otlp_traces_endpoint}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m lpxtop.sim`: the same flags as `lpxtop sim`."""
    parser = ArgumentParser(
        prog="python -m lpxtop.sim", description="Simulated vLLM-like inference server."
    )
    add_sim_arguments(parser)
    return run_sim(parser.parse_args(argv))
