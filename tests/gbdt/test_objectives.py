from __future__ import annotations

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.objectives import available_objectives, canonical_objective, get_objective
from p2pboost.gbdt.params import BoostParams

SCALAR = [
    "binary:logistic",
    "reg:squarederror",
    "reg:absoluteerror",
    "reg:pseudohubererror",
    "reg:fair",
    "reg:logcosh",
    "reg:tweedie",
]
#: Objectives whose hessian is the true second derivative (L1 uses the surrogate 1).
EXACT_HESSIAN = [name for name in SCALAR if name != "reg:absoluteerror"]


def _labels(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if name == "binary:logistic":
        return rng.integers(0, 2, n).astype(np.float64)
    if name == "reg:tweedie":
        return rng.gamma(2.0, 1.0, n) * (rng.random(n) < 0.8)
    return rng.normal(0.0, 2.0, n)


def _margins(rng: np.random.Generator, y: np.ndarray, n_out: int = 1) -> np.ndarray:
    m = rng.normal(0.0, 1.5, (y.size, n_out))
    if n_out == 1:
        # Keep L1 and friends away from their kink at r = 0.
        close = np.abs(m[:, 0] - y) < 1e-2
        m[close, 0] += 0.1
    return m


@pytest.mark.parametrize("name", SCALAR)
def test_gradient_matches_finite_differences(name: str) -> None:
    rng = np.random.default_rng(1)
    obj = get_objective(BoostParams(objective=name, huber_delta=1.3, fair_c=0.7))
    y = obj.check_labels(_labels(name, rng, 64))
    m = _margins(rng, y)
    g, _ = obj.grad_hess(y, m)
    eps = 1e-6
    numeric = (obj.loss(y, m + eps) - obj.loss(y, m - eps)) / (2 * eps)
    np.testing.assert_allclose(g[:, 0], numeric, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", EXACT_HESSIAN)
def test_hessian_matches_finite_differences(name: str) -> None:
    rng = np.random.default_rng(2)
    obj = get_objective(BoostParams(objective=name, huber_delta=1.3, fair_c=0.7))
    y = obj.check_labels(_labels(name, rng, 64))
    m = _margins(rng, y)
    _, h = obj.grad_hess(y, m)
    eps = 1e-5
    numeric = (obj.grad_hess(y, m + eps)[0] - obj.grad_hess(y, m - eps)[0]) / (2 * eps)
    np.testing.assert_allclose(h, np.maximum(numeric, 1e-16), rtol=1e-4, atol=1e-7)


def test_l1_hessian_is_the_documented_surrogate() -> None:
    obj = get_objective(BoostParams(objective="reg:absoluteerror"))
    y = np.array([0.0, 1.0, 2.0])
    _, h = obj.grad_hess(y, np.array([[1.0], [1.0], [1.0]]))
    assert np.array_equal(h, np.ones((3, 1)))


def test_softmax_gradient_and_diagonal_hessian() -> None:
    rng = np.random.default_rng(3)
    obj = get_objective(BoostParams(objective="multi:softmax", num_class=4))
    y = obj.check_labels(rng.integers(0, 4, 32))
    m = rng.normal(0, 1, (32, 4))
    g, h = obj.grad_hess(y, m)
    eps = 1e-6
    for k in range(4):
        step = np.zeros_like(m)
        step[:, k] = eps
        num_g = (obj.loss(y, m + step) - obj.loss(y, m - step)) / (2 * eps)
        np.testing.assert_allclose(g[:, k], num_g, rtol=1e-5, atol=1e-7)
        num_h = (obj.grad_hess(y, m + step)[0][:, k] - obj.grad_hess(y, m - step)[0][:, k]) / (
            2 * eps
        )
        np.testing.assert_allclose(h[:, k], num_h, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("name", ["binary:logistic", "reg:squarederror", "reg:tweedie"])
def test_default_base_margin_is_the_best_constant(name: str) -> None:
    """At the estimated base margin the summed gradient vanishes (the loss's optimum)."""
    rng = np.random.default_rng(4)
    obj = get_objective(BoostParams(objective=name))
    y = obj.check_labels(_labels(name, rng, 200))
    base = obj.init_margin(y)
    g, _ = obj.grad_hess(y, np.tile(base, (y.size, 1)))
    assert abs(g.sum()) < 1e-8 * y.size


@pytest.mark.parametrize("name", SCALAR)
def test_median_markers_say_what_the_objective_computes(name: str) -> None:
    """Horizontal training trusts ``median_start`` and ``median_refit`` to replace the base
    margin and the leaf refit by federated medians: they must be exactly numpy's medians."""
    rng = np.random.default_rng(5)
    obj = get_objective(BoostParams(objective=name))
    y = obj.check_labels(_labels(name, rng, 41))
    base = obj.init_margin(y)
    assert obj.median_start == (base[0] == np.median(y)), name
    margin = rng.normal(0.0, 1.0, (y.size, 1))
    leaf = rng.integers(1, 4, y.size)
    refit = obj.refit_leaves(y, margin, leaf, 5)
    assert obj.median_refit == (refit is not None), name
    if refit is not None:
        residual = y - margin[:, 0]
        want = [np.median(residual[leaf == n]) if np.any(leaf == n) else 0.0 for n in range(5)]
        np.testing.assert_array_equal(refit, want)


def test_softmax_base_margin_gives_class_priors() -> None:
    obj = get_objective(BoostParams(objective="multi:softmax", num_class=3))
    y = np.array([0, 0, 1, 2, 2, 2], dtype=np.float64)
    p = obj.transform(obj.init_margin(y)[None, :])
    np.testing.assert_allclose(p[0], [2 / 6, 1 / 6, 3 / 6])


def test_registry_names_and_aliases() -> None:
    assert "binary:logistic" in available_objectives()
    assert canonical_objective("l2") == "reg:squarederror"
    assert canonical_objective("softmax") == "multi:softmax"
    with pytest.raises(InputError, match="unknown objective 'nope'"):
        canonical_objective("nope")


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        ("binary:logistic", [0.0, 2.0]),
        ("reg:tweedie", [-1.0, 2.0]),
        ("reg:squarederror", [np.nan, 1.0]),
        ("reg:squarederror", [[1.0, 2.0], [3.0, 4.0]]),
        ("reg:squarederror", []),
    ],
)
def test_bad_labels_raise_input_error(name: str, labels: list[object]) -> None:
    with pytest.raises(InputError):
        get_objective(BoostParams(objective=name)).check_labels(labels)


def test_softmax_rejects_out_of_range_classes() -> None:
    obj = get_objective(BoostParams(objective="multi:softmax", num_class=3))
    with pytest.raises(InputError, match="integer labels"):
        obj.check_labels([0.0, 3.0])
    with pytest.raises(InputError, match="num_class"):
        get_objective(BoostParams(objective="multi:softmax", num_class=1))
