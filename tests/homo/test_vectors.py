"""Vector layouts: the server reads back exactly the sums of what the clients wrote."""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

from p2pboost.gbdt.fixedpoint import choose_grid, quantize
from p2pboost.gbdt.histogram import Histogram
from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo._vectors import (
    HistLayout,
    eval_vector,
    grid_vector,
    read_eval,
    read_grid,
    read_stats,
    stats_vector,
)


def _total(vectors: Iterable[Any]) -> Any:
    """What secure aggregation returns: the element-wise sum of the clients' vectors."""
    return functools.reduce(operator.add, vectors)


def test_a_client_without_rows_in_a_tree_adds_nothing_to_its_grid() -> None:
    """A private tree's share may hold none of a client's rows (a small client): its grid
    vector is zeros, and the grid the server announces fits its (no) values."""
    from p2pboost.homo._vectors import announced_grid

    g = np.array([[0.3], [-0.2]])
    none = np.empty((0, 1))
    assert not grid_vector(none, none).any()
    total = grid_vector(g, np.ones_like(g)) + grid_vector(none, none)
    grid_g, _ = read_grid(total)
    assert grid_g == choose_grid(g, 2)
    assert announced_grid(grid_g.bits, grid_g.magnitude_bits, 2, none) == grid_g


def test_layouts_read_back_what_clients_wrote() -> None:
    rng = np.random.default_rng(2)
    objective = get_objective(BoostParams(objective="multi:softmax", num_class=3))
    ys = [rng.integers(0, 3, size=n).astype(float) for n in (5, 7)]
    stats = read_stats(_total(stats_vector(y, objective) for y in ys))
    assert stats.n_rows == 12
    assert stats.label_sum == sum(float(y.sum()) for y in ys)
    np.testing.assert_array_equal(
        stats.label_counts, np.bincount(np.concatenate(ys).astype(np.intp), minlength=3)
    )

    gs = [rng.normal(size=(n, 1)) * 3 for n in (5, 7)]
    hs = [np.abs(rng.normal(size=(n, 1))) for n in (5, 7)]
    grid_g, grid_h = read_grid(_total(grid_vector(g, h) for g, h in zip(gs, hs, strict=True)))
    assert grid_g == choose_grid(np.concatenate(gs), 12)
    assert grid_h == choose_grid(np.concatenate(hs), 12)

    layout = HistLayout(n_features=2, n_slots=3, n_outputs=1)
    hists = []
    for g, h in zip(gs, hs, strict=True):
        shape = (2, 2, 3, 1)
        hists.append(
            Histogram(
                quantize(np.resize(g, shape), grid_g),
                quantize(np.resize(h, shape), grid_h),
                rng.integers(0, 9, size=shape[:3]),
            )
        )
    total = _total(layout.write(hist, grid_g, grid_h) for hist in hists)
    assert total.shape == (layout.length(2),)
    back = layout.read(total, 2, grid_g, grid_h)
    np.testing.assert_array_equal(back.grad, hists[0].grad + hists[1].grad)
    np.testing.assert_array_equal(back.hess, hists[0].hess + hists[1].hess)
    counts = [h.count for h in hists]
    assert counts[0] is not None
    assert counts[1] is not None
    np.testing.assert_array_equal(back.count, counts[0] + counts[1])

    y, p = np.array([0.0, 1.0, 1.0]), np.array([0.2, 0.7, 0.9])
    total = eval_vector("mae", (y, p)) + eval_vector("mae", None)
    assert read_eval(total, "mae") == pytest.approx(np.mean(np.abs(y - p)), abs=1e-6)
    assert read_eval(eval_vector("rmse", None), "rmse") is None


@pytest.mark.parametrize("metric", ["auc", "ks", "gini"])
def test_rank_metrics_of_summed_score_histograms(metric: str) -> None:
    from p2pboost.gbdt.metrics import get_metric

    rng = np.random.default_rng(0)
    y = (rng.random(3000) < 0.4).astype(np.float64)
    p = np.clip(0.3 * y + 0.7 * rng.random(3000), 0.0, 1.0)
    total = eval_vector(metric, (y[:1000], p[:1000])) + eval_vector(metric, (y[1000:], p[1000:]))
    assert read_eval(total, metric) == pytest.approx(get_metric(metric)(y, p), abs=1e-4)
    one_class = eval_vector(metric, (np.ones(5), np.full(5, 0.7)))
    assert read_eval(one_class, metric) is None  # undefined with one class
