"""Listening TCP sockets and their owners, and which host names and addresses are this machine.

On Linux the listeners come from the kernel (sock_diag, else /proc/net/tcp) and their owners from a cache
(`ListenerScanner`); psutil elsewhere. Everything here is blocking and never raises for a socket or a
process that vanished or that we may not inspect.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import psutil


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
