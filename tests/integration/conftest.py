"""Session fixtures: real vLLM and llama.cpp servers on free loopback ports, started once, always stopped.

The servers come from realservers/setup.sh (cached in ~/.cache/lpxtop-realservers or $LPXTOP_REALSERVERS).
When that cache is incomplete the tests skip with the command that builds it, unless
LPXTOP_REQUIRE_REALSERVERS=1 (CI: .ci/realservers.sh), where a missing cache is a failure.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.realservers import (
    LLAMA_CTX,
    LLAMA_SLOTS,
    VLLM_MAX_NUM_SEQS,
    VLLM_MODEL,
    ServerProcess,
    require_built,
    running,
    start_server,
    warm_up,
)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[ServerProcess]:
    """vLLM serving small-llama with VLLM_MAX_NUM_SEQS slots, so extra streams queue."""
    require_built("vllm")
    server = start_server(
        "vllm", "start-vllm.sh", ["--max-num-seqs", str(VLLM_MAX_NUM_SEQS)], {"MODEL": VLLM_MODEL}
    )
    with running(server) as ready:
        warm_up(ready, VLLM_MODEL)
        yield ready


@pytest.fixture(scope="session")
def llama_server() -> Iterator[ServerProcess]:
    """llama-server with --metrics and LLAMA_SLOTS slots."""
    require_built("llama")
    server = start_server("llama", "start-llama-server.sh", [], {"NP": str(LLAMA_SLOTS), "CTX": str(LLAMA_CTX)})
    with running(server, timeout_s=60) as ready:
        yield ready


@pytest.fixture(scope="session")
def llama_server_no_metrics() -> Iterator[ServerProcess]:
    """llama-server started WITHOUT --metrics: its /metrics answers 501."""
    require_built("llama")
    server = start_server("llama-nometrics", "start-llama-server.sh", [], {"NP": "1", "METRICS": "0"})
    with running(server, timeout_s=60) as ready:
        yield ready
