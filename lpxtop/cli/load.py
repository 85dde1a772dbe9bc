"""`lpxtop load`: the command line of the load test (registered in lpxtop/cli/entry.py COMMAND_MODULES).

Headless (`--no-ui`) and dashboard runs do the same test and write the same reports; the dashboard is
imported only when it opens.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
import time
from dataclasses import replace

from lpxtop.checks import ConfigError
from lpxtop.cli.arguments import ArgumentParser, env_name
from lpxtop.cli.common import (
    SWITCH_INTERVAL_S,
    add_ui_flags,
    duration_between,
    logs_held_while_drawing,
    positive_float,
    positive_int,
    seconds,
)
from lpxtop.cli.otlp import add_otlp_flags, start_otlp, stop_otlp
from lpxtop.config import MIN_SECONDS, normalize_url
from lpxtop.durations import DurationError, format_duration, parse_duration
from lpxtop.engine.traces import add_traces_flags
from lpxtop.http import is_loopback
from lpxtop.load.chain import attach_chain, finish_chain
from lpxtop.load.plan import (
    CPU_WAIT_LIMIT,
    DEFAULT_DURATION_S,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_WARMUP_S,
    LAG_LIMIT_MS,
    LoadPlan,
)
from lpxtop.load.schedule import parse_levels
from lpxtop.load.slo import SloError, parse_slo
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.load import format_level

MAX_STEP_S = 7 * 24 * 3600.0  # the longest warm-up or measured window: a week
STOP_WAIT_S = 15.0
METRICS_INTERVAL_S = 1.0

EPILOG = """\
examples:
  lpxtop load 127.0.0.1:8000 --concurrency 1,5,10,20,50 --duration 60
  lpxtop load 127.0.0.1:8000 --rate 1,2,4,8 --burstiness 0.5
  lpxtop load 127.0.0.1:8000 --sweep concurrency --slo "ttft_p95<=500ms,e2e_p95<=10s,error_rate<=1%"
  lpxtop load 127.0.0.1:8000 --concurrency 4 --input-tokens 128,1024,4096 --output-tokens 64 --ignore-eos
  lpxtop load 127.0.0.1:8000 --concurrency 1,2,4 --no-ui --json result.json --csv steps.csv

SLO objectives (comma-separated): ttft/itl/tpot/e2e with _p50/_p90/_p95/_p99/_mean/_max <= a time
(500ms, 10s); error_rate <= 1%; output_throughput >= N (tokens/s); request_throughput >= N (req/s).

Each step: a warm-up (not counted), then the measured window; requests sent in the window are counted,
and the load is held until the last of them ends. Every request is lpxtop's probe request (same
timeouts, same measurement), each prompt with a random prefix so prefix caching does not hide prefill.
lpxtop's own probes are off during the test; the dashboard still shows the server's /metrics, GPU, host.

exit status: 0 the run finished (whatever the SLO said; also after q in the dashboard), 1 the target
was down, 2 usage error (a report file that cannot be written is one, found before any load is sent),
3 --fail-on-slo and the SLO was missed, 130 stopped by Ctrl-C, 143 stopped by SIGTERM (either way the
report of the finished steps is still written, the step under way marked partial).
"""


def _milliseconds(text: str) -> float:
    """An argparse type: a duration in milliseconds (a plain number counts as ms: `--client-lag-limit 50`)."""
    try:
        ms = round(parse_duration(text, low=0.0, high=3600.0, bare_unit=0.001) * 1000.0, 9)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return ms


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="lpxtop load",
        description="Run a load test against an OpenAI-compatible endpoint, step by step (closed-loop "
        "concurrency, open-loop request rate or prompt length), judge each step against an SLO, search for "
        "the capacity, and watch it live beside the server's queue, KV cache, GPU and host.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("url", metavar="URL", help="the endpoint: http://host:port/v1, http://host:port or host:port")
    load = parser.add_argument_group("load")
    load.add_argument("--concurrency", metavar="N[,N...]",
                      help="closed loop: keep exactly N requests in flight; a list runs one step per value")
    load.add_argument("--rate", metavar="R[,R...]",
                      help="open loop: R requests/s on average (Poisson, see --burstiness); a list runs one step per value")
    load.add_argument("--input-tokens", metavar="N[,N...]",
                      help="prompt length in tokens (aimed with the server's own usage counts); a list sweeps it "
                      "at one --concurrency or --rate")
    load.add_argument("--output-tokens", type=positive_int, default=DEFAULT_OUTPUT_TOKENS, metavar="N",
                      help=f"max_tokens of every request (default {DEFAULT_OUTPUT_TOKENS})")
    load.add_argument("--ignore-eos", action="store_true",
                      help="ask the server not to stop before --output-tokens (vLLM, llama.cpp honour it)")
    load.add_argument("--duration", type=duration_between(MIN_SECONDS, MAX_STEP_S), default=DEFAULT_DURATION_S,
                      metavar="DURATION",
                      help=f"measured window of each step: 30s, 2m, ... (default {format_duration(DEFAULT_DURATION_S)})")
    load.add_argument("--warmup", type=duration_between(0.0, MAX_STEP_S), default=DEFAULT_WARMUP_S, metavar="DURATION",
                      help=f"load held before each step's window, not counted (default {format_duration(DEFAULT_WARMUP_S)})")
    load.add_argument("--burstiness", type=positive_float, default=1.0, metavar="B",
                      help="open loop: gamma shape of the arrival gaps as vllm bench serve (1 = Poisson, <1 burstier)")
    load.add_argument("--max-concurrency", type=positive_int, default=DEFAULT_MAX_CONCURRENCY, metavar="N",
                      help=f"open loop: most requests in flight; later arrivals wait (default {DEFAULT_MAX_CONCURRENCY})")
    load.add_argument("--stagger", action="store_true",
                      help="closed loop: spread the workers' first requests over the warm-up instead of sending "
                      "them at once (as vllm bench serve does), so that they do not go in rounds; make the warm-up "
                      "at least one request long. The report's rhythm says how synchronised the sends were")
    load.add_argument("--ttft-from", choices=("sent", "call"), default="sent",
                      help="where each request's clock starts: when it goes out (default), or when lpxtop's worker "
                      "makes it, before lpxtop's own loop sends it: vllm bench serve's clock, to compare with it")
    load.add_argument("--seed", type=int, default=0, help="seed of the arrival times (default 0)")
    slo = parser.add_argument_group("SLO and capacity search")
    slo.add_argument("--slo", metavar="OBJECTIVES", help='judge each step, e.g. "ttft_p95<=500ms,e2e_p95<=10s,error_rate<=1%%"')
    slo.add_argument("--sweep", choices=("concurrency", "rate"),
                     help="search for the highest load meeting --slo: double until a step fails, then bisect "
                     "(--concurrency / --rate give the first load, default 1)")
    slo.add_argument("--max-level", type=positive_float, metavar="N",
                     help="highest load the search may try (default 512 concurrent, 1000 req/s)")
    slo.add_argument("--max-steps", type=positive_int, default=16, metavar="N", help="most steps a search runs (default 16)")
    slo.add_argument("--precision", type=positive_float, default=0.1, metavar="SHARE",
                     help="a search stops when the last pass and the first fail are within this share "
                     "(default 0.1; a concurrency search also when they are neighbours)")
    slo.add_argument("--fail-on-slo", action="store_true",
                     help="exit 3 when the SLO was missed (a listed step missed it, or a search found no capacity)")
    target = parser.add_argument_group("requests (as the probes)")
    target.add_argument("-m", "--model", help="model to request (default: the first one /v1/models lists)")
    target.add_argument("--api", choices=("chat", "completions"), default="chat",
                        help="/v1/chat/completions (default) or /v1/completions")
    target.add_argument("--api-key-env", type=env_name, metavar="VAR",
                        help="environment variable that holds the API key (never shown or written)")
    target.add_argument("--prompt", help="prompt without --input-tokens (a random prefix is added unless --no-random-prefix)")
    target.add_argument("--no-random-prefix", action="store_true",
                        help="no random prefix per request (prefix caching may then hide prefill time)")
    target.add_argument("--timeout", type=seconds, default=60.0, metavar="DURATION",
                        help="whole-request timeout (default 1m)")
    target.add_argument("--first-token-timeout", type=seconds, default=30.0, metavar="DURATION",
                        help="a request with no token within this time fails (default 30s)")
    target.add_argument("--connect-timeout", type=seconds, default=5.0, metavar="DURATION",
                        help="connect timeout (default 5s)")
    target.add_argument("--metrics-url", metavar="URL", help="the server's /metrics when not on the endpoint's host:port")
    target.add_argument("--no-metrics", action="store_true", help="do not read the server's /metrics")
    out = parser.add_argument_group("output")
    out.add_argument("--no-ui", action="store_true", help="no dashboard: progress on stderr, the report at the end")
    out.add_argument("--json", metavar="FILE", help="write the report as JSON (lpxtop-load/1; - for stdout)")
    out.add_argument("--csv", metavar="FILE", help="write one CSV row per step (- for stdout)")
    out.add_argument("--requests-jsonl", metavar="FILE",
                     help="write one JSON line per request: timestamps, tokens, error kind, step and phase")
    out.add_argument("--no-record", action="store_true",
                     help="do not record the run. By default every run is recorded to a new file in "
                     "$XDG_STATE_HOME/lpxtop (~/.local/state/lpxtop), printed at the end: the server's /metrics, "
                     "the GPU and the host through the test, and each step with its figures (`lpxtop replay FILE` "
                     "jumps from step to step with n; `lpxtop export FILE --what load` lists them)")
    out.add_argument("--record-file", metavar="FILE", help="record to FILE instead of a new file in that directory")
    out.add_argument("-y", "--yes", action="store_true",
                     help="do not ask before loading a target that is not on this machine")
    limits = parser.add_argument_group("lpxtop's own limits")
    limits.add_argument("--client-lag-limit", type=_milliseconds, default=LAG_LIMIT_MS, metavar="DURATION",
                        help=f"a step whose requests saw lpxtop's loop later than this (p99) is client-limited: "
                        f"20ms, 0.1s, or a plain number of milliseconds (default {LAG_LIMIT_MS:g}ms)")
    limits.add_argument("--client-cpu-wait-limit", type=positive_float, default=CPU_WAIT_LIMIT, metavar="SHARE",
                        help="... or whose thread waited for a CPU more than this share of the step "
                        f"(default {CPU_WAIT_LIMIT:g})")
    from lpxtop.record.settings import add_retention_flags

    add_retention_flags(out)
    add_ui_flags(parser)
    add_otlp_flags(parser, load=True)
    add_traces_flags(parser)
    return parser


def plan_from_args(args: argparse.Namespace) -> LoadPlan:
    """The LoadPlan the flags describe; raises ConfigError (exit 2) saying what to change."""
    try:
        return _plan_from_args(args)
    except ConfigError:
        raise
    except ValueError as exc:  # what LoadPlan itself refuses
        raise ConfigError(str(exc)) from None


def _plan_from_args(args: argparse.Namespace) -> LoadPlan:
    for name, value in vars(args).items():
        if isinstance(value, list):  # `--warmup=--`: argparse (3.11) hands over [] instead of a value
            raise ConfigError(f"--{name.replace('_', '-')} needs a value")
    url = normalize_url(args.url)
    try:
        concurrency = parse_levels(args.concurrency, integer=True, name="--concurrency") if args.concurrency else None
        rate = parse_levels(args.rate, integer=False, name="--rate") if args.rate else None
        tokens = parse_levels(args.input_tokens, integer=True, name="--input-tokens") if args.input_tokens else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    slo = None
    if args.slo:
        try:
            slo = parse_slo(args.slo)
        except SloError as exc:
            raise ConfigError(str(exc)) from None
    if concurrency and rate:
        raise ConfigError("give --concurrency (closed loop) or --rate (open loop), not both; "
                          "--max-concurrency caps an open loop")
    lists = [name for name, values in (("--concurrency", concurrency), ("--rate", rate), ("--input-tokens", tokens))
             if values and len(values) > 1]
    if len(lists) > 1:
        raise ConfigError(f"only one of {' and '.join(lists)} may list several values: a test sweeps one dimension")
    if args.warmup < 0:
        raise ConfigError("--warmup must not be negative")
    endpoint = EndpointConfig(
        name="load",
        url=url,
        model=args.model,
        api=args.api,
        api_key_env=args.api_key_env,
        random_prefix=not args.no_random_prefix,
        timeout_s=args.timeout,
        first_token_timeout_s=min(args.first_token_timeout, args.timeout),
        connect_timeout_s=args.connect_timeout,
        metrics_url=args.metrics_url,
        metrics_interval_s=METRICS_INTERVAL_S,
        max_tokens=args.output_tokens,
    )
    if args.prompt:
        endpoint = replace(endpoint, prompt=args.prompt)
    common = dict(
        endpoint=endpoint, output_tokens=args.output_tokens, ignore_eos=args.ignore_eos, duration_s=args.duration,
        warmup_s=args.warmup, burstiness=args.burstiness, max_concurrency=args.max_concurrency, slo=slo,
        seed=args.seed, max_steps=args.max_steps, precision=args.precision, lag_limit_ms=args.client_lag_limit,
        cpu_wait_limit=args.client_cpu_wait_limit, stagger=args.stagger,
        ttft_from=args.ttft_from,
    )
    if args.sweep:
        if slo is None:
            raise ConfigError("--sweep searches for the highest load that meets an SLO: give --slo too")
        start_list = concurrency if args.sweep == "concurrency" else rate
        if (rate if args.sweep == "concurrency" else concurrency):
            raise ConfigError(f"--sweep {args.sweep} cannot be combined with "
                              f"{'--rate' if args.sweep == 'concurrency' else '--concurrency'}")
        if start_list and len(start_list) > 1:
            raise ConfigError(f"--sweep {args.sweep} takes one starting value, not a list")
        if tokens and len(tokens) > 1:
            raise ConfigError("--sweep searches one dimension: give one --input-tokens value")
        start = start_list[0] if start_list else 1.0
        max_level = args.max_level or (512.0 if args.sweep == "concurrency" else 1000.0)
        if max_level < start:
            raise ConfigError(f"--max-level {max_level:g} is below the first load {start:g}")
        return LoadPlan(mode=args.sweep, levels=(start,), search=True, max_level=max_level,
                        input_tokens=int(tokens[0]) if tokens else None, **common)
    if tokens and len(tokens) > 1:
        fixed_c = int(concurrency[0]) if concurrency else (None if rate else 1)
        fixed_r = rate[0] if rate else None
        return LoadPlan(mode="input_tokens", levels=tokens, concurrency=fixed_c, rate=fixed_r, **common)
    fixed_tokens = int(tokens[0]) if tokens else None
    if rate:
        return LoadPlan(mode="rate", levels=rate, input_tokens=fixed_tokens, **common)
    if concurrency:
        return LoadPlan(mode="concurrency", levels=concurrency, input_tokens=fixed_tokens, **common)
    raise ConfigError("say what load to run: --concurrency 1,5,10, --rate 1,2,4, or --sweep concurrency --slo ...")


def is_local(url: str) -> bool:
    from urllib.parse import urlsplit

    return is_loopback(urlsplit(url).hostname or "")


def describe(plan: LoadPlan) -> str:
    """What the test will send, in a few lines (asked about before loading a remote target)."""
    levels = ", ".join(format_level(plan.mode, v) for v in plan.levels)
    if plan.search:
        what = f"a capacity search from {levels} up to {format_level(plan.mode, plan.max_level)} (at most {plan.max_steps} steps)"
    else:
        what = f"{len(plan.levels)} step(s): {levels}"
    n = plan.approximate_requests()
    tokens = f"{plan.output_tokens} output tokens each" + (f", ~{plan.input_tokens} input" if plan.input_tokens else "")
    lines = [f"lpxtop load will send {what} to {plan.endpoint.url},",
             f"each step {format_duration(plan.warmup_s)} warm-up + {format_duration(plan.duration_s)} measured, {tokens}"]
    if n is not None:
        lines.append(f"about {n} requests and {n * plan.output_tokens} output tokens in all.")
    return "\n".join(lines)


def run(command: str, args: argparse.Namespace) -> int:
    try:
        plan = plan_from_args(args)
        _check_record_flags(args)
    except ConfigError as exc:
        print(f"lpxtop load: {exc}", file=sys.stderr)
        return 2
    if args.api_key_env and args.api_key_env not in os.environ:
        print(f"lpxtop load: warning: ${args.api_key_env} is not set; sending without an API key", file=sys.stderr)
    if not is_local(plan.endpoint.url) and not args.yes:
        print(describe(plan), file=sys.stderr)
        if not sys.stdin.isatty():
            print("lpxtop load: the target is not on this machine; pass --yes to send this load without asking",
                  file=sys.stderr)
            return 2
        answer = input("Send it? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("lpxtop load: nothing sent.", file=sys.stderr)
            return 2
    outputs = _open_outputs(args)
    if outputs is None:
        return 2
    requests_out = outputs
    try:
        return _run_test(plan, args, requests_out)
    finally:
        if requests_out:
            with contextlib.suppress(OSError):
                requests_out.close()


def _check_record_flags(args: argparse.Namespace) -> None:
    """--retain / --max-size as the recorder reads them (a bad value is a usage error before any load)."""
    if args.no_record:
        return
    from lpxtop.record.settings import resolve

    try:
        resolve(args, None, enabled=True, path=args.record_file)
    except ValueError as exc:
        raise ConfigError(f"recording: {exc}") from None
    if args.record_file:
        directory = os.path.dirname(os.path.abspath(os.path.expanduser(args.record_file)))
        if not os.path.isdir(directory):
            raise ConfigError(f"--record-file {args.record_file}: no directory {directory}")


def _open_outputs(args: argparse.Namespace):
    """Check the report files can be written and open the requests file, now: a path that cannot be written is
    a usage error before any load is sent, not found after the whole test. None on failure, else the
    requests file (False without one)."""
    for path in (args.json, args.csv):
        if path and path != "-":
            problem = _unwritable(path)
            if problem:
                print(f"lpxtop load: cannot write {path}: {problem}", file=sys.stderr)
                return None
    if not args.requests_jsonl:
        return False
    try:
        return open(args.requests_jsonl, "w", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
    except OSError as exc:
        print(f"lpxtop load: cannot write {args.requests_jsonl}: {exc.strerror or exc}", file=sys.stderr)
        return None


def _unwritable(path: str) -> str | None:
    """Why the report could not be written at `path` (as `report.write_text` writes it: a temporary file in
    the same directory, then a rename), or None. Tried for real: permissions alone do not say it for root,
    a read-only file system or /proc."""
    import tempfile

    directory = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(directory):
        return f"no directory {directory}"
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path) and not os.path.isfile(path):
        return "it is not a regular file"
    try:
        fd, tmp = tempfile.mkstemp(prefix=".lpxtop-load-check-", dir=directory)
    except OSError as exc:
        return f"cannot create a file in {directory}: {exc.strerror or exc}"
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "permission denied"
    return None


def build_load_engine(plan: LoadPlan, *, ui: bool, scrape: bool, readings: bool = False):
    """The live engine beside the test: probes off; scrapes of the target (every second); with the dashboard
    also the GPU, the host and the ports. Headless it scrapes and reads the GPUs (each step's energy per
    output token needs their energy counters; about 1 ms a second, nothing on a host without a GPU), plus the
    host when `readings` (a recorded run keeps them: lpxtop/load/recording.py)."""
    from lpxtop.engine import Engine, EngineSettings
    from lpxtop.engine.scrape import ServerScraper

    if ui:
        from lpxtop.cli.assemble import build_engine

        engine = build_engine([plan.endpoint], scrape_metrics=scrape)
        engine.settings = replace(engine.settings, probes=False)
        return engine
    settings = EngineSettings(probes=False, scrape_metrics=scrape)
    from lpxtop.engine.gpu import AcceleratorCollector

    parts: dict = {"gpu": AcceleratorCollector()}
    if readings:
        from lpxtop.engine.system import HostCollector

        parts["host"] = HostCollector()
    return Engine([plan.endpoint], settings,
                  scraper_factory=lambda config: ServerScraper(config, window_s=settings.window_s), **parts)


def attach_otlp(engine, controller, args: argparse.Namespace):
    """With --otlp: OpenTelemetry export of the engine's readings and of the load's requests (sampled by
    --otlp-sample, 1 % by default: docs/opentelemetry.md says why), attached before anything starts."""
    if getattr(args, "otlp", None) is None:
        return None
    from lpxtop.otel.measures import EndpointInfo  # no OpenTelemetry import: start_otlp says what is missing

    target = controller.plan.endpoint
    pipeline = start_otlp(engine, args, None, load=True, endpoints={target.name: EndpointInfo.of(target)},
                          request_model=lambda _name: controller.model)
    if pipeline is not None:
        controller.add_sample_listener(pipeline.on_load_sample)
    return pipeline


def attach_recorder(engine, controller, args: argparse.Namespace):
    """`lpxtop load` records every run unless --no-record (lpxtop/load/recording.py says what the file holds);
    the recorder, attached before the engine starts, or None."""
    from lpxtop.load.recording import start_recording

    return start_recording(engine, controller, args)


def _run_test(plan: LoadPlan, args: argparse.Namespace, requests_out) -> int:
    from lpxtop.load.controller import LoadController
    from lpxtop.load.recording import finish_recording
    from lpxtop.load.server_window import ServerWatch

    scrape = not args.no_metrics
    engine = build_load_engine(plan, ui=not args.no_ui, scrape=scrape, readings=not args.no_record)
    watch = ServerWatch(plan.endpoint.name, plan.endpoint.effective_metrics_url if scrape else None, plan.endpoint.model)
    engine.add_listener(watch.on_engine_event)
    controller = LoadController(plan, server_watch=watch, requests_out=requests_out or None)
    try:
        otlp = attach_otlp(engine, controller, args)
        chain = attach_chain(engine, controller, args)  # --traces-listen: each step's server spans
    except ConfigError as exc:
        print(f"lpxtop load: {exc}", file=sys.stderr)
        return 2
    recorder = attach_recorder(engine, controller, args)
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # a thread holding the interpreter lock delays a timestamp at most ~1 ms
    stopped_by: int | None = None  # the signal that stopped the test (SIGINT: Ctrl-C; SIGTERM)
    try:
        if args.no_ui:
            stopped_by = _run_headless(engine, controller)
        else:
            code = _run_dashboard(engine, controller, args, recorder)
            if code == 2:
                return code
            stopped_by = {130: signal.SIGINT, 128 + signal.SIGTERM: signal.SIGTERM}.get(code)
    finally:
        controller.stop()
        controller.wait(STOP_WAIT_S)
        finish_chain(chain)
        engine.stop()
        record_path = finish_recording(recorder)
        stop_otlp(otlp, prog="lpxtop load")
    if recorder is not None and recorder.failure is not None:
        print(f"lpxtop load: recording stopped: {recorder.failure}", file=sys.stderr)
    return _report(plan, controller, args, stopped_by, str(record_path) if record_path else None, watch)


def _start(engine, controller) -> None:
    engine.start()
    gc.collect()
    gc.freeze()  # what start-up made lives as long as the test: later collections need not scan it
    controller.start()


def _run_headless(engine, controller) -> int | None:
    """Run to the end with progress on stderr; Ctrl-C or SIGTERM (systemd, CI runners, `timeout`) stops at
    once, and the report of what finished is still written. Returns the signal that stopped it, or None."""
    stopped_by: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum, frame) -> None:
        if stopped_by:
            raise KeyboardInterrupt  # a second one: stop waiting
        stopped_by.append(signum)
        controller.stop()

    for sig in previous:
        with contextlib.suppress(ValueError):  # not the main thread: keep Python's default
            signal.signal(sig, on_signal)
    try:
        _start(engine, controller)
        progress = _Progress(controller)
        while not controller.wait(0.5):
            progress.show()
        progress.show()
    except KeyboardInterrupt:
        if not stopped_by:
            stopped_by.append(signal.SIGINT)
    finally:
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)
    return stopped_by[0] if stopped_by else None


class _Progress:
    """One stderr line when a step starts its window and when it ends."""

    def __init__(self, controller) -> None:
        self.controller = controller
        self._printed: set[tuple] = set()

    def show(self) -> None:
        state = self.controller.state()
        if state.step_index is not None and state.phase == "measuring":
            key = ("measuring", state.step_index)
            if key not in self._printed:
                self._printed.add(key)
                print(f"lpxtop load: step {state.step_index + 1}: {format_level(state.mode, state.level)}, "
                      f"measuring for {format_duration(state.duration_s)}", file=sys.stderr, flush=True)
        for step in state.steps:
            key = ("done", step.index)
            if key in self._printed:
                continue
            self._printed.add(key)
            verdict = "" if step.slo_met is None else ("  SLO met" if step.slo_met else "  SLO missed")
            tput = f"{step.output_throughput:.1f}" if step.output_throughput is not None else "--"
            ttft = f"{step.ttft_ms.p50:.1f}" if step.ttft_ms else "--"
            print(f"lpxtop load: step {step.index + 1} {step.status}: {step.completed} ok, {step.failed} failed, "
                  f"{tput} tok/s, TTFT p50 {ttft} ms{verdict}", file=sys.stderr, flush=True)


def _run_dashboard(engine, controller, args, recorder) -> int:
    """The dashboard until `q` (0) or Ctrl-C (130); 2 when it cannot open (a theme error). `recorder`: the
    run's recording (`b` bookmarks a moment of the test), or None."""
    from lpxtop.load.source import LoadSource
    from lpxtop.ui.app import create_app
    from lpxtop.ui.theming import ThemeError

    source = LoadSource(engine, controller,
                        report_files=tuple(path for path in (args.json, args.csv) if path and path != "-"))

    def on_ready() -> None:
        import asyncio

        # SIGTERM ends the dashboard as `q` does (the report is written), with 143 for the exit status
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGTERM, lambda: app.exit(return_code=128 + signal.SIGTERM))
        _start(engine, controller)

    try:
        app = create_app(source, theme=args.theme, refresh_s=args.refresh, readonly=args.readonly,
                         on_ready=on_ready, recorder=recorder)
    except ThemeError as exc:
        print(f"lpxtop load: {exc}", file=sys.stderr)
        return 2
    with logs_held_while_drawing():
        app.run()
    return app.return_code or 0


def _report(plan: LoadPlan, controller, args, stopped_by: int | None, record_path: str | None, watch) -> int:
    from lpxtop.load.report import dumps, report_json, step_table, steps_csv, write_text

    if controller.running:
        print("lpxtop load: the test did not stop in time; writing what finished", file=sys.stderr)
    state = controller.state()
    warnings = [w for w in (controller.prefix_cache_warning,) if w]
    if not plan.endpoint.random_prefix:
        warnings.append("--no-random-prefix: prefix caching may hide prefill time")
    limited = [s.index + 1 for s in state.steps if s.client.limited]
    if limited:
        warnings.append(f"steps {', '.join(map(str, limited))} were client-limited (lpxtop short of CPU or file descriptors): "
                        "never chosen as the capacity")
    outcome = controller.outcome
    if stopped_by is not None and outcome == "done":
        outcome = "stopped"
    report = report_json(state, plan_summary=plan.summary(), outcome=outcome, error=controller.error,
                         server_kind=watch.kind, warnings=warnings, started_at=controller.started_at,
                         finished_at=controller.finished_at or time.time())
    report["recording"] = record_path  # the file `lpxtop replay` opens (null with --no-record)
    human = sys.stderr if args.json == "-" or args.csv == "-" else sys.stdout
    if state.steps:
        print(step_table(state), file=human, flush=True)  # first: a file that cannot be written loses nothing
    try:
        if args.json:
            write_text(args.json, dumps(report))
        if args.csv:
            write_text(args.csv, steps_csv(state.steps))
    except OSError as exc:
        print(f"lpxtop load: cannot write the report: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if controller.outcome == "target_down":
        print(f"lpxtop load: {controller.error}", file=sys.stderr)
        return 1
    if controller.outcome == "error":
        print(f"lpxtop load: the test failed: {controller.error}", file=sys.stderr)
        return 1
    if state.capacity is not None:
        print(state.capacity.sentence, file=human)
    for warning in warnings:
        print(f"lpxtop load: warning: {warning}", file=sys.stderr)
    if record_path:
        print(f"lpxtop load: recorded to {record_path} (lpxtop replay {record_path}: n jumps from step to step)",
              file=human)
    if stopped_by is not None:
        name = "SIGTERM" if stopped_by == signal.SIGTERM else "Ctrl-C"
        print(f"lpxtop load: stopped ({name}); the step under way is reported as partial", file=sys.stderr)
        return 128 + int(stopped_by)
    if args.fail_on_slo and plan.slo is not None and _slo_missed(plan, state):
        return 3
    return 0


def _slo_missed(plan: LoadPlan, state) -> bool:
    if plan.search:
        return state.capacity is None or state.capacity.level is None
    return any(s.slo_met is False for s in state.steps)
