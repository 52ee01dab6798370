"""The bulk path does not fault fresh memory for every fragment (p2pboost.net._memory).

Both nodes run in a fresh process (the C allocator's state is what is measured) and exchange
1 MiB messages over mutual TLS on loopback, as ``benchmarks/transport.py`` does. Without the
node keeping freed buffers for reuse, glibc hands the heap's top back to the kernel after nearly
every fragment, and the buffers below the node are fresh pages again for the next: the control
run (the node's call replaced by a no-op) measures about 240 minor page faults per MiB; with it,
4 to 20.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from p2pboost.net._memory import MAX_RETAINED
from p2pboost.net.config import NodeConfig
from p2pboost.net.node import RETAINED_FRAGMENTS

ROOT = Path(__file__).resolve().parents[2]


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (AttributeError, ValueError, OSError):
        return False


pytestmark = pytest.mark.skipif(
    not _glibc(), reason="the heap trimming measured here is glibc's (other C libraries differ)"
)


def _measure(node_federation: Path, *flags: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.node._fault_counter", str(node_federation), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_bulk_transfer_reuses_freed_buffers(node_federation: Path) -> None:
    result = _measure(node_federation)
    expected = min(RETAINED_FRAGMENTS * NodeConfig().max_fragment, MAX_RETAINED)
    assert result["freed"] == expected
    assert result["faults_per_mib"] < 64, result


def test_without_it_every_fragment_faults_fresh_pages(node_federation: Path) -> None:
    result = _measure(node_federation, "--keep-trimming")
    assert result["freed"] == 0
    assert result["faults_per_mib"] > 128, result


def test_the_thresholds_only_rise_and_the_block_is_capped() -> None:
    """Once a block is freed, a smaller one does nothing (the thresholds never fall); a huge
    request frees :data:`MAX_RETAINED` (glibc ignores freed blocks above 32 MiB)."""
    code = (
        "from p2pboost.net._memory import retain_freed_buffers as r;"
        " print(r(1 << 20), r(1 << 19), r(1 << 20), r(1 << 40), r(1 << 41))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [str(1 << 20), "0", "0", str(MAX_RETAINED), "0"]
