"""A host's memory budget for the encrypted histograms it keeps between layers: the trees stay
the core's, the measured peak stays under the budget, and the price is additions. By default
the guest derives each split's larger child and the host keeps no histogram at all; trees with
per-level column draws keep them (the parent's minus the smaller child's)."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.training.common import HostPhase, Progress
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import Keys, assert_same_trees, federate


async def _run(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    budget: float | None,
    monkeypatch: pytest.MonkeyPatch,
    bylevel: float = 0.9,
) -> tuple[Any, Progress]:
    """One federation on breast cancer (guest 10 columns, host 20) with the host's budget."""
    X, y = breast
    progress = Progress(HostPhase.SETUP)
    real = host_train

    async def budgeted(*args: Any, **kwargs: Any) -> Any:
        return await real(*args, **kwargs, progress=progress, memory_budget_mb=budget)

    monkeypatch.setattr("tests.hetero.conftest.host_train", budgeted)
    params = BoostParams(n_estimators=2, max_depth=4, max_bin=16, colsample_bylevel=bylevel)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, X[:, :10], y, [X[:, 10:]], params, pool, keys)
    assert_same_trees(fed.joined(), train(params, X, y))
    return fed, progress


@pytest.mark.slow
async def test_a_budget_bounds_the_kept_histograms_and_keeps_the_trees(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, free = await _run(breast, pool, keys, None, monkeypatch)
    budget_mb = 0.3  # a few nodes' histograms (20 features x 17 slots of 1024-bit ciphertexts)
    _, tight = await _run(breast, pool, keys, budget_mb, monkeypatch)
    _, none = await _run(breast, pool, keys, 0.0, monkeypatch)
    assert 0 < tight.hist_peak_bytes <= budget_mb * 2**20 < free.hist_peak_bytes
    assert none.hist_peak_bytes == 0  # nothing kept: every child built from its rows
    # The price: children built from rows instead of by subtraction.
    assert free.additions < tight.additions < none.additions


async def test_derived_siblings_keep_no_histogram_and_add_least(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, derived = await _run(breast, pool, keys, None, monkeypatch, bylevel=1.0)
    _, none = await _run(breast, pool, keys, 0.0, monkeypatch, bylevel=1.0)
    assert derived.hist_peak_bytes == none.hist_peak_bytes == 0
    # Only the smaller child of each split is built: the additions of a full cache, without it.
    _, cached = await _run(breast, pool, keys, None, monkeypatch, bylevel=0.999)
    assert 0 < derived.additions <= cached.additions


async def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(InputError, match="memory_budget_mb must be >= 0"):
        await host_train(None, "a", np.zeros((3, 2)), memory_budget_mb=-1.0)  # type: ignore[arg-type]
