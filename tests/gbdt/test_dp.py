"""DPBoost in the core: parameters, row assignment, released trees, the accountant, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.params import BoostParams, DPParams
from p2pboost.gbdt.privacy import KeyedRows, RowCarry, split_scores, tree_plan, tree_rows


def _data(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = (X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n) > 0).astype(float)
    return X, y


def _params(**dp: object) -> BoostParams:
    settings = {"epsilon": 2.0, "noise_seed": 1, **dp}
    return BoostParams().with_updates(
        n_estimators=12, max_depth=3, learning_rate=0.2, max_bin=16, dp=settings
    )


def test_dp_params_validate_and_round_trip() -> None:
    p = _params(mechanism="para", trees_per_ensemble=4)
    assert isinstance(p.dp, DPParams)
    assert BoostParams.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    assert BoostParams().to_dict()["dp"] is None
    with pytest.raises(InputError, match=r"dp\.epsilon"):
        _params(epsilon=0)
    with pytest.raises(InputError, match=r"unknown dp\.mechanism"):
        _params(mechanism="laplace")
    with pytest.raises(InputError, match="unknown dp setting"):
        _params(epsilonn=1)
    with pytest.raises(InputError, match="dp must be a map"):
        BoostParams().with_updates(dp=3)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"objective": "reg:absoluteerror"}, "bounded gradient"),
        ({"goss": True}, "assigns rows"),
        ({"subsample": 0.5}, "assigns rows"),
        ({"gamma": 0.1}, "full trees"),
        ({"min_samples_leaf": 3}, "full trees"),
    ],
)
def test_dp_refuses_what_it_cannot_account_for(change: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        _params().with_updates(**change)


def test_dp_refuses_warm_start_weights_and_unbounded_labels() -> None:
    X, y = _data()
    model = train(_params(), X, y)
    with pytest.raises(InputError, match="cannot continue"):
        train(_params(), X, y, init_model=model)
    with pytest.raises(InputError, match="sample_weight"):
        train(_params(), X, y, sample_weight=np.ones(y.size))
    reg = _params().with_updates(objective="reg:squarederror")
    with pytest.raises(InputError, match="label_bound"):
        train(reg, X, 3 * X[:, 0])
    train(reg.with_updates(dp={"epsilon": 1.0, "label_bound": 20.0}), X, 3 * X[:, 0])


@pytest.mark.parametrize("mechanism", ["dpboost", "seq", "para"])
def test_accountant_states_the_requested_budget(mechanism: str) -> None:
    X, y = _data()
    params = _params(mechanism=mechanism, trees_per_ensemble=5)
    record = train(params, X, y).privacy
    assert record is not None
    assert record["mechanism"] == mechanism
    assert record["trees"] == 12
    # The snapping mechanism's excess is below 2^-40 of the budget.
    assert record["epsilon"] == pytest.approx(2.0, rel=1e-9)
    assert record["epsilon"] >= 2.0
    per = {"dpboost": 2.0 / 3, "seq": 2.0 / 12, "para": 2.0}[mechanism]
    assert record["epsilon_per_tree"] == pytest.approx(per)
    assert record["noise"].startswith("seeded")


def test_released_trees_hold_no_noiseless_statistics() -> None:
    X, y = _data()
    model = train(_params(), X, y)
    np.testing.assert_array_equal(model.base_margin, [0.0])  # not the labels' mean
    for i, tree in enumerate(model.trees):
        assert not tree.gain.any()
        assert not tree.cover.any()
        assert not tree.value[~tree.is_leaf].any()
        plan = tree_plan(model.params, i)
        assert np.all(np.abs(tree.value) <= model.params.learning_rate * plan.leaf_bound)
        assert tree.depth == 3  # full trees: every node splits


def test_same_seed_same_model_no_seed_fresh_noise(tmp_path: Path) -> None:
    X, y = _data()
    a, b = train(_params(), X, y), train(_params(), X, y)
    assert a.to_dict() == b.to_dict()
    unseeded = _params().with_updates(dp={"epsilon": 2.0})
    c, d = train(unseeded, X, y), train(unseeded, X, y)
    assert c.privacy is not None
    assert c.privacy["noise"] == "os.urandom"
    assert [t.value.tolist() for t in c.trees] != [t.value.tolist() for t in d.trees]
    a.save(tmp_path / "m.json")
    back = Booster.load(tmp_path / "m.json")
    assert back.privacy == a.privacy
    np.testing.assert_array_equal(back.predict(X), a.predict(X))


def test_a_private_model_file_holds_no_count_of_the_training_rows(tmp_path: Path) -> None:
    """The gradient filter's count depends on the rows (here a neighbouring set, the last row
    left out, changes it) and is not noised: the trainer sees it, the model file does not
    hold it, and the privacy record is the same for both sets."""
    X, y = _data()
    a, b = train(_params(), X, y), train(_params(), X[:-1], y[:-1])
    assert a.filtered_rows is not None
    assert b.filtered_rows is not None
    assert a.filtered_rows > 0
    assert a.filtered_rows != b.filtered_rows
    assert a.privacy == b.privacy
    a.save(tmp_path / "a.json")
    text = (tmp_path / "a.json").read_text()
    assert "filtered" not in text
    assert str(a.filtered_rows) not in json.dumps(json.loads(text)["privacy"])
    assert Booster.load(tmp_path / "a.json").filtered_rows is None


def test_model_file_privacy_record_must_match_its_settings(tmp_path: Path) -> None:
    X, y = _data()
    data = train(_params(), X, y).to_dict()
    del data["privacy"]
    with pytest.raises(ModelError, match="privacy record"):
        Booster.from_dict(data)
    plain = train(BoostParams(n_estimators=2), X, y).to_dict()
    plain["privacy"] = {"epsilon": 1.0}
    with pytest.raises(ModelError, match="privacy record"):
        Booster.from_dict(plain)


def test_dpboost_rows_are_disjoint_within_an_ensemble_and_cover_it() -> None:
    params = _params(trees_per_ensemble=4)
    keys = np.random.default_rng(0).random(10_000)
    grad = np.zeros((keys.size, 1))
    rows = [tree_rows(tree_plan(params, i), keys, grad, True).sample for i in range(4)]
    joined = np.concatenate(rows)
    assert np.unique(joined).size == joined.size == keys.size
    sizes = np.array([r.size for r in rows]) / keys.size
    eta = params.learning_rate
    expected = eta * (1 - eta) ** np.arange(4) / (1 - (1 - eta) ** 4)
    np.testing.assert_allclose(sizes, expected, atol=0.02)  # Algorithm 2's shares
    assert tree_plan(params, 4).ensemble == 1
    assert tree_plan(params, 4).position == 0


def test_gdf_filters_and_clipping_bounds_the_gradients() -> None:
    plan = tree_plan(_params(mechanism="seq"), 0)  # all rows, g* = 0.5 (logistic)
    grad = np.array([[0.1], [-0.7], [0.5], [0.9]])
    picked = tree_rows(plan, None, grad, gdf=True)
    assert picked.sample.tolist() == [0, 2]
    assert picked.filtered == 2
    assert picked.carried is None  # SEQ: every tree is offered every row anyway
    picked = tree_rows(plan, None, grad, gdf=False)
    assert picked.sample.tolist() == [0, 1, 2, 3]
    assert picked.filtered == 0
    assert picked.grad[:, 0].tolist() == [0.1, -0.5, 0.5, 0.5]


def test_filtered_rows_carry_to_the_ensembles_next_trees_and_are_used_once() -> None:
    """GDF's filtered rows are offered to the ensemble's next trees until one uses them; the
    ensemble's end drops them; a tree computed again takes the same rows."""
    params = _params(trees_per_ensemble=3).with_updates(n_estimators=6)
    # DPBoost's shares at eta = 0.2: keys [0, 0.41) tree 0, [0.41, 0.74) tree 1, else tree 2.
    assert tree_plan(params, 0).hi == pytest.approx(0.2 / (1 - 0.8**3))
    keys = np.array([0.1, 0.2, 0.5, 0.6, 0.9, 0.3])
    grads = np.array(  # |g| of rows 0..5 at trees 0, 1, 2 (g* = 0.5: above it, filtered)
        [
            [0.7, 0.1, 0.1, 0.1, 0.1, 0.9],
            [0.3, 0.1, 0.1, 0.9, 0.1, 0.9],
            [0.1, 0.1, 0.1, 0.8, 0.1, 0.2],
        ]
    )
    carry = RowCarry()
    # Tree 1 twice, as a horizontal client computes a tree grown again after a dropout.
    picked = [
        carry.rows(tree_plan(params, t), keys, -grads[t][:, None], True) for t in (0, 1, 1, 2)
    ]
    assert picked[1].sample.tolist() == picked[2].sample.tolist()
    del picked[1]
    # Row 0: filtered at tree 0, used at tree 1 (its gradient is back under g*); row 5: filtered
    # at trees 0 and 1, used at tree 2; row 1 is used at tree 0 only, whatever its gradients
    # later; row 3: filtered at trees 1 and 2, then dropped with the ensemble's end.
    assert [p.sample.tolist() for p in picked] == [[1], [0, 2], [4, 5]]
    assert [p.filtered for p in picked] == [2, 2, 1]  # filtering events: row 5 twice
    carried = [None if p.carried is None else np.flatnonzero(p.carried).tolist() for p in picked]
    assert carried == [[0, 5], [3, 5], None]
    # The next ensemble starts with nothing carried (row 3 is only offered by its new key).
    nxt = carry.rows(tree_plan(params, 3), keys, np.zeros((6, 1)), True)
    assert nxt.sample.tolist() == [0, 1, 5]
    # Without GDF nothing is filtered, so nothing is carried.
    clipped = RowCarry()
    for t in range(3):
        assert clipped.rows(tree_plan(params, t), keys, grads[t][:, None], False).carried is None


def test_a_party_that_restarts_mid_ensemble_offers_no_rows_until_the_next() -> None:
    """A party keys its rows at an ensemble's first tree. Its new process, asked for a later
    tree of that ensemble, has no keys and draws none (fresh keys could put a row an earlier
    tree used in this tree's share): no rows until the next ensemble's first tree. With SEQ
    every tree takes every row, so a restart changes nothing."""
    params = _params(trees_per_ensemble=3).with_updates(n_estimators=6)
    draws: list[int] = []

    def draw(n: int) -> np.ndarray:
        draws.append(n)
        return np.random.default_rng(len(draws)).random(n)

    grad = np.zeros((50, 1))
    first = KeyedRows(draw)
    before = [first.rows(tree_plan(params, t), grad, True).sample for t in (0, 1)]
    assert draws == [50]
    assert all(rows.size for rows in before)
    again = KeyedRows(draw)  # the restarted process
    for t in (1, 2):
        picked = again.rows(tree_plan(params, t), grad, True)
        assert picked.sample.size == 0
        assert picked.carried is None
    assert again.filtered == {1: 0, 2: 0}
    assert draws == [50]  # no keys drawn mid-ensemble
    assert again.rows(tree_plan(params, 3), grad, True).sample.size > 0
    assert draws == [50, 50]
    seq = _params(mechanism="seq").with_updates(n_estimators=6)
    assert KeyedRows(draw).rows(tree_plan(seq, 4), grad, True).sample.size == 50


@pytest.mark.parametrize("mechanism", ["dpboost", "para"])
def test_carried_rows_never_change_which_rows_the_other_trees_take(mechanism: str) -> None:
    """Carrying only adds a tree the rows it was carried; each tree still takes the rows of its
    share exactly as without carrying, and no row serves two trees of one ensemble."""
    params = _params(mechanism=mechanism, trees_per_ensemble=5).with_updates(n_estimators=10)
    rng = np.random.default_rng(3)
    n = 2000
    carry = RowCarry()
    used = np.zeros(n, dtype=np.int64)
    carried_in = np.zeros(n, dtype=np.bool_)
    extra = 0
    for t in range(10):
        plan = tree_plan(params, t)
        if plan.position == 0:
            keys = rng.random(n)
            used[:] = 0
            carried_in[:] = False
        grad = rng.normal(0.0, 0.45, size=(n, 1))
        picked = carry.rows(plan, keys, grad, True)
        alone = tree_rows(plan, keys, grad, True).sample
        assert np.isin(alone, picked.sample).all()
        more = np.setdiff1d(picked.sample, alone)
        assert carried_in[more].all()
        extra += more.size
        used[picked.sample] += 1
        assert used.max() <= 1
        carried_in = np.zeros(n, dtype=np.bool_) if picked.carried is None else picked.carried
        assert plan.last == (picked.carried is None)
    assert extra > 100  # rows were carried and used


def test_glc_shrinks_leaf_bound_and_sensitivity() -> None:
    params = _params(trees_per_ensemble=6)
    eta, lam, g = params.learning_rate, params.reg_lambda, 0.5
    for position in range(6):
        plan = tree_plan(params, position)
        assert plan.leaf_bound == pytest.approx(g * (1 - eta) ** position)
        assert plan.delta_v == pytest.approx(min(g / (1 + lam), 2 * plan.leaf_bound))
        assert plan.delta_g == pytest.approx(3 * g * g)
    no_glc = tree_plan(_params(glc=False), 5)
    assert no_glc.delta_v == pytest.approx(g / (1 + lam))
    assert no_glc.leaf_bound == g


@pytest.mark.parametrize("lam", [0.0, 0.1, 1.0, 5.0])
def test_split_score_sensitivity_bounds_every_neighbour_and_is_reached(lam: float) -> None:
    """Delta_G must bound the score's change when one row (|g| <= g*) joins a child, at any
    node size: the worst case, n rows at +g* joined by one at -g*, tends to 3 g*^2 as n grows
    (a bound from small nodes only, as the paper's first one, understates the budget)."""
    plan = tree_plan(_params().with_updates(reg_lambda=lam), 0)
    g_star = plan.grad_bound
    # The changed child holds n rows with gradient sum s, |s| <= n g*; the other child is
    # empty (its term does not change).
    n = np.broadcast_to(np.arange(0.0, 5001.0)[:, None], (5001, 21))[..., None]
    s = n * np.linspace(-1.0, 1.0, 21)[None, :, None] * g_star
    worst = 0.0
    for g in (-g_star, g_star):
        before = split_scores(s, n, s, n, lam)
        after = split_scores(s + g, n + 1, s + g, n + 1, lam)
        worst = max(worst, float(np.max(np.abs(after - before))))
    assert worst <= plan.delta_g
    assert worst > 0.99 * plan.delta_g


def test_private_model_learns_at_a_large_budget() -> None:
    """Not a privacy claim: with a large epsilon the mechanisms let the signal through."""
    from sklearn.metrics import roc_auc_score

    X, y = _data(4000)
    model = train(_params(epsilon=500.0, mechanism="seq").with_updates(n_estimators=20), X, y)
    assert roc_auc_score(y, model.predict(X)) > 0.85


def test_estimators_take_dp_and_stay_scikit_learn_estimators() -> None:
    from sklearn.base import clone

    from p2pboost.gbdt.estimators import GBDTClassifier, GBDTRegressor

    X, y = _data()
    clf = GBDTClassifier(n_estimators=5, max_depth=2, dp={"epsilon": 3.0, "noise_seed": 2})
    clf.fit(X, y)
    assert clf.booster_.privacy is not None
    assert clf.booster_.privacy["epsilon"] == pytest.approx(3.0)
    assert clone(clf).get_params()["dp"] == {"epsilon": 3.0, "noise_seed": 2}
    reg = GBDTRegressor(n_estimators=3, max_depth=2, dp=DPParams(epsilon=1.0, label_bound=5.0))
    assert reg.fit(X, np.clip(X[:, 0], -5, 5)).predict(X).shape == (y.size,)
    with pytest.raises(InputError, match="sample_weight"):
        clf.fit(X, y, sample_weight=np.ones(y.size))


def test_inspect_states_the_privacy_record(tmp_path: Path) -> None:
    from p2pboost.app.model_info import describe, format_description

    X, y = _data()
    train(_params(), X, y).save(tmp_path / "m.json")
    d = describe(tmp_path / "m.json")
    assert d["privacy"]["epsilon"] == pytest.approx(2.0)
    text = format_description(d)
    assert "epsilon = 2 differential privacy of this model (dpboost" in text
    assert "noise: seeded (tests only: not private)" in text
    assert "WARNING" not in text
    assert "filtered" not in text
    assert d["warnings"] == []
    # A file from before the split sensitivity was 3 g*^2 (lambda 1: 5/6 g*^2) is flagged.
    data = json.loads((tmp_path / "m.json").read_text())
    data["privacy"]["delta_g"] = 5.0 / 6.0 * data["privacy"]["grad_bound"] ** 2
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = format_description(describe(tmp_path / "old.json"))
    assert "WARNING: trained with the split sensitivity" in old
    assert "spent up to 3.6 times their share" in old


def test_a_file_with_the_filters_count_loads_without_it_and_inspect_warns(
    tmp_path: Path,
) -> None:
    """Files of older releases hold ``filtered_rows`` in the record: the model loads without
    it (saved again, the file is clean), and inspect says the file holds it, not its value."""
    from p2pboost.app.model_info import describe, format_description

    X, y = _data()
    data = train(_params(), X, y).to_dict()
    data["privacy"]["filtered_rows"] = 98765
    (tmp_path / "old.json").write_text(json.dumps(data))
    model = Booster.load(tmp_path / "old.json")
    assert model.privacy is not None
    assert "filtered_rows" not in model.privacy
    model.save(tmp_path / "again.json")
    assert "filtered_rows" not in (tmp_path / "again.json").read_text()
    assert describe(tmp_path / "again.json")["warnings"] == []
    d = describe(tmp_path / "old.json")
    assert "filtered_rows" not in d["privacy"]
    assert len(d["warnings"]) == 1
    text = format_description(d)
    assert "WARNING" in text
    assert "'filtered_rows', a count of the training rows released without noise" in text
    assert "98765" not in text
    # A horizontal server's file of those releases said None (not counted): nothing to warn.
    data["privacy"]["filtered_rows"] = None
    (tmp_path / "server.json").write_text(json.dumps(data))
    assert describe(tmp_path / "server.json")["warnings"] == []


def test_party_config_reads_a_dp_table(tmp_path: Path) -> None:
    from p2pboost.app._toml import Reader as _Reader
    from p2pboost.app._toml import boost_params
    from p2pboost.exceptions import ConfigError

    table = {"n_estimators": 5, "dp": {"epsilon": 2.0, "mechanism": "para"}}
    params = boost_params(_Reader(tmp_path / "p.toml", table, "train."))
    assert params.dp == DPParams(epsilon=2.0, mechanism="para")
    with pytest.raises(ConfigError, match=r"train\.dp: expected a table"):
        boost_params(_Reader(tmp_path / "p.toml", {"dp": 1.0}, "train."))
    with pytest.raises(ConfigError, match="unknown dp setting"):
        boost_params(_Reader(tmp_path / "p.toml", {"dp": {"eps": 1.0}}, "train."))
