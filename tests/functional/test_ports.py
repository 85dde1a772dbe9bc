"""PortMonitor against real processes listening on loopback ports."""

from __future__ import annotations

import json
import os
import sys
import time

import httpx
import psutil
import pytest

from lpxtop.engine.system import listeners
from lpxtop.engine.system.ports import PortMonitor
from lpxtop.model.endpoint import EndpointConfig
from tests.support.ports import REUSEPORT_LISTENER, SLEEPER, free_port, listener_pids, running_children
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def children(tmp_path):
    with running_children(tmp_path) as kids:
        yield kids


def endpoint(port: int, model: str | None = None, name: str = "ep") -> EndpointConfig:
    return EndpointConfig(name=name, url=f"http://127.0.0.1:{port}/v1", model=model)


def served(port: int) -> tuple[str, ...]:
    """What the engine would pass as served_models: the ids the real /v1/models returned."""
    body = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5, trust_env=False).json()
    return tuple(m["id"] for m in body["data"])


def only(statuses):
    assert len(statuses) == 1, statuses
    return statuses[0]


def test_nothing_listening_is_down():
    port = free_port()
    statuses, _ = PortMonitor().collect([endpoint(port)])
    st = only(statuses)
    assert st.status == "down"
    assert (
        st.detail
        == f"nothing listens on 127.0.0.1:{port} — is the server running?"
    )
    assert st.pid is None and st.endpoint == "ep"


def test_remote_endpoints_are_not_checked():
    remote = EndpointConfig(name="far", url="http://api.example.invalid:8000/v1")
    statuses, _ = PortMonitor().collect([remote])
    assert statuses == ()


def test_plain_http_server_is_a_conflict(children):
    port = free_port()
    proc = children.start([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"])
    wait_for(lambda: proc.pid in listener_pids(port), timeout=15)
    monitor = PortMonitor()
    st = only(monitor.collect([endpoint(port, "qwen-7b")], served_models={"ep": ()})[0])
    assert st.status == "conflict"
    assert st.pid == proc.pid and st.pids == (proc.pid,)
    assert f"port {port} is held by PID {proc.pid} (" in st.detail
    assert "http.server" in st.detail
    assert "not a known inference server and /v1/models did not answer" in st.detail
    assert f"start the new server with --port {port + 1}" in st.detail or "--port " in st.detail
    assert st.user == "root"  # the test suite runs as root here
    assert st.started_at == pytest.approx(psutil.Process(proc.pid).create_time(), abs=0.01)
    assert st.rss_bytes and st.rss_bytes > 1 << 20
    assert st.cpu_pct is None  # psutil needs two samples for a CPU share
    assert st.server_kind is None
    second = only(monitor.collect([endpoint(port, "qwen-7b")], served_models={"ep": ()})[0])
    assert second.cpu_pct is not None and second.cpu_pct >= 0.0


def test_sim_serving_the_configured_model_is_ok(children):
    port = free_port()
    proc = children.sim(port, "sim-ok-model")
    models = served(port)
    assert models == ("sim-ok-model",)
    st = only(PortMonitor().collect([endpoint(port, "sim-ok-model")], served_models={"ep": models})[0])
    assert st.status == "ok", st.detail
    assert st.pid == proc.pid
    assert st.server_kind == "lpxtop-sim"
    assert st.detail.startswith(f"PID {proc.pid} (")
    assert st.detail.endswith(f"serves sim-ok-model on port {port}")


def test_api_key_on_the_command_line_is_never_shown(children):
    port = free_port()
    proc = children.sim_as("vllm", port, "keyed", "--api-key", "sekrit-4242")
    st = only(PortMonitor().collect([endpoint(port, "keyed")])[0])
    assert st.status == "ok" and st.pid == proc.pid and st.server_kind == "vllm"
    assert st.cmdline.endswith(f"/vllm serve --port {port} --model keyed --api-key ***")
    assert "sekrit-4242" not in json.dumps(st.to_json())


def test_sim_answering_another_model_is_a_mismatch(children):
    port = free_port()
    proc = children.sim(port, "llama-8b")
    st = only(PortMonitor().collect([endpoint(port, "qwen-7b")], served_models={"ep": served(port)})[0])
    assert st.status == "model_mismatch"
    assert st.detail.startswith(
        "the server does not serve model 'qwen-7b'; it serves llama-8b: pass one with --model (or model in the "
        f"config file) — port {port}, PID {proc.pid} ("
    )
    assert "stop it" not in st.detail and "stale" not in st.detail  # a typo is no reason to stop a server
    assert st.served_models == ("llama-8b",) and st.expected_model == "qwen-7b"


def test_server_restarted_on_the_same_port(children):
    port = free_port()
    now = [1000.0]
    monitor = PortMonitor(restart_hold_s=30.0, clock=lambda: now[0])
    ep = endpoint(port, "sim-r")
    first = children.sim(port, "sim-r")
    st = only(monitor.collect([ep], served_models={"ep": ("sim-r",)})[0])
    assert st.status == "ok" and st.pid == first.pid

    children.stop(first)
    wait_for(lambda: not listener_pids(port), timeout=15)
    st = only(monitor.collect([ep], served_models={"ep": ()})[0])
    assert st.status == "down"

    second = children.sim(port, "sim-r")
    now[0] += 5
    st = only(monitor.collect([ep], served_models={"ep": ("sim-r",)})[0])
    assert st.status == "restarted"
    assert st.previous_pid == first.pid and st.pid == second.pid
    assert f"now held by PID {second.pid}" in st.detail and f"before by PID {first.pid}" in st.detail

    now[0] += 31  # past restart_hold_s: back to plain ok
    st = only(monitor.collect([ep], served_models={"ep": ("sim-r",)})[0])
    assert st.status == "ok" and st.pid == second.pid and st.previous_pid is None


def test_two_reuseport_listeners_are_multiple(children):
    port = free_port()
    a = children.python(REUSEPORT_LISTENER, str(port))
    b = children.python(REUSEPORT_LISTENER, str(port))
    wait_for(lambda: listener_pids(port) == {a.pid, b.pid}, timeout=15)
    st = only(PortMonitor().collect([endpoint(port)])[0])
    assert st.status == "multiple"
    assert set(st.pids) == {a.pid, b.pid}
    assert f"port {port} has 2 listening processes (" in st.detail
    assert f"PID {a.pid}" in st.detail and f"PID {b.pid}" in st.detail and "SO_REUSEPORT" in st.detail


def _psutil_path(monkeypatch, tmp_path):
    """No sock_diag and a /proc without net tables (macOS, a sandbox): scan_listeners() takes psutil's
    path, which the tests below then bend. The Linux path is tested with real users in
    test_ports_listeners.py."""
    no_tables = listeners.ListenerScanner(proc=str(tmp_path), netlink=False)
    monkeypatch.setattr(listeners, "_LISTENERS", no_tables)


def _hide_socket_owners(monkeypatch, tmp_path):
    # Tests run as root, so the kernel shows every socket's owner. A normal user sees pid=None for
    # other users' sockets: reproduce exactly that at the lowest layer, psutil's own table.
    _psutil_path(monkeypatch, tmp_path)
    real = psutil.net_connections

    def without_pids(kind="inet"):
        return [c._replace(pid=None) for c in real(kind)]

    monkeypatch.setattr(psutil, "net_connections", without_pids)


def test_hidden_owner_as_a_normal_user(children, monkeypatch, tmp_path):
    port = free_port()
    children.sim(port, "sim-hidden")
    _hide_socket_owners(monkeypatch, tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # not root: the advice is to run as root
    st = only(PortMonitor().collect([endpoint(port)])[0])
    assert st.status == "unknown_owner"
    assert st.detail == f"port {port} is held by another user's process (run as root to see which)"
    assert st.pid is None


def test_hidden_owner_as_root(children, monkeypatch, tmp_path):
    port = free_port()
    children.sim(port, "sim-hidden-root")
    _hide_socket_owners(monkeypatch, tmp_path)
    st = only(PortMonitor().collect([endpoint(port)])[0])
    assert st.status == "unknown_owner"
    assert "lpxtop cannot see" in st.detail


def test_refused_socket_table_falls_back_to_per_process_scan(children, monkeypatch, tmp_path):
    port = free_port()
    proc = children.sim(port, "sim-fallback")
    _psutil_path(monkeypatch, tmp_path)

    def refused(kind="inet"):
        raise psutil.AccessDenied()  # what macOS / hardened kernels do for non-root users

    monkeypatch.setattr(psutil, "net_connections", refused)
    st = only(
        PortMonitor().collect([endpoint(port, "sim-fallback")], served_models={"ep": ("sim-fallback",)})[0]
    )
    assert st.status == "ok" and st.pid == proc.pid


def test_everything_refused_falls_back_to_connect(children, monkeypatch, tmp_path):
    port = free_port()
    children.sim(port, "sim-connect")
    down_port = free_port()
    _psutil_path(monkeypatch, tmp_path)

    def refused(*args, **kwargs):
        raise psutil.AccessDenied()

    monkeypatch.setattr(psutil, "net_connections", refused)
    monkeypatch.setattr(psutil.Process, "net_connections", refused)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    statuses, _ = PortMonitor().collect([endpoint(port, name="up"), endpoint(down_port, name="gone")])
    by_name = {s.endpoint: s for s in statuses}
    assert by_name["up"].status == "unknown_owner"
    assert by_name["up"].detail == f"port {port} is held by another user's process (run as root to see which)"
    assert by_name["gone"].status == "down"


GIB = 1 << 30


def _leftover(leftovers, pid):
    found = [lo for lo in leftovers if lo.pid == pid]
    return found[0] if found else None


def test_gpu_holding_server_without_port_is_a_leftover(children):
    proc = children.script("vllm", SLEEPER, "serve", "tiny-model")  # an orphaned `vllm serve`
    _, leftovers = PortMonitor().collect([], gpu_pids={proc.pid: 30 * GIB})
    lo = _leftover(leftovers, proc.pid)
    assert lo is not None, leftovers
    assert lo.server_kind == "vllm" and lo.gpu_used_bytes == 30 * GIB
    assert lo.reason == (
        f"holds 30.0 GiB of GPU memory but serves no port: left over from a crashed server? "
        f"stop it (kill {proc.pid}) to free the memory"
    )
    assert all(lo.pid != os.getpid() for lo in leftovers)


def test_engine_core_outliving_its_api_server_is_a_leftover(children):
    # vLLM renames its engine process with setproctitle; an argv[0] of our choosing gives the same
    # command line. Its parent is this test, not a vLLM API server, as after the API server died.
    proc = children.start(["VLLM::EngineCore", "-c", SLEEPER], executable=sys.executable)
    _, leftovers = PortMonitor().collect([], gpu_pids={proc.pid: 20 * GIB})
    lo = _leftover(leftovers, proc.pid)
    assert lo is not None and lo.server_kind == "vllm" and lo.gpu_used_bytes == 20 * GIB
    assert lo.cmdline.startswith("VLLM::EngineCore")


def test_orphaned_worker_with_only_internal_ports_is_a_leftover(children):
    # A vLLM worker listens on torch.distributed ports of its own; those are no API: once its API
    # server is gone, it serves nothing and its GPU memory is lost.
    port = free_port()
    proc = children.start(
        ["VLLM::Worker_TP0", "-c", REUSEPORT_LISTENER, str(port)], executable=sys.executable
    )
    wait_for(lambda: proc.pid in listener_pids(port), timeout=15)
    _, leftovers = PortMonitor().collect([], gpu_pids={proc.pid: 40 * GIB})
    lo = _leftover(leftovers, proc.pid)
    assert lo is not None and lo.server_kind == "vllm"
    assert lo.reason.startswith("holds 40.0 GiB of GPU memory but serves no port")


def test_portless_server_is_a_leftover_only_after_the_grace_period(children):
    proc = children.script("lmdeploy", SLEEPER, "serve", "api_server", "internlm2")
    _, young = PortMonitor().collect([])
    assert _leftover(young, proc.pid) is None  # may still be loading weights
    _, old = PortMonitor(startup_grace_s=0.0).collect([])
    lo = _leftover(old, proc.pid)
    assert lo is not None and lo.server_kind == "lmdeploy" and lo.gpu_used_bytes is None
    assert lo.reason.startswith("listens on no port after ")
    assert f"stop it (kill {proc.pid}) if it is not still loading" in lo.reason


def test_zombie_child_of_a_server_is_a_leftover(children):
    code = "import os, time\nif os.fork() == 0:\n    os._exit(0)\ntime.sleep(60)\n"
    parent = children.script("vllm", code, "serve", "tiny-model")

    def zombie_kids():
        try:
            return [c for c in psutil.Process(parent.pid).children() if c.status() == psutil.STATUS_ZOMBIE]
        except psutil.Error:
            return []

    wait_for(lambda: bool(zombie_kids()), timeout=15)
    zombie = zombie_kids()[0]
    _, leftovers = PortMonitor().collect([])
    lo = _leftover(leftovers, zombie.pid)
    assert lo is not None and lo.zombie and lo.ppid == parent.pid and lo.server_kind == "vllm"
    assert lo.reason.startswith(f"zombie child of PID {parent.pid} (")
    assert lo.reason.endswith("it exited but its parent has not reaped it — restart or stop the parent")
    assert _leftover(leftovers, parent.pid) is None  # the young parent itself may still be loading


def test_serving_server_with_gpu_memory(children):
    port = free_port()
    proc = children.sim_as("vllm", port, "tiny")
    gpu = {proc.pid: 12 * GIB}
    monitor = PortMonitor(startup_grace_s=0.0)

    statuses, leftovers = monitor.collect(
        [endpoint(port, "tiny")], served_models={"ep": ("tiny",)}, gpu_pids=gpu
    )
    assert only(statuses).status == "ok" and only(statuses).server_kind == "vllm"
    assert _leftover(leftovers, proc.pid) is None  # it is the endpoint we watch

    _, leftovers = monitor.collect([], gpu_pids=gpu)
    lo = _leftover(leftovers, proc.pid)
    assert lo is not None
    assert lo.reason == (
        f"serves port {port} and holds 12.0 GiB of GPU memory but is none of lpxtop's endpoints: "
        f"a stale server? stop it (kill {proc.pid}) or add it as an endpoint"
    )


def test_sim_and_test_processes_are_never_leftovers(children):
    port = free_port()
    sim = children.sim(port, "sim-not-leftover")
    idle = children.python(SLEEPER)
    gpu = {sim.pid: 1 * GIB, idle.pid: 1 * GIB, os.getpid(): 1 * GIB}
    _, leftovers = PortMonitor(startup_grace_s=0.0).collect([], gpu_pids=gpu)
    assert {lo.pid for lo in leftovers}.isdisjoint({sim.pid, idle.pid, os.getpid()})


def test_collect_is_cheap_with_many_endpoints(children):
    port = free_port()
    children.sim(port, "sim-many")
    eps = [endpoint(port, name=f"ep{i}") for i in range(50)]
    monitor = PortMonitor()
    start = time.perf_counter()
    statuses, _ = monitor.collect(eps)
    assert len(statuses) == 50 and {s.status for s in statuses} == {"ok"}
    assert time.perf_counter() - start < 2.0  # one socket scan and one process scan, not 50
