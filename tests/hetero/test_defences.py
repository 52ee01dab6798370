"""The purity gate (``HeteroConfig.purity_bound``): guest-only rounds until the guest's own
tree's gradient purity falls below the bound, then the mode's schedule; the federated trees
equal the core's under the same rounds' masks."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import replace

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.metrics import leaf_purity
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.training.defences import PurityGate, gradient_purity, purity_gate
from p2pboost.hetero.training.modes import FeatureSchedule
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Keys, assert_same_trees, federate


def test_gradient_purity_is_the_share_of_gradient_mass_the_leaves_separate() -> None:
    g = np.array([0.3, 0.3, -0.7, -0.7])
    assert gradient_purity(g, [1, 1, 2, 2]) == pytest.approx(1.0)  # one sign per leaf
    assert gradient_purity(g, [1, 2, 1, 2]) == pytest.approx(0.8 / 2.0)  # -0.4 in each
    assert gradient_purity(g, [0, 0, 0, 0]) == pytest.approx(0.8 / 2.0)
    # A row outside the sample (negative position) is left out; a matrix uses column 0.
    assert gradient_purity(np.c_[g, -g], [1, 1, 2, -1]) == pytest.approx(1.0)
    assert gradient_purity(np.zeros(3), [0, 1, 1]) == 0.0


def test_gate_keeps_rounds_guest_only_until_the_purity_falls() -> None:
    guest = np.array([True, True, False])
    gate = PurityGate(0.25, guest, None)
    pure = (np.array([0.5, 0.5, -0.5, -0.5]), np.array([1, 1, 2, 2]))  # purity 1
    mixed = (np.array([0.5, -0.5, 0.5, -0.5]), np.array([1, 1, 2, 2]))  # purity 0
    assert gate(0) is guest
    gate.observe(0, *pure)
    assert gate(1) is guest
    gate.observe(1, *mixed)
    assert gate(2) is None
    assert gate.open
    gate.observe(2, *pure)  # once open, it stays open and measures nothing more
    assert gate(3) is None
    assert gate.guest_only_rounds == 2
    assert gate.diagnostics()["purity_guest_only_rounds"] == 2.0
    # complete_secure's rounds come first, whatever the purity; then the inner schedule.
    turns = PurityGate(0.25, guest, lambda r: np.array([r % 2 == 0] * 3), first=2)
    turns.observe(0, *mixed)
    assert turns(1) is guest
    turns.observe(1, *mixed)
    mask = turns(2)
    assert mask is not None
    assert mask.all()


def test_closed_gate_lets_the_guest_split_at_every_depth_in_layered_mode() -> None:
    schedule = FeatureSchedule((2, 3), host_depth=1, guest_depth=2)
    gate = purity_gate(HeteroConfig(purity_bound=0.3), schedule)
    assert gate is not None
    by_depth = gate.by_depth(schedule.guest_by_depth())
    assert by_depth is not None
    assert by_depth(0) is None  # closed: the guest's features at the top layer too
    gate.open = True
    top = by_depth(0)
    assert top is not None
    assert not top.any()  # open: the top layer is the hosts' again
    assert gate.by_depth(None) is None


def test_purity_bound_is_validated_and_off_by_default() -> None:
    assert HeteroConfig().purity_bound == 0.0
    assert purity_gate(HeteroConfig(), FeatureSchedule((2, 3))) is None
    for bad in (1.0, -0.1, True):
        with pytest.raises(InputError, match="purity_bound"):
            HeteroConfig(purity_bound=bad)
    with pytest.raises(InputError, match="dp"):  # a private run's accountant
        purity_gate(HeteroConfig(purity_bound=0.3), FeatureSchedule((2, 3)), private=True)
    gate = purity_gate(HeteroConfig(purity_bound=0.3), FeatureSchedule((2, 3)))
    assert gate is not None
    assert gate(0).tolist() == [True, True, False, False, False]  # type: ignore[union-attr]


@pytest.mark.slow
async def test_purity_gate_federation_equals_the_core_with_the_same_rounds(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    Xg, Xh = X[:, :10], X[:, 10:]
    params = BoostParams(n_estimators=5, max_depth=3, max_bin=16)
    config = replace(CONFIG, purity_bound=0.8)  # guest trees: 0.87, 0.84, 0.79
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        fed = await federate(c, Xg, y, [Xh], params, pool, keys, config=config)
    k = int(fed.guest.diagnostics["purity_guest_only_rounds"])
    assert k == 3  # closed for three rounds, then open
    purities = fed.guest.diagnostics
    assert purities["purity_last_guest_tree"] < 0.8 == purities["purity_bound"]
    guest_mask = np.arange(X.shape[1]) < Xg.shape[1]
    core = train(params, X, y, features_by_round=lambda r: guest_mask if r < k else None)
    assert_same_trees(fed.joined(), core)
    for tree in fed.guest.trees[:k]:
        assert set(tree.owner[tree.left >= 0].tolist()) == {0}
    assert any(1 in set(t.owner[t.left >= 0].tolist()) for t in fed.guest.trees[k:])
    # The diagnostic of the first instance spaces a host sees is the first tree after the
    # gate opened (the core's tree k on the same rows), not the run's first tree.
    first_shared = leaf_purity(y.astype(np.float64), core.trees[k].leaves_raw(X), True)
    d = fed.guest.diagnostics
    assert d["leaf_purity_first_shared_tree"] == pytest.approx(first_shared, abs=1e-6)
    assert d["leaf_purity_first_shared_tree"] != d["leaf_purity_first_tree"]
