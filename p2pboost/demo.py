"""``p2pboost demo``: a model on data that needs no download, ending in one JSON line.

Modes:

* ``plain``: the plaintext boosting core on scikit-learn's bundled breast-cancer data (569
  rows, 30 features; a seeded 2/3 : 1/3 split), the reference the federated protocols are
  checked against. The federated modes join it as their protocols land.

The last line printed is one JSON object: ``mode``, ``trees``, ``s_per_tree``, ``metric`` and
``value`` (test AUC).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pboost.exceptions import ConfigError
from p2pboost.gbdt.estimators import GBDTClassifier
from p2pboost.gbdt.metrics import auc

__all__ = ["MODES", "DemoResult", "run_demo"]

MODES = ("plain",)


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What the demo measured."""

    mode: str
    trees: int
    s_per_tree: float
    metric: str
    value: float

    def to_json(self) -> str:
        return json.dumps(
            {
                "mode": self.mode,
                "trees": self.trees,
                "s_per_tree": round(self.s_per_tree, 6),
                "metric": self.metric,
                self.metric: round(self.value, 6),
            }
        )


def _load_breast_cancer() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as exc:  # pragma: no cover - dev extra always has it
        raise ConfigError(
            "the demo reads scikit-learn's bundled data: pip install 'p2pboost[dev]'"
        ) from exc
    data = load_breast_cancer()
    return np.asarray(data.data, dtype=np.float64), np.asarray(data.target, dtype=np.float64)


def run_demo(mode: str = "plain", *, trees: int = 25, depth: int = 5, seed: int = 0) -> DemoResult:
    """Train and evaluate one demo model; see the module docstring."""
    if mode not in MODES:
        raise ConfigError(f"unknown demo mode {mode!r}; choose one of {', '.join(MODES)}")
    X, y = _load_breast_cancer()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    n_test = len(y) // 3
    test, train = order[:n_test], order[n_test:]
    model = GBDTClassifier(n_estimators=trees, max_depth=depth, learning_rate=0.3, max_bin=32)
    t0 = time.perf_counter()
    model.fit(X[train], y[train])
    elapsed = time.perf_counter() - t0
    value = auc(y[test], model.predict_proba(X[test])[:, 1])
    return DemoResult(mode, trees, elapsed / trees, "auc", float(value))
