"""A split's larger child derived by the guest: exact sums, and a host that lies about a
derived package is refused with an error naming it."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import RemoteProtocolError
from p2pboost.gbdt.fixedpoint import Grid
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero._messages import Derived
from p2pboost.hetero.training.packages import derive, open_package
from p2pboost.protocols._messages import send
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import Keys, federate

GRIDS = (Grid(20, 1, 100), Grid(20, -2, 100))


def _package(ids: list[int], counts: list[int], g: list[int], h: list[int]) -> Any:
    return open_package(
        np.array(ids, np.uint64),
        np.array(counts, np.int64),
        np.array(g, np.int64)[:, None],
        np.array(h, np.int64)[:, None],
        GRIDS,
    )


PARENT = _package([7, 3, 9], [10, 4, 6], [1 << 40, -(1 << 35), 5], [100, 40, 60])
SIBLING = _package([11, 12], [3, 1], [(1 << 40) - 1, 8], [30, 10])


def _derived(**changes: Any) -> Derived:
    msg = Derived(
        tree=0,
        node=2,
        parent=0,
        sibling=1,
        ids=np.array([21, 22], np.uint64),
        counts=np.array([7, 3], np.int64),
        parent_ids=np.array([7, 3], np.uint64),
        sibling_ids=np.array([11, 12], np.uint64),
    )
    return replace(msg, **changes)


def test_derived_sums_are_the_parent_minus_the_sibling_exactly() -> None:
    out = derive(_derived(), PARENT, SIBLING, GRIDS)
    assert out.ids.tolist() == [21, 22]
    assert out.grad_int[:, 0].tolist() == [1, -(1 << 35) - 8]
    assert out.hess_int[:, 0].tolist() == [70, 30]
    assert np.array_equal(out.grad, np.ldexp(out.grad_int.astype(np.float64), -GRIDS[0].bits))


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"parent_ids": np.array([7, 8], np.uint64)}, "parent's package does not hold"),
        ({"sibling_ids": np.array([11, 13], np.uint64)}, "sibling's package does not hold"),
        ({"counts": np.array([7, 4], np.int64)}, "parent's minus the sibling's"),
    ],
)
def test_a_derived_package_must_agree_with_the_packages_it_names(
    changes: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        derive(_derived(**changes), PARENT, SIBLING, GRIDS)


def test_derived_message_fields_run_in_parallel() -> None:
    assert "one entry each" in str(_derived(sibling_ids=np.array([11], np.uint64)).check())
    assert _derived(ids=np.array([5, 5], np.uint64)).check() == "duplicate split ids"


@pytest.mark.parametrize(
    ("tamper", "error"),
    [
        (lambda m: replace(m, parent=m.sibling), "derived from other than its parent"),
        (lambda m: replace(m, counts=m.counts + 1), "parent's minus the sibling's"),
        (lambda m: replace(m, parent_ids=m.parent_ids ^ np.uint64(1)), "does not hold"),
    ],
)
async def test_guest_refuses_a_host_that_lies_about_a_derived_child(
    breast: tuple[np.ndarray, np.ndarray],
    pool: Executor,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
    tamper: Any,
    error: str,
) -> None:
    X, y = breast

    async def lying(channel: Any, msg: Any) -> None:
        await send(channel, tamper(msg) if isinstance(msg, Derived) else msg)

    monkeypatch.setattr("p2pboost.hetero.training.host_tree.send", lying)
    params = BoostParams(n_estimators=1, max_depth=3, max_bin=16)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
        with pytest.raises(RemoteProtocolError, match=f"b: .*{error}"):
            await federate(c, X[:, :10], y, [X[:, 10:]], params, pool, keys)
