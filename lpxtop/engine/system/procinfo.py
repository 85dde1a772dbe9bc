"""Processes and listening sockets as psutil sees them: one scan, shared by ports, leftovers and discovery.
On Linux the listeners come from the kernel directly and their owners from a cache (ListenerScanner).

Everything here is blocking (it reads /proc) and never raises for a process that vanished or that we may
not inspect: such a process simply carries fewer facts (no user, empty command line).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import psutil

from lpxtop.textsafe import scrub

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


def _program_start(argv: Sequence[str]) -> tuple[int | None, str]:
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
    start, how = _program_start(argv)
    if start is None:
        return "" if how == "code" else os.path.basename(argv[0])
    if how == "module":
        return " ".join(argv[start:])
    return " ".join([os.path.basename(argv[start]), *argv[start + 1 :]])


# Paths that say where a program was installed, not what it does: a virtual environment's or a system's
# bin directory, site-packages. Shown by their base name.
_INSTALL_PATH = re.compile(r"^/\S*/(?:bin|sbin|site-packages|dist-packages)/[^/]+$")


def display_command(cmdline: str) -> str:
    """What a process runs, for a narrow column: ``vllm serve MODEL …``, ``python -m sglang.launch_server
    …``, ``lpxtop sim --port 18000``; never ``/home/u/.venv/bin/python3 /home/u/.venv/bin/vllm …``.

    `cmdline` is a shown command line (already redacted: `ProcInfo.cmdline`), split at spaces: the
    interpreter's and the program's paths become base names (a script run by Python is named by itself,
    a ``-m`` module as ``python -m MODULE``), and so does an argument that is an installed program's path;
    a path under the home directory starts with ``~``. Other arguments (a model's path) stay as they are."""
    argv = printable(cmdline).split()
    if not argv:
        return ""
    start, how = _program_start(argv)
    if how == "module":
        words = ["python", "-m", *argv[start:]]  # type: ignore[misc]
    elif start is None:  # python -c CODE, or a bare interpreter
        words = ["python", *argv[1:]]
    else:
        words = [os.path.basename(argv[start]), *argv[start + 1 :]]
    home = os.path.expanduser("~").rstrip("/")
    out = []
    for word in words:
        if _INSTALL_PATH.match(word):
            word = os.path.basename(word)
        elif home and home != "/" and (word == home or word.startswith(home + "/")):
            word = "~" + word[len(home):]
        out.append(word)
    return " ".join(out)


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


# Options whose value is a secret: vLLM/SGLang/llama-server `--api-key`, vLLM's `--api-keys`, TGI's
# `--api-key`, `--hf-token`, `--token`, `--admin-api-key`, `--bearer`/`--bearer-token`, `--password`,
# `--credentials` …, in the separate (`--api-key X`) and `=`-joined (`--api-key=X`) forms; the short `-k`
# (the value that follows); and NAME=value words such as `env OPENAI_API_KEY=sk-…`. A
# `--max-num-batched-tokens` keeps its value: only names ending in the secret word count.
_SECRET_WORDS = r"(?:keys?|tokens?(?<!_tokens)(?<!-tokens)|secrets?|password|passwd|auth|bearer|credentials?)"
_SECRET_OPTION = re.compile(rf"^(?:--?(?:[\w-]*[-_])?{_SECRET_WORDS}|-k)$", re.IGNORECASE)
_SECRET_ASSIGN = re.compile(rf"^(--?(?:[\w-]*[-_])?{_SECRET_WORDS}=)", re.IGNORECASE)
_SECRET_ENV = re.compile(r"^([A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|BEARER|CREDENTIALS?)[A-Za-z0-9_]*=)",
                         re.IGNORECASE)
REDACTED = "***"


def redact_argv(argv: Sequence[str]) -> list[str]:
    """`argv` made safe to show: the values of secret-bearing options replaced by ``***`` (API keys never
    leave lpxtop), and each word through `textsafe.scrub` (registered secrets, terminal escapes: a
    process picks its own command line). Every path that shows a command line goes through here."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        m = _SECRET_ASSIGN.match(arg) or _SECRET_ENV.match(arg)
        # newlines are kept (a one-line message shows them escaped: `printable`); escapes go
        if m:
            out.append((scrub(m.group(1), newlines=True) or "") + REDACTED)
        else:
            out.append(scrub(arg, newlines=True) or "")
            hide_next = bool(_SECRET_OPTION.match(arg))
    return out


def safe_name(name: str | None) -> str | None:
    """A process name (the kernel's `comm`, which the process sets itself) made safe to show."""
    return scrub(name)


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


@dataclass(frozen=True)
class ProcInfo:
    """The facts about one process that ports and leftovers need; any of them may be missing."""

    pid: int
    ppid: int | None
    name: str
    argv: tuple[str, ...]
    user: str | None
    started_at: float | None
    status: str | None

    @cached_property
    def cmdline(self) -> str:
        """The command line for display and export, with secrets (``--api-key X``) masked."""
        return " ".join(redact_argv(self.argv))

    @cached_property
    def server(self) -> ServerPattern | None:
        return match_server(self.name, self.argv)

    @property
    def label(self) -> str:
        """The command line, or the name when the command line is hidden or empty (zombies, kernel)."""
        return self.cmdline or self.name or f"PID {self.pid}"


# What is read once per process: name, argv, user, start time.
_Static = tuple[str, tuple[str, ...], str | None, float | None]


class ProcessScanner:
    """Scans every process this user may see; keeps what never changes for a process's life.

    A process's name, command line, user and start time are fixed once it runs (short of setproctitle,
    which servers call at start-up), so they are read once per process; each later scan reads only
    its parent and state. On Linux that is one read of /proc/PID/stat per process, keyed by PID and
    start time (a reused PID is a new process); elsewhere psutil's process_iter, keyed the same way.
    A host with a thousand processes (kernel threads count) made psutil's scan the port check's
    largest cost: ~45 µs a process against ~21 µs for the direct read (measured on 63 processes).
    """

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc
        self._direct = sys.platform.startswith("linux") and os.path.isdir(proc)
        self._static: dict[object, _Static] = {}

    def scan(self) -> dict[int, ProcInfo]:
        if self._direct:
            try:
                return self._scan_proc()
            except OSError:
                pass  # /proc unreadable as a whole: psutil says what it can
        return self._scan_psutil()

    def _scan_proc(self) -> dict[int, ProcInfo]:
        table: dict[int, ProcInfo] = {}
        static: dict[object, _Static] = {}
        for entry in os.listdir(self._proc):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                with open(f"{self._proc}/{entry}/stat", "rb") as f:
                    stat = f.read()
                # "pid (comm) state ppid ... starttime(22nd) ...": comm may hold spaces and parentheses
                fields = stat[stat.rindex(b")") + 2 :].split()
                state, ppid, started = fields[0].decode("ascii", "replace"), int(fields[1]), int(fields[19])
            except (OSError, ValueError, IndexError):
                continue  # gone since the listing, or not a process we may see
            key = (pid, started)
            known = self._static.get(key)
            if known is None or _young(known[3]):
                try:
                    known = _static_facts(psutil.Process(pid))
                except (psutil.NoSuchProcess, psutil.ZombieProcess):
                    continue
                except (psutil.Error, OSError):
                    known = self._static.get(key) or ("", (), None, None)
            static[key] = known
            table[pid] = ProcInfo(pid=pid, ppid=ppid, name=known[0], argv=known[1], user=known[2],
                                  started_at=known[3], status=_STATES.get(state, state))
        self._static = static  # forget processes that are gone (bounded by the live process count)
        return table

    def _scan_psutil(self) -> dict[int, ProcInfo]:
        table: dict[int, ProcInfo] = {}
        static: dict[object, _Static] = {}
        try:
            for proc in psutil.process_iter():
                try:
                    with proc.oneshot():
                        ppid, status = proc.ppid(), proc.status()
                        known = self._static.get(proc)
                        if known is None or _young(known[3]):
                            known = _static_facts(proc)
                except (psutil.NoSuchProcess, psutil.ZombieProcess):
                    continue
                except (psutil.Error, OSError):
                    ppid, status, known = None, None, self._static.get(proc) or ("", (), None, None)
                static[proc] = known
                table[proc.pid] = ProcInfo(pid=proc.pid, ppid=ppid, name=known[0], argv=known[1], user=known[2],
                                           started_at=known[3], status=status)
        except (psutil.Error, OSError):
            pass  # a partial table is still useful; the caller treats missing PIDs as unknown
        self._static = static  # forget processes that are gone (bounded by the live process count)
        return table


# /proc/PID/stat's state letter as psutil names it (proc(5))
_STATES = {
    "R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie",
    "X": "dead", "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle", "P": "parked",
}


def _static_facts(proc: psutil.Process) -> _Static:
    """Name, argv, user and start time: read once per process. The name is outside text, made safe
    here (the command line is made safe where it is shown: `redact_argv`)."""
    return (safe_name(_safe(proc.name, "")) or "", tuple(_safe(proc.cmdline, ()) or ()), _safe(proc.username, None),
            _safe(proc.create_time, None))


def _young(started_at: float | None) -> bool:
    """Started in the last 30 s: it may still rename itself (setproctitle), so read it again."""
    return started_at is None or time.time() - started_at < 30.0


def _safe(getter, default):
    try:
        return getter()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return default


def scan_processes() -> dict[int, ProcInfo]:
    """Every process this user may see, with what /proc lets us read about it (one-off scan)."""
    return ProcessScanner().scan()


def ancestors(pid: int, table: Mapping[int, ProcInfo], limit: int = 64) -> list[int]:
    """Parent, grandparent, … of `pid` as far as the table knows (bounded against loops)."""
    chain: list[int] = []
    info = table.get(pid)
    while info is not None and info.ppid and info.ppid not in chain and len(chain) < limit:
        chain.append(info.ppid)
        info = table.get(info.ppid)
    return chain


def children_map(table: Mapping[int, ProcInfo]) -> dict[int, list[int]]:
    """ppid -> child PIDs, built once per scan."""
    kids: dict[int, list[int]] = {}
    for info in table.values():
        if info.ppid is not None:
            kids.setdefault(info.ppid, []).append(info.pid)
    return kids


def descendants(pid: int, kids: Mapping[int, list[int]], limit: int = 4096) -> list[int]:
    """All PIDs below `pid` (bounded)."""
    out: list[int] = []
    todo = list(kids.get(pid, ()))
    seen = {pid}
    while todo and len(out) < limit:
        child = todo.pop()
        if child in seen:
            continue
        seen.add(child)
        out.append(child)
        todo.extend(kids.get(child, ()))
    return out


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket. `pid` is None when the owner is hidden from us (another user's process).

    `uid` is who created the socket as the kernel records it (sock_diag, /proc/net/tcp), None where
    psutil was asked; it names the user when the PID is hidden, and takes no part in comparisons.
    """

    ip: str
    port: int
    pid: int | None
    uid: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ListenScan:
    """All listening TCP sockets lpxtop could see.

    `complete` is False when the system-wide table was refused and we fell back to scanning the
    processes we may inspect: a port missing from `by_port` may then still be in use.
    """

    by_port: Mapping[int, tuple[Listener, ...]]
    complete: bool
    error: str | None = None


def _process_connections(proc: psutil.Process) -> list:
    # psutil 6 renamed Process.connections() to net_connections(); keep both working.
    method = getattr(proc, "net_connections", None) or proc.connections
    return method(kind="inet")


_TCP_LISTEN = "0A"  # the `st` column of a listening socket (TCP_LISTEN = 10, printed %02X)


@dataclass(frozen=True)
class TcpListenRow:
    """One listening TCP socket as the kernel lists it (sock_diag, /proc/net/tcp), before any owner is
    looked up.

    `uid` is the socket's uid as the kernel records it (its creator's), not the holder's: a process may
    change user after it listens, so it never stands in for a PID.
    """

    ip: str
    port: int
    uid: int
    inode: int


def parse_proc_net_tcp(text: str, byteorder: str = sys.byteorder) -> list[TcpListenRow]:
    """The LISTEN rows of a /proc/net/tcp or /proc/net/tcp6 text; ValueError on a line it cannot read.

    Only state 0A is decoded: a busy server has thousands of established connections we do not need,
    so every other line is split just far enough to read its state.
    """
    rows: list[TcpListenRow] = []
    for line in text.splitlines()[1:]:  # the first line is the column header
        head = line.split(None, 4)
        if not head:
            continue
        if len(head) < 5:
            raise ValueError(f"malformed /proc/net/tcp line: {line!r}")
        if head[3] != _TCP_LISTEN:
            continue
        fields = line.split()
        if len(fields) < 10:
            raise ValueError(f"malformed /proc/net/tcp line: {line!r}")
        hex_ip, _, hex_port = fields[1].partition(":")
        port = int(hex_port, 16)
        if port:  # psutil skips port 0 too (a listen() racing its bind)
            rows.append(TcpListenRow(_kernel_ip(hex_ip, byteorder), port, int(fields[7]), int(fields[9])))
    return rows


def _kernel_ip(hex_ip: str, byteorder: str) -> str:
    """``0100007F`` -> ``127.0.0.1``: the kernel prints each 32-bit word of the address as a host-order
    integer, so on a little-endian machine every 4-byte group comes out reversed (IPv6: four groups)."""
    raw = bytes.fromhex(hex_ip)
    if byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) not in (4, 16):
        raise ValueError(f"not an IPv4 or IPv6 address: {hex_ip!r}")
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def listen_rows_proc(proc: str = "/proc") -> list[TcpListenRow]:
    """LISTEN rows of /proc/net/tcp and tcp6. Each file read walks the kernel's whole established-socket
    hash (262144 buckets on a 24 GiB machine): milliseconds, even with no connections at all."""
    rows = []
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{name}", encoding="ascii") as f:
                text = f.read()
        except FileNotFoundError:
            if name == "tcp6":
                continue  # IPv6 disabled in this kernel: no tcp6 table, nothing listens on it
            raise
        rows.extend(parse_proc_net_tcp(text))
    return rows


# sock_diag over netlink, as `ss -lt` asks: linux/sock_diag.h, linux/inet_diag.h, linux/netlink.h.
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST_DUMP = 0x001 | 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_TCP_LISTEN_STATE = 10
_DIAG_MSG_SIZE = 72  # struct inet_diag_msg: sport at 4, src at 8, uid at 64, inode at 68


def listen_rows_sock_diag(timeout_s: float = 1.0) -> list[TcpListenRow]:
    """Listening TCP sockets from the kernel's sock_diag netlink interface, which `ss -lt` uses.

    Asked for listeners only, the kernel walks just its listening hash instead of every socket bucket
    (/proc/net/tcp): about a hundred times cheaper here. Unprivileged, and scoped to our network
    namespace like /proc/net. OSError or ValueError where the kernel or a sandbox lacks it, or answers
    what we cannot read.
    """
    rows: list[TcpListenRow] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(timeout_s)  # a kernel that never answers must not hang the port check
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), 1):
            # struct inet_diag_req_v2: family, protocol, extensions, pad, states, an empty socket id
            request = struct.pack("=BBBBI48x", family, socket.IPPROTO_TCP, 0, 0, 1 << _TCP_LISTEN_STATE)
            header = _NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY,
                                        _NLM_F_REQUEST_DUMP, seq, 0)
            nl.send(header + request)
            while not _read_diag_batch(nl.recv(1 << 16), rows):
                pass
    return rows


def _read_diag_batch(data: bytes, rows: list[TcpListenRow]) -> bool:
    """Appends the listeners of one netlink read to `rows`; True once the dump is done."""
    if not data:
        raise ValueError("sock_diag: empty read")
    off = 0
    while off < len(data):
        if off + _NLMSG_HEADER.size > len(data):
            raise ValueError("sock_diag: truncated header")
        length, kind = _NLMSG_HEADER.unpack_from(data, off)[:2]
        if length < _NLMSG_HEADER.size or off + length > len(data):
            raise ValueError("sock_diag: truncated message")
        body = off + _NLMSG_HEADER.size
        if kind == _NLMSG_DONE:
            return True
        if kind == _NLMSG_ERROR:
            err = -struct.unpack_from("=i", data, body)[0] if length >= _NLMSG_HEADER.size + 4 else 0
            raise OSError(err, f"sock_diag: {os.strerror(err)}")
        if length < _NLMSG_HEADER.size + _DIAG_MSG_SIZE:
            raise ValueError("sock_diag: short inet_diag_msg")
        family, state = data[body], data[body + 1]
        (port,) = struct.unpack_from("!H", data, body + 4)
        if state == _TCP_LISTEN_STATE and port and family in (socket.AF_INET, socket.AF_INET6):
            size = 4 if family == socket.AF_INET else 16
            uid, inode = struct.unpack_from("=II", data, body + 64)
            ip = socket.inet_ntop(family, data[body + 8 : body + 8 + size])
            rows.append(TcpListenRow(ip, port, uid, inode))
        off += (length + 3) & ~3  # NLMSG_ALIGN
    return False


class ListenerScanner:
    """Listening TCP sockets from the kernel, with owners found by socket inode in /proc (Linux).

    psutil.net_connections() decodes every TCP and UDP socket and readlinks every fd of every process on
    each call, which on an inference server (many processes, thousands of fds) is most of the port
    check's CPU. Listeners rarely change, so here:

    - only listeners are read: from sock_diag (what `ss -lt` asks), else the LISTEN rows of
      /proc/net/tcp and tcp6;
    - an owner found once is re-checked with one readlink of the fd it was found at (``socket:[inode]``
      still there means that process still holds the socket; a closed or reused fd, or a dead or reused
      PID, reads otherwise and sends us looking again);
    - only inodes without a confirmed owner send us through /proc/PID/fd, newest PID first as psutil's
      answer for a shared socket is its highest PID, stopping as soon as every one is found;
    - an inode no readable process holds (another user's process as non-root, another PID namespace)
      keeps pid None, as psutil gives, and is looked for again only after `recheck_s`: a normal user
      with sshd on port 22 must not pay a full walk every scan. A readable process that gets such a
      socket later (fd passing) shows its PID after at most `recheck_s`.

    A confirmed owner stays while it holds the socket, even if a newer process shares it later (a
    forked worker), so the PID shown for a port does not flap. Both caches keep only inodes listening
    at the last scan. Thread-safe: the engine's port check and discovery may scan at once.
    """

    def __init__(self, proc: str = "/proc", recheck_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, netlink: bool = True) -> None:
        """`netlink`: ask sock_diag for the listeners (falls back to /proc/net/tcp for good on a
        failure); False reads /proc/net/tcp from the start."""
        self._netlink = netlink
        self._proc = proc
        self._recheck_s = recheck_s
        self._clock = clock
        self._lock = threading.Lock()
        self._owners: dict[int, tuple[int, int]] = {}  # inode -> (pid, fd) where it was last seen
        self._unowned: dict[int, float] = {}  # inode -> when a walk last failed to find it

    def scan(self) -> ListenScan:
        """Every listening TCP socket; OSError or ValueError when the kernel's tables cannot be read."""
        with self._lock:
            rows = self._read_rows()
            live = {row.inode for row in rows if row.inode}
            self._owners = {i: o for i, o in self._owners.items() if i in live}
            self._unowned = {i: t for i, t in self._unowned.items() if i in live}
            now = self._clock()
            wanted: set[int] = set()
            for inode in live:
                owner = self._owners.get(inode)
                if owner is not None and self._holds(owner, inode):
                    continue
                self._owners.pop(inode, None)
                missed = self._unowned.get(inode)
                if missed is None or now - missed >= self._recheck_s:
                    wanted.add(inode)
            if wanted:
                found = self._find_owners(wanted)
                self._owners.update(found)
                for inode in wanted:
                    if inode in found:
                        self._unowned.pop(inode, None)
                    else:
                        self._unowned[inode] = now
            by_port: dict[int, list[Listener]] = {}
            for row in rows:
                owner = self._owners.get(row.inode)
                listener = Listener(row.ip, row.port, owner[0] if owner else None, row.uid)
                by_port.setdefault(row.port, []).append(listener)
            return ListenScan({p: tuple(ls) for p, ls in by_port.items()}, complete=True)

    def cached_owners(self) -> dict[int, int]:
        """inode -> PID as remembered since the last scan (a copy; for tests and debugging)."""
        with self._lock:
            return {inode: pid for inode, (pid, _) in self._owners.items()}

    def _read_rows(self) -> list[TcpListenRow]:
        if self._netlink:
            try:
                return listen_rows_sock_diag()
            except (OSError, ValueError):
                self._netlink = False  # not in this kernel or sandbox: /proc/net/tcp from now on
        return listen_rows_proc(self._proc)

    def _holds(self, owner: tuple[int, int], inode: int) -> bool:
        pid, fd = owner
        try:
            return os.readlink(f"{self._proc}/{pid}/fd/{fd}") == f"socket:[{inode}]"
        except OSError:
            return False

    def _find_owners(self, wanted: set[int]) -> dict[int, tuple[int, int]]:
        """(pid, fd) of the newest readable process holding each wanted inode, as far as found."""
        targets = {f"socket:[{inode}]": inode for inode in wanted}
        found: dict[int, tuple[int, int]] = {}
        pids = sorted((int(name) for name in os.listdir(self._proc) if name.isdigit()), reverse=True)
        for pid in pids:
            fd_dir = f"{self._proc}/{pid}/fd"
            try:
                fds = os.listdir(fd_dir)
            except OSError:
                continue  # gone, or not ours to read (EACCES): its sockets keep pid None
            for fd in fds:
                try:
                    inode = targets.pop(os.readlink(f"{fd_dir}/{fd}"), None)
                except OSError:
                    continue  # closed meanwhile
                if inode is not None:
                    found[inode] = (pid, int(fd))
                    if not targets:
                        return found
        return found


_LISTENERS = ListenerScanner()


def scan_listeners() -> ListenScan:
    """Listening TCP sockets: from the kernel and /proc on Linux (cheap and cached, see ListenerScanner);
    psutil's system-wide table elsewhere or when those cannot be read; a per-process scan when that is
    refused."""
    if sys.platform.startswith("linux"):
        try:
            return _LISTENERS.scan()
        except (OSError, ValueError):
            pass  # neither sock_diag nor a readable /proc (a sandbox, an odd kernel): psutil's way
    return _psutil_listeners()


def _psutil_listeners() -> ListenScan:
    """Listening TCP sockets: one system-wide call, or a per-process scan when that call is refused."""
    found: list[Listener] = []
    complete = True
    error = None
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr:
                found.append(Listener(conn.laddr.ip, conn.laddr.port, conn.pid))
    except (psutil.AccessDenied, PermissionError, OSError) as exc:
        # macOS and hardened Linux refuse the system-wide table to non-root users: fall back to the
        # processes we may inspect (our own); other users' listeners stay invisible.
        complete = False
        error = f"listening sockets: {type(exc).__name__}"
        found = []
        for proc in psutil.process_iter():
            try:
                conns = _process_connections(proc)
            except (psutil.Error, OSError):
                continue
            for conn in conns:
                if conn.status == psutil.CONN_LISTEN and conn.laddr:
                    found.append(Listener(conn.laddr.ip, conn.laddr.port, proc.pid))
    by_port: dict[int, list[Listener]] = {}
    for listener in found:
        by_port.setdefault(listener.port, []).append(listener)
    return ListenScan({p: tuple(ls) for p, ls in by_port.items()}, complete, error)


def tcp_connects(host: str, port: int, timeout_s: float = 0.3) -> bool:
    """Whether something accepts a TCP connection on host:port (closed at once, nothing is sent)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def local_names_and_addresses() -> frozenset[str]:
    """This host's names and interface addresses (lower case). No DNS lookups: they can block."""
    names = set(_LOOPBACK_NAMES)
    try:
        hostname = socket.gethostname().lower()
        names.add(hostname)
        names.add(hostname.split(".")[0])
    except OSError:
        pass
    try:
        for addrs in psutil.net_if_addrs().values():
            for addr in addrs:
                if addr.family in (socket.AF_INET, socket.AF_INET6):
                    names.add(addr.address.split("%")[0].lower())
    except (psutil.Error, OSError):
        pass
    return frozenset(names)


def is_local_host(host: str, local: Iterable[str]) -> bool:
    """Whether `host` (a name or an IP literal from an endpoint URL) is this machine."""
    host = host.strip("[]").lower()
    if not host:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host in local or host.endswith(".localhost")
    return ip.is_loopback or ip.is_unspecified or str(ip) in local


def format_age(seconds: float | None) -> str:
    """``"3 h"`` style age for messages; ``"?"`` when unknown."""
    if seconds is None:
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def printable(text: str) -> str:
    """`text` with control characters escaped (``\\n``, ``\\x1b``): a process picks its own command
    line, and a newline or a terminal escape in it must not break a one-line message or the screen."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def short_command(cmdline: str, limit: int = 40) -> str:
    """The start of what a process runs (`display_command`: interpreter and install paths shortened) for
    one-line messages, cut at `limit` characters."""
    text = display_command(cmdline) or printable(cmdline)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def format_bytes(n: int) -> str:
    """GiB/MiB for memory in messages."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{n / (1 << 20):.0f} MiB"
