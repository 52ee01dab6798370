"""Checkpoints and resume of vertical training: a run that dies and resumes grows the trees of
an uninterrupted one; a checkpoint of another run, other data or other parameters, or a
damaged one, is refused naming the cause."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import CheckpointError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.callbacks import CallbackEnv, EarlyStopping
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.hetero.training.checkpoint import (
    GuestCheckpoint,
    HostCheckpoint,
    host_checkpoint_path,
)
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import TRAINING, LocalFederation, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Federated, Keys, assert_same_trees

# Row and column sampling: a resumed run must continue the random generator, not restart it.
PARAMS = BoostParams(
    n_estimators=6, max_depth=3, max_bin=16, subsample=0.8, colsample_bytree=0.8, seed=3
)
SPLIT = 10


class Crash(Exception):
    """The guest's process dying, as far as the other parties can tell."""


def _crash_at(iteration: int, before: Any = None) -> Any:
    def callback(env: CallbackEnv) -> None:
        if before is not None:
            before(env)
        if env.iteration == iteration:
            raise Crash

    return callback


async def _run(
    c: LocalFederation,
    X: np.ndarray,
    y: np.ndarray,
    dirs: dict[str, Path],
    pool: Executor,
    keys: Keys,
    *,
    session: str,
    resume: bool,
    callbacks: Sequence[Any] = (),
    params: BoostParams = PARAMS,
    evals: bool = True,
    init: Federated | None = None,
    host_monotone: Any = None,
    host_first: bool = False,
) -> Federated:
    """Guest ``a`` and host ``b`` with checkpoints in ``dirs`` (``init``: the model a warm
    start continues, ``host_monotone``: the host's declared directions); raises what either
    raised (the guest's first; with ``host_first`` the host's, when the host's refusal is the
    point and the guest's error only says its peer aborted)."""
    X_eval, y_eval = X[:100], y[:100]

    async def guest() -> GuestModel:
        async with c["a"].session(session, peers=["b"]) as s:
            return await guest_train(
                s,
                ["b"],
                X[:, :SPLIT],
                y,
                params,
                eval_sets=[(X_eval[:, :SPLIT], y_eval)] if evals else (),
                callbacks=callbacks,
                config=CONFIG,
                executor=pool,
                keys=keys,
                checkpoint=dirs["a"],
                resume=resume,
                init_model=None if init is None else init.guest,
            )

    async def host() -> HostModel:
        async with c["b"].session(session, peers=["a"]) as s:
            return await host_train(
                s,
                "a",
                X[:, SPLIT:],
                eval_sets=[X_eval[:, SPLIT:]] if evals else (),
                executor=pool,
                workers=2,
                checkpoint=dirs["b"],
                resume=resume,
                init_model=None if init is None else init.hosts[0],
                monotone_constraints=host_monotone,
            )

    g, h = await asyncio.gather(guest(), host(), return_exceptions=True)
    for outcome in (g, h):
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
    if host_first and isinstance(h, Exception):
        raise h
    if isinstance(g, Exception):
        raise g
    if isinstance(h, Exception):
        raise h
    assert isinstance(g, GuestModel)
    assert isinstance(h, HostModel)
    return Federated(g, [h])


def _dirs(tmp_path: Path) -> dict[str, Path]:
    return {"a": tmp_path / "guest", "b": tmp_path / "host"}


def _core(X: np.ndarray, y: np.ndarray, *callbacks: Any) -> Any:
    return train(PARAMS, X, y, eval_sets=[(X[:100], y[:100])], callbacks=list(callbacks))


@pytest.mark.slow
async def test_a_run_that_dies_resumes_to_the_uninterrupted_trees(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, tmp_path: Path
) -> None:
    X, y = breast
    dirs = _dirs(tmp_path)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        with pytest.raises(Crash):
            await _run(
                c, X, y, dirs, pool, keys, session="t1", resume=False, callbacks=[_crash_at(3)]
            )
        saved = GuestCheckpoint.load(dirs["a"])
        assert saved is not None
        assert len(saved.model.trees) == 3  # the 4th round never saved
        patience = EarlyStopping(rounds=50)
        fed = await _run(c, X, y, dirs, pool, keys, session="t2", resume=True, callbacks=[patience])
    reference = EarlyStopping(rounds=50)
    core = _core(X, y, reference)
    assert_same_trees(fed.joined(), core)
    # The replayed history put early stopping where an uninterrupted run has it.
    assert (patience.best_iteration, patience.best_score) == (
        reference.best_iteration,
        reference.best_score,
    )
    assert fed.guest.history == core.history


@pytest.mark.slow
async def test_the_guest_goes_back_a_round_to_a_host_that_holds_one_tree_less(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, tmp_path: Path
) -> None:
    """A host killed between the guest's checkpoint and the next tree's start holds one tree
    less: the guest continues from its previous round, and the trees are still the same."""
    X, y = breast
    dirs = _dirs(tmp_path)
    host_file = host_checkpoint_path(dirs["b"], "a")
    backup = tmp_path / "host-3-trees.ckpt"

    def keep_host_file(env: CallbackEnv) -> None:
        if env.iteration == 3:  # the host has just saved 3 trees
            shutil.copy(host_file, backup)

    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        with pytest.raises(Crash):
            await _run(
                c,
                X,
                y,
                dirs,
                pool,
                keys,
                session="t1",
                resume=False,
                callbacks=[_crash_at(4, keep_host_file)],
            )
        guest_saved = GuestCheckpoint.load(dirs["a"])
        assert guest_saved is not None
        assert len(guest_saved.chain) == 4
        shutil.copy(backup, host_file)
        host_saved = HostCheckpoint.load(dirs["b"], "a")
        assert host_saved is not None
        assert len(host_saved.chain) == 3
        fed = await _run(c, X, y, dirs, pool, keys, session="t2", resume=True)
    assert_same_trees(fed.joined(), _core(X, y))


@pytest.mark.slow
async def test_resuming_a_finished_run_grows_nothing_more(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, tmp_path: Path
) -> None:
    X, y = breast
    dirs = _dirs(tmp_path)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        first = await _run(c, X, y, dirs, pool, keys, session="t1", resume=True)
        again = await _run(c, X, y, dirs, pool, keys, session="t2", resume=True)
    assert_same_trees(first.joined(), _core(X, y))
    assert_same_trees(again.joined(), _core(X, y))


@pytest.mark.slow
async def test_a_warm_started_run_that_dies_resumes_to_all_its_rounds(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, tmp_path: Path
) -> None:
    """Two rounds, then a warm start of four more that dies after its first: resumed, it
    grows the other three (the continued model's rounds do not count towards them)."""
    X, y = breast
    two = replace(PARAMS, n_estimators=2)
    four = replace(PARAMS, n_estimators=4)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        first = await _run(
            c, X, y, _dirs(tmp_path / "first"), pool, keys, session="t0", resume=False, params=two
        )
        dirs = _dirs(tmp_path / "warm")
        with pytest.raises(Crash):
            await _run(
                c,
                X,
                y,
                dirs,
                pool,
                keys,
                session="t1",
                resume=False,
                params=four,
                init=first,
                callbacks=[_crash_at(3)],
            )
        saved = GuestCheckpoint.load(dirs["a"])
        assert saved is not None
        assert saved.model.n_rounds == 3  # two continued, one new
        fed = await _run(
            c, X, y, dirs, pool, keys, session="t2", resume=True, params=four, init=first
        )
    core = train(replace(PARAMS, n_estimators=6), X, y, eval_sets=[(X[:100], y[:100])])
    assert fed.guest.n_rounds == 6
    assert_same_trees(fed.joined(), core)


async def test_foreign_damaged_or_other_checkpoints_are_refused(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, tmp_path: Path
) -> None:
    X, y = breast
    X, y = X[:150], y[:150]
    small = replace(PARAMS, n_estimators=2, max_depth=2)
    one, other = _dirs(tmp_path / "one"), _dirs(tmp_path / "other")
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        for n, dirs in enumerate((one, other)):
            await _run(
                c, X, y, dirs, pool, keys, session=f"t{n}", resume=False, params=small, evals=False
            )
        # The host brings the checkpoint of another run.
        shutil.copy(host_checkpoint_path(other["b"], "a"), host_checkpoint_path(one["b"], "a"))
        with pytest.raises(CheckpointError, match="host 'b' resumes another training"):
            await _run(
                c, X, y, one, pool, keys, session="t3", resume=True, params=small, evals=False
            )
        # Other parameters: named, with both values.
        with pytest.raises(CheckpointError, match="max_depth: 2 then, 3 now"):
            await _run(
                c,
                X,
                y,
                other,
                pool,
                keys,
                session="t4",
                resume=True,
                params=replace(small, max_depth=3),
                evals=False,
            )
    # Other declared constraints: the host's digest covers them.
    X_host = X[:, SPLIT:]
    directions = [1] + [0] * (X_host.shape[1] - 1)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        declared = _dirs(tmp_path / "declared")
        await _run(
            c,
            X,
            y,
            declared,
            pool,
            keys,
            session="t5",
            resume=False,
            params=small,
            evals=False,
            host_monotone=directions,
        )
        with pytest.raises(CheckpointError, match="declared constraints differ"):
            await _run(
                c,
                X,
                y,
                declared,
                pool,
                keys,
                session="t6",
                resume=True,
                params=small,
                evals=False,
                host_first=True,
            )
    # Other data, and a damaged file.
    saved = GuestCheckpoint.load(other["a"])
    assert saved is not None
    with pytest.raises(CheckpointError, match="other data"):
        saved.check_settings("0" * 64, small.to_dict())
    path = other["a"] / "hetero-guest.ckpt"
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupted"):
        GuestCheckpoint.load(other["a"])
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a p2pboost checkpoint"):
        GuestCheckpoint.load(other["a"])
