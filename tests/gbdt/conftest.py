"""Shared small data for the gbdt tests (no downloads: scikit-learn's bundled sets)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer


@pytest.fixture(scope="session")
def breast() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_breast_cancer(return_X_y=True)
    return X.astype(np.float64), y.astype(np.float64)


@pytest.fixture(scope="session")
def breast_missing(breast: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Breast cancer with 10 % of the values removed at random (fixed seed)."""
    X, y = breast
    X = X.copy()
    X[np.random.default_rng(0).random(X.shape) < 0.1] = np.nan
    return X, y
