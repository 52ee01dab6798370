"""``python -m benchmarks attacks``: the attacks find planted leaks, and their controls do not.

The attack math is checked on row sets and bits made by hand (fast); one small federation
runs the whole benchmark over the recorded, decoded messages (slow: seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import attacks
from p2pboost.audit.attacks import (
    auc,
    nesting_groups,
    order_by_bits,
    propagate_labels,
    random_like,
    spearman,
)
from tests._tiny_data import write_csv


def _trees_of_label_sets(y: np.ndarray, trees: int, rng: np.random.Generator) -> list[list]:
    """Per tree, leaves that each hold rows of mostly one label (10 % of rows misplaced)."""
    out = []
    for _ in range(trees):
        noisy = np.where(rng.random(y.size) < 0.1, 1 - y, y)
        leaf = noisy * 4 + rng.integers(0, 4, size=y.size)  # 4 leaves per label side
        out.append([np.flatnonzero(leaf == v) for v in range(8)])
    return out


def test_label_propagation_finds_label_sets_and_not_random_ones() -> None:
    rng = np.random.default_rng(0)
    n = 4000
    y = (rng.random(n) < 0.2).astype(np.int64)
    trees = _trees_of_label_sets(y, 6, rng)
    known = np.sort(rng.choice(n, size=40, replace=False))
    unknown = np.setdiff1d(np.arange(n), known)

    def attack(groups: list[np.ndarray]) -> float:
        score = propagate_labels(groups, n, known, y[known].astype(np.float64))
        return auc(y[unknown], score[unknown])

    assert attack([g for t in trees for g in t]) > 0.95
    control = [attack(random_like(trees, n, seed)) for seed in range(5)]
    assert abs(float(np.median(control)) - 0.5) < 0.05
    # The control keeps every size: only which rows are where changes.
    sizes = sorted(g.size for t in trees for g in t)
    assert sorted(g.size for g in random_like(trees, n, 1)) == sizes


def test_nesting_groups_splits_by_feature_and_ranks_rows() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    X = rng.normal(size=(n, 2))
    a = [X[:, 0] <= t for t in np.quantile(X[:, 0], [0.1, 0.3, 0.5, 0.7, 0.9])]
    b = [X[:, 1] <= t for t in np.quantile(X[:, 1], [0.25, 0.75])]
    tiny = X[:, 1] <= np.sort(X[:, 1])[2]  # three rows: left out, nests anywhere by chance
    bits = np.array([a[2], b[0], a[0], tiny, a[4], b[1], a[1], a[3]])
    groups = nesting_groups(bits, min_side=20)
    assert groups == [[0, 2, 4, 6, 7], [1, 5]]
    order = order_by_bits(bits, groups[0])
    assert spearman(order, X[:, 0]) > 0.9
    assert abs(spearman(order, X[:, 1])) < 0.1


@pytest.mark.slow
def test_benchmark_finds_planted_leaks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A guest feature that nearly is the label shows through the host's instance spaces
    (far above what the host's own features give, the random-set control near 0.5); the host
    feature the trees split on most is ordered from the guest's inference bits."""
    rng = np.random.default_rng(2)
    n = 1800
    ids = np.arange(n, dtype=np.float64)
    g, h = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    y = (g[:, 0] + 0.4 * h[:, 0] > 0).astype(np.float64)
    write_csv(tmp_path / "breast_hetero_guest.csv", ["id", "y", "x0", "x1"], np.c_[ids, y, g])
    write_csv(tmp_path / "breast_hetero_host.csv", ["id", "x0", "x1"], np.c_[ids, h])
    argv = ["--dataset", "breast", "--trees", "4", "--depth", "3", "--bins", "16"]
    argv += ["--modes", "standard,mix,layered_1_purity_gate", "--shares", "0.05"]
    argv += ["--data-dir", str(tmp_path), "--private-rows", "40"]
    assert attacks.main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["benchmark"] == "attacks"
    standard = out["label_inference"]["standard"]
    assert standard["known_share"] == 0.01
    assert set(standard["by_share"]) == {"0.01", "0.05"}
    assert standard["trees_seen"] == 4
    assert out["label_inference"]["mix"]["trees_seen"] == 2  # every other tree is the guest's
    assert 0.8 < standard["test_auc"] <= 1.0
    recommended = out["label_inference"]["recommended"]
    gated = out["label_inference"]["layered_1_purity_gate"]
    assert recommended["setting"] == "HeteroConfig(host_depth=1, guest_depth=2, purity_bound=0.2)"
    for key in ("known_share", "attack_auc", "test_auc", "excess"):
        assert recommended[key] == gated[key], key
    hidden = out["label_inference"]["hidden_guest_splits"]
    assert hidden["simulated"] is True
    assert hidden["attack_auc"] < standard["attack_auc"] - 0.1  # the guest's splits leaked
    for share, fig in out["by_share"].items():
        assert abs(fig["control_auc"] - 0.5) < 0.15, share
        attack = standard["by_share"][share]["attack_auc"]
        assert attack > fig["host_alone_auc"] + 0.15, share
    order = out["feature_order"]
    assert order["host_feature"] == 0
    assert order["default"]["spearman"] > 0.8
    assert order["default"]["spearman"] > order["scores_only"]["spearman"] + 0.2
    private = order["private"]  # the same guest after private inference: scores only
    assert private["rows"] == 40
    assert private["host_splits_received"] == 0
    assert private["max_abs_score_diff"] < 1e-9
    assert private["spearman"] == private["scores_only_same_rows"]
