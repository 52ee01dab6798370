"""What the server receives and holds: masked vectors, keys, sums; never a client's data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.config import HomoConfig, HomoResult
from tests.homo.conftest import run_homo


def _arrays(obj: object) -> list[np.ndarray]:
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, dict):
        return [a for v in obj.values() for a in _arrays(v)]
    if isinstance(obj, list | tuple):
        return [a for v in obj for a in _arrays(v)]
    return []


async def test_server_sees_no_client_vector_gradient_or_label(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    params = BoostParams(n_estimators=2, max_depth=3, max_bin=16)
    parts = {"c1": breast[0], "c2": breast[1]}
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    received = [(who, obj) for kind, who, obj in run.received if kind == "recv"]
    arrays = [a for _, obj in received for a in _arrays(obj)]
    assert arrays
    assert all(a.dtype == np.uint64 and a.ndim == 1 for a in arrays)
    # Nothing a client computed in the clear shows up in what the server received.
    plain = [v for per_round in run.plain.values() for _, v in per_round.values()]
    for a in arrays:
        for v in plain:
            if v.size == a.size:
                assert np.mean(a == v.view(np.uint64)) < 0.01
    # No label, gradient or feature value appears as any 8-byte word.
    objective = get_objective(params)
    words = np.concatenate([a.view(np.uint8) for a in arrays]).tobytes()
    for X, y in parts.values():
        g, h = objective.grad_hess(y, np.tile(run.result.booster.base_margin, (y.size, 1)))
        for secret in (y, g[:, 0], h[:, 0], X[:, 0]):
            probe = np.ascontiguousarray(secret[:8], dtype=np.float64).tobytes()
            assert probe not in words
    # Every message's fields: only masked vectors, key material, round numbers.
    for _, obj in received:
        assert isinstance(obj, dict)
        assert set(obj) <= {
            "t",
            "round",
            "y",
            "z",
            "n_features",
            "public",
            "signature",
            "cert",
            "shares",
        }
    # What the server holds: sums only, each equal to the sum of its contributors' vectors.
    for kind, _, obj in run.received:
        if kind == "aggregate":
            r = obj["round"]
            want = sum(run.plain[c][r][1] for c in obj["contributors"])
            np.testing.assert_array_equal(obj["total"], want)


async def test_single_masked_vector_is_uniform(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    """Chi-square on the low bytes of the largest vector one client sent (a binning count
    vector: mostly zeros in the clear)."""
    params = BoostParams(n_estimators=1, max_depth=2, max_bin=16)
    parts = {"c1": breast[0], "c2": breast[1]}
    run = await run_homo(
        parts, HomoConfig(allow_two_clients=True, params=params, round_timeout=20), federation
    )
    sent = [obj for kind, who, obj in run.received if kind == "recv" and who == "c1"]
    vectors = [obj[k] for obj in sent for k in ("y", "z") if k in obj]
    big = max(vectors, key=lambda v: v.size)
    plain = max((v for _, v in run.plain["c1"].values()), key=lambda v: v.size)
    assert big.size == plain.size >= 4096
    assert np.mean(plain == 0) > 0.5  # the clear vector is far from uniform
    for shift in (0, 8):
        low = ((big >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.intp)
        observed = np.bincount(low, minlength=256)
        expected = big.size / 256
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        assert chi2 < 400, chi2  # 255 degrees of freedom: P(chi2 > 400) is about 2e-8
