"""What crosses the wire: hosts never receive labels, gradients or hessians in any plain
encoding, and the guest never receives a host's feature values or thresholds.

Every message each party *receives* during a training run is captured below the node (the raw
transport messages, framing and all) and searched for byte patterns of the secrets: float64
and float32 in both byte orders (numpy arrays travel little-endian, msgpack floats big-endian)
and the fixed-point integers the guest encrypts (int64). Single values are searched where the
pattern is long enough (8 bytes) to never match by chance; short encodings (float32, small
integers, labels) are searched as runs of consecutive rows, as an array would carry them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Executor

import numpy as np
import pytest

from p2pboost.audit.views import TapFabric
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.fixedpoint import choose_grid, quantize, to_fixed
from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.testing import TRAINING, local_federation
from tests.hetero.conftest import Keys, federate

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow

_WINDOW = 4


def _blob(fabric: TapFabric, party: str) -> bytes:
    """Every transport message ``party`` received, over all its connections, as one string."""
    return b"".join(b"".join(log) for log in fabric.received[party])


def _distinct(b: bytes) -> bool:
    """Long enough to never occur by chance: at most 3 zero bytes and 5 distinct bytes."""
    return b.count(0) <= 3 and len(set(b)) >= 5


def _singles(values: np.ndarray) -> Iterator[bytes]:
    for v in np.unique(values[np.isfinite(values)]):
        for dtype in ("<f8", ">f8"):
            b = np.asarray(v, dtype=dtype).tobytes()
            if _distinct(b):
                yield b


def _ints(values: np.ndarray) -> Iterator[bytes]:
    for v in np.unique(values):
        for dtype in ("<i8", ">i8"):
            b = np.asarray(v, dtype=dtype).tobytes()
            if _distinct(b):
                yield b


def _runs(values: np.ndarray, dtypes: Iterable[str], window: int = _WINDOW) -> Iterator[bytes]:
    """Consecutive runs of ``window`` values, as an array of each dtype would hold them."""
    for dtype in dtypes:
        arr = np.asarray(values).astype(dtype)
        for i in range(0, arr.size - window + 1, window):
            b = arr[i : i + window].tobytes()
            if len(set(b)) >= 4:
                yield b


def _found(blob: bytes, patterns: Iterable[bytes]) -> list[bytes]:
    return [p for p in patterns if p in blob]


async def test_no_secret_crosses_the_wire(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> None:
    X, y = breast
    Xg, Xh = X[:, :10], X[:, 10:]
    params = BoostParams(n_estimators=2, max_depth=3, max_bin=16)
    fabric = TapFabric()
    async with local_federation(fabric, ["a", "b"], TRAINING) as c:
        fed = await federate(c, Xg, y, [Xh], params, pool, keys)
    host_blob = _blob(fabric, "b")
    guest_blob = _blob(fabric, "a")
    assert len(host_blob) > 100_000  # the ciphertexts did arrive

    # What the guest computed, tree by tree (the federated model equals the core's).
    core = train(params, X, y)
    objective = get_objective(params)
    secrets_f: list[np.ndarray] = []
    secrets_i: list[np.ndarray] = []
    for t in range(len(fed.guest.trees)):
        g, h = objective.grad_hess(y, core.predict_margin(X, n_rounds=t))
        for v in (g[:, 0], h[:, 0]):
            grid = choose_grid(v, v.size)
            secrets_f += [v, quantize(v, grid)]
            secrets_i.append(to_fixed(quantize(v, grid), grid))
    host_patterns = [
        *(p for v in secrets_f for p in _singles(v)),
        *(p for v in secrets_i for p in _ints(v)),
        *(p for v in secrets_f for p in _runs(v, ("<f4", ">f4"))),
        *_runs(y, ("<f8", ">f8", "<f4", ">f4", "<i8", "<i4", "<i2", "u1"), window=16),
    ]
    assert len(host_patterns) > 1000
    assert _found(host_blob, host_patterns) == []

    # What the host must keep: its raw values and its thresholds (all of its bin edges).
    edges = np.concatenate(BinMapper(params.max_bin).fit(Xh).edges)
    thresholds = np.array([s.threshold for s in fed.hosts[0].splits])
    guest_patterns = [
        *_singles(Xh.ravel()),
        *_singles(edges),
        *_singles(thresholds),
        *(p for col in Xh.T for p in _runs(col[np.isfinite(col)], ("<f4", ">f4"))),
        *_runs(edges, ("<f4", ">f4")),
    ]
    assert len(guest_patterns) > 1000
    assert _found(guest_blob, guest_patterns) == []

    # The search itself works: a message carrying a secret would be caught.
    assert _found(host_blob + secrets_f[0][:8].astype("<f8").tobytes(), host_patterns)
    assert _found(guest_blob + next(_singles(thresholds)), guest_patterns)
