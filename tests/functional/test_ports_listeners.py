"""scan_listeners()'s Linux path (ListenerScanner) against real sockets, processes and users.

Every answer is checked against psutil.net_connections() for the same ports: the new path must say
exactly what the psutil path said, only cheaper. Each test runs with the listeners read both ways
(sock_diag netlink, /proc/net/tcp text). Tests run as root; the non-root view is a forked child that
really is user nobody.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator

import psutil
import pytest

from lpxtop.engine.system import listeners
from lpxtop.engine.system.listeners import Listener, ListenerScanner
from lpxtop.engine.system.ports import PortMonitor
from lpxtop.model.endpoint import EndpointConfig
from tests.support.ports import REUSEPORT_LISTENER, SLEEPER, listener_pids, running_children
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux /proc"),
]

NOBODY = 65534


@pytest.fixture
def children(tmp_path):
    with running_children(tmp_path) as kids:
        yield kids


@pytest.fixture(params=["sock_diag", "proc_net"])
def new_scanner(request) -> Callable[..., ListenerScanner]:
    """Makes ListenerScanners that read the listeners one way: sock_diag netlink or /proc/net/tcp."""
    netlink = request.param == "sock_diag"
    if netlink:
        try:
            listeners.listen_rows_sock_diag()
        except OSError as exc:
            pytest.skip(f"no sock_diag here: {exc}")

    def make(**kwargs) -> ListenerScanner:
        return ListenerScanner(netlink=netlink, **kwargs)

    return make


@contextlib.contextmanager
def listening(host: str = "127.0.0.1") -> Iterator[socket.socket]:
    """A socket of this process listening on `host` and a free port (skips when the address family is off)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        pytest.skip(f"no {family.name} sockets here: {exc}")
    with sock:
        try:
            sock.bind((host, 0))
        except OSError as exc:
            pytest.skip(f"cannot bind {host}: {exc}")
        sock.listen()
        yield sock


def psutil_view(ports: set[int]) -> set[tuple[str, int, int | None]]:
    """What the psutil path reports for these ports: (ip, port, pid) of each LISTEN entry."""
    return {
        (c.laddr.ip, c.laddr.port, c.pid)
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports
    }


def proc_view(scan: listeners.ListenScan, ports: set[int]) -> set[tuple[str, int, int | None]]:
    return {(ls.ip, ls.port, ls.pid) for port in ports for ls in scan.by_port.get(port, ())}


def inode(sock: socket.socket) -> int:
    return os.fstat(sock.fileno()).st_ino


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::1", "::"])
def test_listener_in_this_process(host, new_scanner):
    with listening(host) as sock:
        port = sock.getsockname()[1]
        scan = new_scanner().scan()
        assert scan.complete and scan.error is None
        assert scan.by_port[port] == (Listener(host, port, os.getpid()),)
        assert proc_view(scan, {port}) == psutil_view({port})


def test_listener_in_a_child_process(children, new_scanner):
    with listening() as probe:
        port = probe.getsockname()[1]
    proc = children.python(REUSEPORT_LISTENER, str(port))
    wait_for(lambda: listener_pids(port) == {proc.pid}, timeout=15)
    scanner = new_scanner()
    first = scanner.scan()
    assert first.by_port[port] == (Listener("127.0.0.1", port, proc.pid),)
    assert proc_view(first, {port}) == psutil_view({port})
    # Second scan: the owner comes from the cache, confirmed by one readlink; same answer.
    assert scanner.scan().by_port[port] == first.by_port[port]


def test_several_listeners_match_psutil(children, new_scanner):
    """IPv4 and IPv6, this process and two children sharing a port (SO_REUSEPORT): psutil's answer."""
    with listening() as v4, listening("::1") as v6:
        with listening() as probe:
            shared = probe.getsockname()[1]
        a = children.python(REUSEPORT_LISTENER, str(shared))
        b = children.python(REUSEPORT_LISTENER, str(shared))
        wait_for(lambda: listener_pids(shared) == {a.pid, b.pid}, timeout=15)
        ports = {v4.getsockname()[1], v6.getsockname()[1], shared}
        expected = psutil_view(ports)
        assert {pid for _, _, pid in expected} == {os.getpid(), a.pid, b.pid}
        assert proc_view(new_scanner().scan(), ports) == expected
        assert proc_view(listeners.scan_listeners(), ports) == expected  # the engine's entry point


def test_listener_closed_between_scans_is_gone_and_forgotten(new_scanner):
    scanner = new_scanner()
    with listening() as sock:
        port, ino = sock.getsockname()[1], inode(sock)
        assert scanner.scan().by_port[port][0].pid == os.getpid()
        assert scanner.cached_owners()[ino] == os.getpid()
    scan = scanner.scan()
    assert port not in scan.by_port
    assert ino not in scanner.cached_owners()  # the cache holds only what still listens
    # The same fd number may now hold a new listener: a new inode, found afresh.
    with listening() as again:
        assert scanner.scan().by_port[again.getsockname()[1]][0].pid == os.getpid()


def test_child_listener_killed_then_replaced_on_the_same_port(children, new_scanner):
    with listening() as probe:
        port = probe.getsockname()[1]
    scanner = new_scanner()
    first = children.python(REUSEPORT_LISTENER, str(port))
    wait_for(lambda: listener_pids(port) == {first.pid}, timeout=15)
    assert scanner.scan().by_port[port][0].pid == first.pid
    children.stop(first)
    wait_for(lambda: port not in scanner.scan().by_port, timeout=15)
    second = children.python(REUSEPORT_LISTENER, str(port))
    wait_for(lambda: listener_pids(port) == {second.pid}, timeout=15)
    scan = scanner.scan()
    assert scan.by_port[port] == (Listener("127.0.0.1", port, second.pid),)
    assert proc_view(scan, {port}) == psutil_view({port})


def test_shared_socket_follows_the_holder_that_keeps_it(new_scanner):
    """A socket held by two processes (a forked worker) is reported under one; when that one lets go,
    the next scan finds the other, as psutil would."""
    with listening() as sock:
        port = sock.getsockname()[1]
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        child = subprocess.Popen([sys.executable, "-c", SLEEPER], pass_fds=[sock.fileno()], **quiet)
        try:
            scanner = new_scanner()
            first = proc_view(scanner.scan(), {port})
            assert first == psutil_view({port})  # psutil names the newest holder
            (_, _, holder), = first
            assert holder in {os.getpid(), child.pid}
            if holder == child.pid:
                child.kill()
                child.wait(timeout=5)
                remaining = os.getpid()
            else:
                sock.close()
                remaining = child.pid
            second = proc_view(scanner.scan(), {port})
            assert second == {("127.0.0.1", port, remaining)} == psutil_view({port})
        finally:
            child.kill()
            child.wait(timeout=5)


def test_sock_diag_and_proc_net_tcp_agree():
    """The two ways of reading the listeners give the same rows (address, port, uid, inode)."""
    try:
        listeners.listen_rows_sock_diag()
    except OSError as exc:
        pytest.skip(f"no sock_diag here: {exc}")
    with listening() as v4, listening("::") as v6:
        ports = {v4.getsockname()[1], v6.getsockname()[1]}
        mine = {inode(v4), inode(v6)}

        def ours(rows: list[listeners.TcpListenRow]) -> set[listeners.TcpListenRow]:
            return {row for row in rows if row.port in ports}

        diag = ours(listeners.listen_rows_sock_diag())
        assert diag == ours(listeners.listen_rows_proc())
        assert {row.inode for row in diag} == mine and {row.uid for row in diag} == {os.geteuid()}


def test_unreadable_proc_falls_back_to_psutil(tmp_path, monkeypatch):
    with pytest.raises(OSError):
        ListenerScanner(proc=str(tmp_path), netlink=False).scan()  # no sock_diag, no /proc/net
    monkeypatch.setattr(listeners, "_LISTENERS", ListenerScanner(proc=str(tmp_path), netlink=False))
    with listening() as sock:
        port = sock.getsockname()[1]
        scan = listeners.scan_listeners()
        assert scan.complete and scan.by_port[port] == (Listener("127.0.0.1", port, os.getpid()),)


def as_nobody(work: Callable[[], object], timeout_s: float = 30.0) -> object:
    """`work()` run in a forked child that dropped to user nobody (no capabilities): its JSON result.

    Forked, not exec'd: the interpreter and the venv may be unreadable to nobody (/root is 0700).
    """
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            payload = json.dumps({"result": work()})
            status = 0
        except BaseException:
            payload = json.dumps({"error": traceback.format_exc()})
        with contextlib.suppress(BaseException):
            os.write(write_end, payload.encode())
        os._exit(status)
    os.close(write_end)
    try:
        chunks = []
        while select.select([read_end], [], [], timeout_s)[0]:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        answer = json.loads(b"".join(chunks) or b'{"error": "the child said nothing in time"}')
    finally:
        os.close(read_end)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert "error" not in answer, answer["error"]
    return answer["result"]


def test_non_root_sees_its_own_listeners_and_not_roots(new_scanner):
    """As psutil does for a normal user: another user's listener has pid None, one's own has its PID,
    and the port check names the socket's user and says to run as root."""
    with listening() as root_sock:
        root_port = root_sock.getsockname()[1]

        def work() -> dict:
            root_sock.close()  # the fork's copy: the socket is root's alone again
            with listening() as own:
                own_port = own.getsockname()[1]
                ports = {root_port, own_port}
                scan = new_scanner().scan()
                status = PortMonitor().collect(
                    [EndpointConfig(name="ep", url=f"http://127.0.0.1:{root_port}/v1")]
                )[0][0]
                return {
                    "pid": os.getpid(),
                    "own_port": own_port,
                    "complete": scan.complete,
                    "proc": sorted(proc_view(scan, ports)),
                    "psutil": sorted(psutil_view(ports)),
                    "status": status.status,
                    "detail": status.detail,
                    "user": status.user,
                }

        seen = as_nobody(work)
    own = ("127.0.0.1", seen["own_port"], seen["pid"])
    assert seen["complete"] is True
    assert {tuple(x) for x in seen["proc"]} == {("127.0.0.1", root_port, None), own}
    assert seen["proc"] == seen["psutil"]
    assert seen["status"] == "unknown_owner"
    # the kernel's socket table says whose socket it is, though not which process holds it
    assert seen["detail"] == f"port {root_port} is held by a process of user root (run as root to see which)"
    assert seen["user"] == "root"


def test_unfound_owner_is_looked_for_again_after_recheck(new_scanner):
    """A listener no readable process held is not searched on every scan; once one holds it (here it is
    passed over a Unix socket), its PID shows after at most `recheck_s`."""
    left, right = socket.socketpair()
    with left, right, listening() as root_sock:
        port = root_sock.getsockname()[1]

        def work() -> list:
            root_sock.close()
            left.close()
            now = [0.0]
            scanner = new_scanner(recheck_s=60.0, clock=lambda: now[0])
            pids = [scanner.scan().by_port[port][0].pid]  # root's: hidden
            _, fds, _, _ = socket.recv_fds(right, 1, 1)  # now this process holds it too
            pids.append(scanner.scan().by_port[port][0].pid)  # not searched again yet
            now[0] += 60.0
            pids.append(scanner.scan().by_port[port][0].pid)
            os.close(fds[0])
            return [*pids, os.getpid()]

        socket.send_fds(left, [b"x"], [root_sock.fileno()])
        *pids, child = as_nobody(work)
    assert pids == [None, None, child]
