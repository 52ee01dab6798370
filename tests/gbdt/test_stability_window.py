"""The sliding-window PSI equals the batch PSI of the window's latest values."""

from __future__ import annotations

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.stability import psi, score_counts, score_edges
from p2pboost.gbdt.stability_window import StabilityWindow


@pytest.mark.parametrize("batches", [[7, 50, 3, 200, 1, 64], [1000], [33] * 20])
def test_window_psi_is_the_batch_psi_of_its_latest_values(batches: list[int]) -> None:
    rng = np.random.default_rng(0)
    train = rng.normal(size=2000)
    window = StabilityWindow.from_scores(train, size=128, min_rows=10)
    edges = score_edges(train)
    seen: list[float] = []
    for n in batches:
        new = rng.normal(0.5, 1.2, size=n)
        window.add(new)
        seen += new.tolist()
        latest = np.asarray(seen[-128:])
        np.testing.assert_array_equal(window.counts(), score_counts(latest, edges))
        assert window.rows == latest.size
        if latest.size >= 10:
            assert window.psi() == float(psi(score_counts(train, edges), window.counts()))


def test_window_flags_a_shift_and_not_the_training_population() -> None:
    rng = np.random.default_rng(1)
    train = rng.normal(size=5000)
    window = StabilityWindow.from_scores(train, size=2000)
    assert window.snapshot() == {"rows": 0, "psi": None, "band": None}
    window.add(rng.normal(size=2000))
    assert window.snapshot()["band"] == "stable"
    window.add(rng.normal(1.0, 1.0, size=2000))  # moved by one standard deviation
    snap = window.snapshot()
    assert snap["band"] == "shift"
    assert snap["psi"] > 0.25


def test_window_refuses_bad_settings() -> None:
    with pytest.raises(InputError, match="increasing"):
        StabilityWindow([1.0, 0.0], [1, 1, 1])
    with pytest.raises(InputError, match="3 non-negative counts"):
        StabilityWindow([0.0, 1.0], [1, 1])
    with pytest.raises(InputError, match="size"):
        StabilityWindow([0.0], [1, 1], size=0)
    window = StabilityWindow([0.0], [1, 1])
    with pytest.raises(InputError, match="finite"):
        window.add([np.nan])
