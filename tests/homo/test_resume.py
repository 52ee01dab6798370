"""Horizontal training survives restarts: the server resumes from its checkpoint, a restarted
client is taken back; either way the model is the one an uninterrupted run grows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import CheckpointError
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.checkpoint import ServerCheckpoint, server_checkpoint_path
from p2pboost.homo.config import HomoConfig
from tests.homo.conftest import run_homo, run_restarting, same_trees

CONFIG = HomoConfig(
    BoostParams(n_estimators=5, max_depth=3, subsample=0.8, colsample_bytree=0.8, seed=3),
    eval_metric="logloss",
    allow_two_clients=True,
)


class _Killed(Exception):
    """The simulated death of the server."""


def _kill_server_at_root(nth: int) -> Any:
    """A tap that kills the server as the ``nth`` tree's root histogram arrives."""
    seen = [0]

    def tap(kind: str, who: str, obj: Any) -> None:
        if kind == "aggregate" and who == "root":
            seen[0] += 1
            if seen[0] == nth:
                raise _Killed(f"killed at tree {nth}")

    return tap


async def test_a_resumed_server_grows_the_uninterrupted_model(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path, tmp_path: Path
) -> None:
    parts = {"c1": breast[0], "c2": breast[1]}
    reference = await run_homo(parts, CONFIG, federation)
    assert not isinstance(reference.result, BaseException)

    ckpt = tmp_path / "server"
    crashed = await run_homo(
        parts, CONFIG, federation, tap=_kill_server_at_root(3), checkpoint=ckpt
    )
    assert isinstance(crashed.result, _Killed)
    saved = ServerCheckpoint.load(ckpt)
    assert saved is not None
    assert saved.model.n_rounds == 2  # two rounds done, the third interrupted

    resumed = await run_homo(parts, CONFIG, federation, checkpoint=ckpt, resume=True)
    assert not isinstance(resumed.result, BaseException)
    final = resumed.result.booster
    assert same_trees(final, reference.result.booster)
    assert final.history == reference.result.booster.history
    assert resumed.result.evaluation == reference.result.evaluation
    for model in resumed.models.values():
        assert isinstance(model, Booster)
        assert same_trees(model, final)  # the clients added the replayed trees
    # The resumed run grew three trees: no statistics, no binning, two trees replayed.
    roots = [who for kind, who, _ in resumed.received if kind == "aggregate" and who == "root"]
    assert len(roots) == 3
    assert not [w for k, w, _ in resumed.received if k == "aggregate" and w in ("stats", "bins")]


async def test_resume_without_a_checkpoint_starts_afresh(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path, tmp_path: Path
) -> None:
    parts = {"c1": breast[0], "c2": breast[1]}
    config = replace(CONFIG, params=replace(CONFIG.params, n_estimators=2))
    run = await run_homo(parts, config, federation, checkpoint=tmp_path, resume=True)
    assert not isinstance(run.result, BaseException)
    assert run.result.booster.n_rounds == 2
    assert ServerCheckpoint.load(tmp_path) is not None  # and it wrote one


async def test_a_checkpoint_of_other_settings_or_clients_is_refused(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path, tmp_path: Path
) -> None:
    parts = {"c1": breast[0], "c2": breast[1]}
    config = replace(CONFIG, params=replace(CONFIG.params, n_estimators=2))
    first = await run_homo(parts, config, federation, checkpoint=tmp_path)
    assert not isinstance(first.result, BaseException)
    saved = ServerCheckpoint.load(tmp_path)
    assert saved is not None
    with pytest.raises(CheckpointError, match=r"params\.max_depth 3 then, 4 now"):
        saved.check(replace(config, params=replace(config.params, max_depth=4)), ["c1", "c2"])
    with pytest.raises(CheckpointError, match=r"clients \['c1', 'c2'\], not \['c1', 'c3'\]"):
        saved.check(config, ["c1", "c3"])
    other = replace(config, params=replace(config.params, learning_rate=0.1))
    run = await run_homo(parts, other, federation, checkpoint=tmp_path, resume=True)
    assert isinstance(run.result, CheckpointError)
    assert "learning_rate" in str(run.result)
    path = server_checkpoint_path(tmp_path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        ServerCheckpoint.load(tmp_path)


@pytest.mark.parametrize("clients", [2, 3])
async def test_a_restarted_client_is_taken_back(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path, clients: int
) -> None:
    """Client c1 dies in the middle of the third tree and its process starts again: the
    server takes it back, replays the model so far and grows that tree again with it. With
    two clients the interrupted round cannot be unmasked (too few vectors) and is abandoned;
    with three it is completed by the survivors first."""
    X = np.vstack([b[0] for b in breast])
    y = np.concatenate([b[1] for b in breast])
    cut = np.array_split(np.arange(y.size), clients)
    names = [f"c{k}" for k in range(1, clients + 1)]
    parts = {c: (X[idx], y[idx]) for c, idx in zip(names, cut, strict=True)}
    config = replace(CONFIG, eval_metric=None)
    reference = await run_homo(parts, config, federation)
    assert not isinstance(reference.result, BaseException)
    run = await run_restarting(parts, config, federation, "c1", 6)
    result = run.result
    assert result.dropped == {}
    assert sorted(result.clients) == names
    assert same_trees(result.booster, reference.result.booster)
    for model in run.models.values():
        assert same_trees(model, result.booster)
