"""The guest keeps its workers busy: each chunk of the gradient stream is encrypted in pieces
bounded by the tree's size, randomisers are made while it waits for the hosts between trees
and spent by the next tree, and the trees stay the plaintext core's."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import numpy as np
import pytest

from p2pboost.crypto import engine as engine_module
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.pieces import task_bound
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import Keys, assert_same_trees, federate


@pytest.mark.slow
async def test_pieces_and_randomisers_between_trees_keep_the_trees(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Floors low enough that the tests' 128-row first chunk is cut, and processors spare for
    # the randomisers whatever else this machine runs.
    monkeypatch.setattr(engine_module, "MIN_CIPHERTEXTS", 16)
    monkeypatch.setattr(engine_module, "spare_cpus", lambda: 2)
    # On the pool (the idle-class threads get a processor only when nothing else on the
    # machine wants one, which a loaded test machine may never grant between two trees).
    monkeypatch.setattr(engine_module, "idle_threads_supported", lambda: False)
    calls: list[tuple[int | None, int, int, int]] = []  # stream rows, rows, pieces, stashed
    made: list[int] = []
    encrypt_packed = CryptoEngine.encrypt_packed
    fill = CryptoEngine.precompute_while_idle

    async def spy_encrypt(self: CryptoEngine, spec: Any, g: Any, h: Any, **kw: Any) -> bytes:
        pieces = len(self.piece_cuts(len(g), spec.plaintexts_per_row, kw["stream_rows"])) - 1
        calls.append((kw["stream_rows"], len(g), pieces, self.stashed))
        return await encrypt_packed(self, spec, g, h, **kw)

    async def spy_fill(self: CryptoEngine, target: int, stop: Any) -> int:
        n = await fill(self, target, stop)
        made.append(n)
        return n

    monkeypatch.setattr(CryptoEngine, "encrypt_packed", spy_encrypt)
    monkeypatch.setattr(CryptoEngine, "precompute_while_idle", spy_fill)
    X, y = breast
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :10], y, [X[:, 10:]], params, pool, keys)
    assert_same_trees(fed.joined(), train(params, X, y))
    rows = X.shape[0]
    assert {stream for stream, *_ in calls} == {rows}  # every chunk knows its tree's size
    assert sum(n for _, n, _, _ in calls) == 3 * rows
    for _, n, pieces, _ in calls:  # at least one piece per worker, none above 1/(4W)
        assert pieces >= 2
        assert -(-n // pieces) <= task_bound(rows, 2)
    # Randomisers are made after the first two trees' streams, not after the last tree's,
    # and the next tree starts with them in the stash.
    assert len(made) == 2
    assert sum(made) > 0
    starts = [stashed for _, _, _, stashed in calls[:: len(calls) // 3]]
    assert starts[0] == 0
    assert max(starts[1:]) > 0
