"""Clients that die mid-training: every aggregate stays exact and training completes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.config import HomoConfig, HomoResult
from tests.homo.conftest import Crash, Run, crash_at, run_homo, same_trees

PARAMS = BoostParams(n_estimators=3, max_depth=3, max_bin=8)


def _split(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> dict[str, tuple]:
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    return {f"c{i + 1}": (X[i::n], y[i::n]) for i in range(n)}


def _check_aggregates(run: Run) -> list[dict]:
    """Every aggregate the server computed equals the plaintext sum of its contributors."""
    aggregates = [obj for kind, _, obj in run.received if kind == "aggregate"]
    assert aggregates
    for agg in aggregates:
        r = agg["round"]
        expected = sum(run.plain[c][r][1] for c in agg["contributors"])
        np.testing.assert_array_equal(agg["total"], expected)
    return aggregates


async def test_one_killed_after_sending_one_before_threshold_3_of_4(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    parts = _split(breast, 4)
    hooks = {
        # c4 sends its grid and root-histogram vectors, then dies.
        "c4": crash_at("masked", 3),
        # c3 dies in a later tree before sending its vector.
        "c3": crash_at("masked", 9),
    }
    config = HomoConfig(allow_two_clients=True, params=PARAMS, threshold=3, round_timeout=5)
    run = await run_homo(parts, config, federation, hooks=hooks)
    assert isinstance(run.result, HomoResult), run.result
    assert run.result.clients == ["c1", "c2"]
    assert isinstance(run.models["c4"], Crash)
    assert isinstance(run.models["c3"], Crash)
    aggregates = _check_aggregates(run)
    contributors = [tuple(a["contributors"]) for a in aggregates]
    # c4's histogram made it into an aggregate before it died; later rounds went on without it.
    assert ("c1", "c2", "c3", "c4") in contributors
    assert ("c1", "c2", "c3") in contributors
    assert contributors[-1] == ("c1", "c2")
    # Keys were renewed after each dropout.
    assert run.result.epochs == 3
    # The server's result names the dropped clients and why (not only a log line).
    assert sorted(run.result.dropped) == ["c3", "c4"]
    assert all(why for why in run.result.dropped.values()), run.result.dropped
    for c in ("c1", "c2"):
        model = run.models[c]
        assert isinstance(model, Booster)
        assert same_trees(model, run.result.booster)
    assert len(run.result.booster.trees) == PARAMS.n_estimators


async def test_died_after_sending_while_another_never_sent_is_recovered_by_shamir(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    """c5 never sends in a round; c4 sends, then dies before revealing: the others hold
    enough shares (t = 3) to rebuild c4's self mask and c5's mask key."""
    parts = _split(breast, 5)
    hooks = {"c5": crash_at("masked", 2), "c4": crash_at("reveal", 1)}
    config = HomoConfig(allow_two_clients=True, params=PARAMS, threshold=3, round_timeout=5)
    run = await run_homo(parts, config, federation, hooks=hooks)
    assert isinstance(run.result, HomoResult), run.result
    assert run.result.clients == ["c1", "c2", "c3"]
    recovered = [obj for kind, _, obj in run.received if kind == "recv" and obj["t"] == "recovered"]
    assert len(recovered) == 3
    aggregates = _check_aggregates(run)
    # The recovered round's sum includes c4 (it sent) and not c5 (it did not).
    assert any(a["contributors"] == ["c1", "c2", "c3", "c4"] for a in aggregates)
    for c in ("c1", "c2", "c3"):
        model = run.models[c]
        assert isinstance(model, Booster)
        assert same_trees(model, run.result.booster)
