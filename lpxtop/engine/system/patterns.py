"""The inference servers lpxtop knows by their processes: one table of patterns, matched against the
program line (what a process runs, without the interpreter's path), and the ports a command line names."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

# One table of the inference servers lpxtop knows. Each pattern is matched against the program line:
# the program (the script or `-m` module when an interpreter runs it) and its arguments, so that
# `/venv/bin/python3 /venv/bin/vllm serve m` reads "vllm serve m" and `cmake --target llama-server`
# matches nothing. Process titles set with setproctitle (vLLM "VLLM::EngineCore", "VLLM::Worker_TP0";
# SGLang "sglang::scheduler_TP0"; Ray "ray::RayWorkerWrapper") replace the whole command line.
# `leftover` is False for lpxtop's own simulated server: it is a server (so no port conflict), but a
# stray `lpxtop sim` is the user's toy, not a crashed worker holding a GPU.


@dataclass(frozen=True)
class ServerPattern:
    """How to recognise one kind of inference-server process.

    `worker` marks a server's internal processes (engine cores, shards, runners): their listening
    sockets are internal (torch.distributed, ZMQ, gRPC), never the HTTP API, so discovery skips them.
    """

    kind: str
    pattern: re.Pattern[str]
    leftover: bool = True
    worker: bool = False


def _program(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"^(?:{pattern})(?=\s|$)")


SERVER_PATTERNS: tuple[ServerPattern, ...] = (
    ServerPattern("vllm", _program(r"vllm\s+serve|vllm\.entrypoints\.\S+|VLLM::APIServer\S*")),
    ServerPattern("vllm", re.compile(r"^VLLM::|^ray::RayWorkerWrapper"), worker=True),
    ServerPattern("sglang", _program(r"sglang\.launch_server|sglang\s+serve")),
    ServerPattern("sglang", re.compile(r"^sglang::"), worker=True),
    ServerPattern("tgi", _program(r"text-generation-(?:launcher|router)")),
    ServerPattern("tgi", _program(r"text-generation-server"), worker=True),
    ServerPattern("llamacpp", _program(r"llama-server|llama_cpp\.server")),
    ServerPattern("ollama", _program(r"ollama\s+serve")),
    ServerPattern("ollama", _program(r"ollama\s+runner|ollama_llama_server"), worker=True),
    ServerPattern("triton", _program(r"tritonserver")),
    ServerPattern("trtllm", _program(r"trtllm-serve|tensorrt_llm\.commands\.serve")),
    ServerPattern("lmdeploy", _program(r"lmdeploy\s+serve")),
    ServerPattern("lpxtop-sim", _program(r"lpxtop\.sim|lpxtop\s+(?:sim|demo)"), leftover=False),
)

_INTERPRETER = re.compile(r"^(?:python[\d.]*|pypy[\d.]*)$")
_OPTIONS_WITH_VALUE = {"-X", "-W", "-Q"}


def program_start(argv: Sequence[str]) -> tuple[int | None, str]:
    """Where the program starts in `argv` and how it is run: (index, "binary" | "script" | "module"), or
    (None, "code") for ``python -c CODE``, (None, "interpreter") for a bare interpreter."""
    if not _INTERPRETER.match(os.path.basename(argv[0])):
        return 0, "binary"
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return i + 1, "module"
        if arg == "-c":
            return None, "code"
        if arg.startswith("-"):
            i += 2 if arg in _OPTIONS_WITH_VALUE else 1
            continue
        return i, "script"
    return None, "interpreter"


def program_line(argv: Sequence[str]) -> str:
    """``"vllm serve m --port 8000"`` from ``["/venv/bin/python3", "/venv/bin/vllm", "serve", …]``.

    The program is argv[0]'s base name, or, when argv[0] is a Python interpreter, the script's base
    name or the ``-m`` module; ``python -c CODE`` has no program (empty string).
    """
    if not argv:
        return ""
    start, how = program_start(argv)
    if start is None:
        return "" if how == "code" else os.path.basename(argv[0])
    if how == "module":
        return " ".join(argv[start:])
    return " ".join([os.path.basename(argv[start]), *argv[start + 1 :]])


def match_server(name: str, argv: Sequence[str] | str) -> ServerPattern | None:
    """The first known-server pattern matching this process, or None.

    `argv` is the command line as a list (a string is split on whitespace); `name` is the kernel's
    process name, the only thing left of a zombie.
    """
    if isinstance(argv, str):
        argv = argv.split()
    for candidate in (program_line(argv), name):
        if not candidate:
            continue
        for entry in SERVER_PATTERNS:
            if entry.pattern.search(candidate):
                return entry
    return None


# Command-line options that name the HTTP port, per server (TGI/vLLM/SGLang/llama-server: --port;
# Triton: --http-port; LMDeploy: --server-port).
_PORT_OPTION = re.compile(r"(?:^|\s)(?:--port|--http-port|--server-port)(?:=|\s+)(\d{1,5})(?=\s|$)")


def ports_in_cmdline(cmdline: str) -> tuple[int, ...]:
    """HTTP ports named on a server's command line (``--port 8011``, ``--http-port=8000``)."""
    ports = []
    for m in _PORT_OPTION.finditer(cmdline):
        port = int(m.group(1))
        if 0 < port < 65536 and port not in ports:
            ports.append(port)
    return tuple(ports)
