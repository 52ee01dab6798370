"""Private inference: the same scores as the decision-bit protocol, and on the wire the guest
receives only ciphertexts, sealed bytes and seal keys, the hosts only ciphertexts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path

import numpy as np
import pytest

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.exceptions import RemoteProtocolError
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero._messages import (
    PredictBits,
    PrivatePredict,
    PrivateReady,
    PrivateRelay,
    PrivateScores,
    PrivateSlots,
)
from p2pboost.hetero.inference import private_batch
from p2pboost.hetero.inference.batch import guest_predict, host_predict
from p2pboost.hetero.inference.private import PrivateForest, SealKey, SlotRanges, seal
from p2pboost.protocols._messages import Message, recv, send
from p2pboost.testing import TRAINING, LocalFederation, MemoryFabric, local_federation
from tests.hetero.conftest import Federated, Keys, federate, predict

PARAMS = BoostParams(n_estimators=3, max_depth=3, max_bin=16, learning_rate=0.3)


async def _private(
    c: LocalFederation,
    fed: Federated,
    Xg: np.ndarray,
    Xh: Sequence[np.ndarray],
    keys: Keys,
    received: list[Message],
    *,
    host_private: bool | None = None,
) -> np.ndarray:
    hosts = list(fed.guest.hosts)

    async def guest() -> np.ndarray:
        async with c["a"].session("private", peers=hosts) as s:
            return await guest_predict(s, fed.guest, Xg, private=True, keys=keys, received=received)

    async def host(h: str, i: int) -> None:
        async with c[h].session("private", peers=["a"]) as s:
            await host_predict(s, fed.hosts[i], Xh[i], private=host_private)

    out = await asyncio.gather(guest(), *(host(h, i) for i, h in enumerate(hosts)))
    return np.asarray(out[0])


@pytest.mark.parametrize("n_hosts", [1, 2])
async def test_private_scores_equal_the_default_ones_and_the_guest_gets_no_bits(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    n_hosts: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Several relay chunks: rows are cut so a message carries at most this many ciphertexts.
    monkeypatch.setattr(private_batch, "CHUNK_CIPHERTEXTS", 2000)
    X, y = breast
    X, y = X[:200], y[:200]
    Xg = X[:, :8]
    Xh = [X[:, 8:20], X[:, 20:]][:n_hosts]
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, Xg, y, Xh, PARAMS, pool, keys)
        default = await predict(c, fed, Xg, Xh)
        received: list[Message] = []
        private = await _private(c, fed, Xg, Xh, keys, received, host_private=True)
    np.testing.assert_allclose(private, default, rtol=0, atol=1e-9)
    kinds = {type(m) for m in received}
    assert PredictBits not in kinds
    assert kinds <= {PrivateReady, PrivateRelay, PrivateScores}
    scores = [m for m in received if isinstance(m, PrivateScores)]
    assert len(scores) > 1
    assert sum(len(m.ct) for m in scores) == 200  # one ciphertext per row, nothing per split
    assert (PrivateRelay in kinds) == (n_hosts > 1)


async def test_a_host_that_requires_private_inference_refuses_the_bits(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    X, y = X[:120], y[:120]
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :8], y, [X[:, 8:]], PARAMS, pool, keys)

        async def host() -> None:
            async with c["b"].session("p", peers=["a"]) as s:
                await host_predict(s, fed.hosts[0], X[:, 8:], private=True)

        async def guest() -> None:
            async with c["a"].session("p", peers=["b"]) as s:
                await guest_predict(s, fed.guest, X[:, :8])

        outcome = await asyncio.gather(host(), guest(), return_exceptions=True)
    assert isinstance(outcome[0], RemoteProtocolError)
    assert "only private inference" in str(outcome[0])


async def test_a_host_refuses_ciphertexts_outside_the_key_range(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    """A guest that sends a zero block (or one of the modulus) is refused before any use."""
    X, y = breast
    X, y = X[:64], y[:64]
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :8], y, [X[:, 8:]], PARAMS, pool, keys)
        forest = PrivateForest(fed.guest)
        public = keys[0]
        ranges = forest.host_ranges(1)

        async def host() -> None:
            async with c["b"].session("p", peers=["a"]) as s:
                await host_predict(s, fed.hosts[0], X[:, 8:], private=True)

        async def guest() -> None:
            async with c["a"].session("p", peers=["b"]) as s:
                ctl = s.channel("b", "ctl")
                await send(
                    ctl,
                    PrivatePredict(
                        fed.guest.fingerprint,
                        64,
                        public,
                        forest.slots,
                        forest.n_outputs,
                        forest.widths,
                        forest.outputs,
                        ranges.tree,
                        ranges.node,
                        ranges.lo,
                        ranges.mid,
                        ranges.hi,
                        first=True,
                        last=True,
                    ),
                )
                await recv(ctl, PrivateReady)
                width = public.ciphertext_bytes
                bad = bytes(width) * (64 * forest.positions)  # every block zero
                await send(ctl, PrivateSlots(0, 64, CiphertextBatch.of(public, bad), b"", b""))
                await recv(ctl, PrivateScores)

        with pytest.raises(RemoteProtocolError, match="bad slot ciphertexts"):
            await asyncio.gather(host(), guest())


def test_slot_ranges_must_be_aligned_halves() -> None:
    one = np.array([0], dtype=np.int64)
    good = SlotRanges(one, one, np.array([0]), np.array([4]), np.array([8]))
    assert good.check(1, 8) is None
    skew = SlotRanges(one, one, np.array([0]), np.array([3]), np.array([8]))
    assert skew.check(1, 8) is not None
    beyond = SlotRanges(one, one, np.array([8]), np.array([12]), np.array([16]))
    assert beyond.check(1, 8) is not None
    other_tree = SlotRanges(np.array([1]), one, np.array([0]), np.array([4]), np.array([8]))
    assert other_tree.check(1, 8) is not None


def test_sealed_bytes_open_only_with_their_key_and_context() -> None:
    key, other = SealKey(), SealKey()
    sealed = seal(key.public, b"ciphertexts", b"ctx")
    assert key.open(sealed, b"ctx") == b"ciphertexts"
    with pytest.raises(Exception, match="do not open"):
        other.open(sealed, b"ctx")
    with pytest.raises(Exception, match="do not open"):
        key.open(sealed, b"other rows")


def test_the_benchmark_reports_both_modes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import json

    from benchmarks import private_inference
    from tests._tiny_data import write_tiny_vertical

    # Its own tiny data directory: the test must not depend on where the data sets live.
    data = write_tiny_vertical(tmp_path, rows=160, guest=3, host=4, host_label_column=3)
    argv = ["--dataset", "breast", "--data-dir", str(data)]
    argv += ["--trees", "2", "--depth", "2", "--key-bits", "1024"]
    argv += ["--rows", "50", "--private-rows", "10", "--requests", "3", "--private-requests", "2"]
    assert private_inference.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["benchmark"] == "private_inference"
    assert result["slots_per_row"] == 2 * 4
    assert result["max_abs_diff"] < 1e-9
    for mode in ("default", "private"):
        assert result[mode]["rows_per_s"] > 0
        assert result[mode]["online_p99_ms"] >= result[mode]["online_p50_ms"] > 0
