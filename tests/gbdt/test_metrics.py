from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from p2pboost.exceptions import InputError
from p2pboost.gbdt.metrics import available_metrics, get_metric


def test_metrics_agree_with_scikit_learn() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300).astype(np.float64)
    p = np.clip(0.3 * y + rng.random(300) * 0.7, 0, 1).round(2)  # rounded: many ties
    assert get_metric("auc")(y, p) == pytest.approx(skm.roc_auc_score(y, p))
    assert get_metric("logloss")(y, p) == pytest.approx(
        skm.log_loss(y, np.clip(p, 1e-15, 1 - 1e-15))
    )
    assert get_metric("accuracy")(y, p) == pytest.approx(skm.accuracy_score(y, p >= 0.5))
    v = rng.normal(size=300)
    assert get_metric("rmse")(v, v + 0.5) == pytest.approx(0.5)
    assert get_metric("mae")(v, v - 2.0) == pytest.approx(2.0)
    probs = rng.dirichlet(np.ones(3), 300)
    labels = rng.integers(0, 3, 300).astype(np.float64)
    assert get_metric("mlogloss")(labels, probs) == pytest.approx(skm.log_loss(labels, probs))
    assert get_metric("accuracy")(labels, probs) == pytest.approx(
        skm.accuracy_score(labels, probs.argmax(axis=1))
    )


def test_credit_scoring_metrics_agree_with_the_roc_curve() -> None:
    """KS is the largest gap between TPR and FPR over thresholds (ties move together), Gini
    the accuracy ratio 2 * AUC - 1; both from scikit-learn's ROC curve, on scores with ties."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 400).astype(np.float64)
    p = np.clip(0.25 * y + rng.random(400) * 0.75, 0, 1).round(2)
    fpr, tpr, _ = skm.roc_curve(y, p)
    assert get_metric("ks")(y, p) == pytest.approx(float(np.max(tpr - fpr)))
    assert get_metric("gini")(y, p) == pytest.approx(2 * skm.roc_auc_score(y, p) - 1)
    assert get_metric("ks").higher_is_better
    assert get_metric("gini").higher_is_better
    with pytest.raises(InputError, match="both classes"):
        get_metric("ks")(np.zeros(3), np.ones(3))


def test_credit_metrics_in_the_training_history() -> None:
    from sklearn.datasets import load_breast_cancer

    from p2pboost.gbdt.booster import train
    from p2pboost.gbdt.params import BoostParams

    X, y = load_breast_cancer(return_X_y=True)
    model = train(
        BoostParams(n_estimators=3, max_depth=2),
        X[:400],
        y[:400],
        eval_sets=[(X[400:], y[400:])],
        eval_metrics=["auc", "ks", "gini"],
    )
    (scores,) = model.history.values()
    assert set(scores) == {"auc", "ks", "gini"}
    assert scores["gini"] == pytest.approx([2 * a - 1 for a in scores["auc"]])
    assert all(0 < k <= 1 for k in scores["ks"])


def test_metric_errors() -> None:
    assert "auc" in available_metrics()
    with pytest.raises(InputError, match="unknown metric"):
        get_metric("f1")
    with pytest.raises(InputError, match="both classes"):
        get_metric("auc")(np.ones(3), np.ones(3))
    with pytest.raises(InputError, match="labels"):
        get_metric("rmse")(np.ones(3), np.ones(4))


def test_leaf_purity() -> None:
    from p2pboost.gbdt.metrics import leaf_purity

    y = np.array([0, 0, 1, 1, 1, 0], dtype=np.float64)
    assert leaf_purity(y, np.array([1, 1, 2, 2, 2, 1]), classification=True) == 1.0
    assert leaf_purity(y, np.zeros(6, dtype=np.int64), classification=True) == 0.5
    assert leaf_purity(y, np.array([1, 1, 2, 2, 1, 1]), classification=True) == pytest.approx(5 / 6)
    values = np.array([1.0, 1.0, 5.0, 5.0])
    assert leaf_purity(values, np.array([3, 3, 4, 4]), classification=False) == 1.0
    assert leaf_purity(values, np.zeros(4, dtype=np.int64), classification=False) == 0.0


def _purity_by_sorting(y: np.ndarray, leaves: np.ndarray, classification: bool) -> float:
    """The reference: leaf purity with every value coded by sorting (np.unique)."""
    _, leaf = np.unique(leaves, return_inverse=True)
    leaf = leaf.reshape(-1)
    if classification:
        _, label = np.unique(y, return_inverse=True)
        counts = np.zeros((leaf.max() + 1, label.max() + 1))
        np.add.at(counts, (leaf, label.reshape(-1)), 1.0)
        return float(counts.max(axis=1).sum() / y.size)
    total = float(np.var(y))
    if total == 0.0:
        return 1.0
    sums, sizes = np.bincount(leaf, weights=y), np.bincount(leaf)
    return 1.0 - float(np.mean((y - (sums / sizes)[leaf]) ** 2)) / total


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 60),
    leaf_values=st.sampled_from(["small", "huge", "negative"]),
    label_values=st.sampled_from(["classes", "fractions", "wide"]),
)
def test_leaf_purity_agrees_with_coding_by_sorting(
    data: st.DataObject, n: int, leaf_values: str, label_values: str
) -> None:
    # Leaves and labels coded by an offset where they are small integers, else by sorting:
    # the same purity either way, including leaves far apart (int64's extremes) and
    # fractional or widely spread labels.
    from p2pboost.gbdt.metrics import leaf_purity

    ints = {
        "small": st.integers(0, 40),
        "huge": st.sampled_from([-(2**63), 0, 7, 2**63 - 1]),
        "negative": st.integers(-1000, -990),
    }[leaf_values]
    leaves = np.array(data.draw(st.lists(ints, min_size=n, max_size=n)), dtype=np.int64)
    labels = {
        "classes": st.integers(0, 3).map(float),
        "fractions": st.sampled_from([0.25, 0.5, 1.75]),
        "wide": st.sampled_from([-1e300, 0.0, 1e300]),
    }[label_values]
    y = np.array(data.draw(st.lists(labels, min_size=n, max_size=n)), dtype=np.float64)
    if label_values != "wide":  # regression on 1e300 overflows the variance either way
        assert leaf_purity(y, leaves, classification=False) == pytest.approx(
            _purity_by_sorting(y, leaves, False), abs=1e-12
        )
    assert leaf_purity(y, leaves, classification=True) == pytest.approx(
        _purity_by_sorting(y, leaves, True), abs=1e-12
    )


def test_lift_in_the_top_share_of_scores() -> None:
    from p2pboost.gbdt.metrics import get_metric, lift

    y = np.array([1, 0, 1, 0, 0, 0, 0, 0, 0, 0], dtype=float)
    score = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0])
    # Top 20 %: rows 0 and 1, one positive: rate 0.5 against 0.2 overall.
    assert lift(y, score, 0.2) == pytest.approx(2.5)
    assert lift(y, score, 1.0) == pytest.approx(1.0)
    assert get_metric("lift@20")(y, score) == pytest.approx(2.5)
    assert get_metric("lift@20").higher_is_better
    # Ties at the cut count in proportion: the order of tied rows does not matter.
    tied = np.array([0.9, 0.5, 0.5, 0.5, 0.5, 0.1, 0.1, 0.1, 0.1, 0.1])
    y2 = np.array([0, 1, 0, 0, 0, 1, 0, 0, 0, 0], dtype=float)
    a = lift(y2, tied, 0.3)
    order = np.array([0, 4, 3, 2, 1, 9, 8, 7, 6, 5])
    assert lift(y2[order], tied[order], 0.3) == pytest.approx(a)
    assert a == pytest.approx(((0 + 2 * 0.25) / 3) / 0.2)
    with pytest.raises(InputError, match="lift@P needs a percentage"):
        get_metric("lift@0")
    with pytest.raises(InputError, match="or lift@P"):
        get_metric("lifted")


def test_lift_as_an_evaluation_metric_of_the_core() -> None:
    from p2pboost.gbdt.booster import train
    from p2pboost.gbdt.params import BoostParams

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 4))
    y = (X[:, 0] + 0.5 * rng.normal(size=600) > 0.8).astype(float)
    model = train(BoostParams(n_estimators=3), X, y, [(X, y)], eval_metrics=["lift@10", "ks"])
    assert set(model.history["valid_0"]) == {"lift@10", "ks"}
    assert all(v > 1.5 for v in model.history["valid_0"]["lift@10"])
