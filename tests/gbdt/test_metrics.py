from __future__ import annotations

import numpy as np
import pytest
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


def test_metric_errors() -> None:
    assert "auc" in available_metrics()
    with pytest.raises(InputError, match="unknown metric"):
        get_metric("f1")
    with pytest.raises(InputError, match="both classes"):
        get_metric("auc")(np.ones(3), np.ones(3))
    with pytest.raises(InputError, match="labels"):
        get_metric("rmse")(np.ones(3), np.ones(4))
