"""One process serving several endpoints: every record that names a process's endpoint names all of them,
in port order (model/ports.py), in JSON as in the exporter's label."""

from __future__ import annotations

from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot
from lpxtop.model.host import HostProcess, HostSnapshot
from lpxtop.model.ports import PortStatus, endpoints_by_pid, endpoints_by_process, with_endpoints

# zeta is first in port order: the first named is never the alphabetically first by accident
PORTS = (
    PortStatus(8000, "ok", "", pid=41, endpoint="zeta"),
    PortStatus(8001, "ok", "", pid=41, endpoint="alpha"),
    PortStatus(8001, "ok", "", pid=41, endpoint="mid"),  # a second model behind the same port
    PortStatus(9000, "ok", "", pid=77, endpoint="other"),
    PortStatus(9100, "down", "nothing listens", endpoint="stopped"),
)


def test_endpoints_by_pid_and_by_process_keep_port_order():
    assert endpoints_by_pid(PORTS) == {41: ("zeta", "alpha", "mid"), 77: ("other",)}
    by_name = endpoints_by_process(PORTS)
    assert by_name["alpha"] == by_name["zeta"] == ("zeta", "alpha", "mid")
    assert by_name["other"] == ("other",) and "stopped" not in by_name


def test_each_port_entry_lists_every_endpoint_of_its_process():
    ports = with_endpoints(PORTS)
    assert [p.to_json()["endpoints"] for p in ports] == [
        ["zeta", "alpha", "mid"], ["zeta", "alpha", "mid"], ["zeta", "alpha", "mid"], ["other"], ["stopped"]]
    assert [p.to_json()["endpoint"] for p in ports] == ["zeta", "alpha", "mid", "other", "stopped"]


def test_gpu_processes_name_every_endpoint_mig_devices_too():
    served = endpoints_by_process(PORTS)
    proc = GpuProcess(pid=42, name="python3", used_bytes=1 << 30, endpoint="zeta")  # a child of PID 41
    mig = GpuDevice(index=0, name="MIG 1g", uuid="MIG-1", processes=(proc,))
    dev = GpuDevice(index=0, name="H100", uuid="GPU-1", processes=(proc, GpuProcess(pid=5, name="x", used_bytes=1)),
                    mig_devices=(mig,))
    gpu = GpuSnapshot(status="ok", devices=(dev,)).with_endpoints(served)
    (d,) = gpu.to_json()["devices"]
    assert [p["endpoints"] for p in d["processes"]] == [["zeta", "alpha", "mid"], []]
    assert d["mig_devices"][0]["processes"][0]["endpoints"] == ["zeta", "alpha", "mid"]
    assert gpu.with_endpoints(served) is gpu  # nothing left to fill: the same snapshot


def test_host_processes_name_every_endpoint():
    host = HostSnapshot(processes=(HostProcess(endpoint="zeta", pid=41), HostProcess(endpoint="other", pid=77)))
    named = host.with_endpoints(endpoints_by_process(PORTS))
    assert [p["endpoints"] for p in named.to_json()["processes"]] == [["zeta", "alpha", "mid"], ["other"]]
    assert named.with_endpoints(endpoints_by_process(PORTS)) is named


def test_records_without_the_list_still_name_their_endpoint():
    """A recording made before `endpoints` existed replays with the one endpoint it named."""
    assert GpuProcess(pid=1, name="x", used_bytes=1, endpoint="a").to_json()["endpoints"] == ["a"]
    assert HostProcess(endpoint="a", pid=1).to_json()["endpoints"] == ["a"]
    assert PortStatus(1, "ok", "", pid=1, endpoint="a").to_json()["endpoints"] == ["a"]


def test_the_exporter_labels_a_gpu_process_with_every_endpoint_it_serves():
    from dataclasses import replace

    from lpxtop.export.collector import LpxtopCollector
    from lpxtop.export.settings import DEFAULT_BUCKETS
    from lpxtop.export.state import ExportState
    from tests.support.snapshot_data import empty_snapshot

    served = endpoints_by_process(PORTS)
    proc = GpuProcess(pid=41, name="vllm", used_bytes=1 << 30, endpoint="zeta")
    gpu = GpuSnapshot(status="ok", devices=(GpuDevice(index=0, name="H100", uuid="GPU-1", processes=(proc,)),))
    snap = replace(empty_snapshot(), gpu=gpu.with_endpoints(served), ports=with_endpoints(PORTS))
    families = {f.name: f for f in LpxtopCollector(ExportState(DEFAULT_BUCKETS), lambda: snap, "h").collect()}
    (sample,) = families["lpxtop_gpu_process_memory_used_bytes"].samples
    assert sample.labels["endpoint"] == "zeta" and sample.labels["endpoints"] == "zeta,alpha,mid"
