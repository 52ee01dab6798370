"""A third party of the federation cannot disturb a training it is not part of.

Over real mutual-TLS WebSockets on loopback: parties ``a`` (guest) and ``b`` (host) train;
``c``, authenticated by the same CA, guesses the training's session name and writes protocol
messages for it to both of them *before* they claim the session. Its frames are refused (each
party tells it so) and the training grows exactly the trees it grows without the intruder.
"""

from __future__ import annotations

from concurrent.futures import Executor
from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import SessionClosed
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import Tree
from p2pboost.net.node import SessionState
from p2pboost.testing import TRAINING, WebSocketFabric, local_federation, wait_until
from tests.hetero.conftest import Keys, assert_same_trees, federate

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow

_FIELDS = ("feature", "threshold_bin", "threshold", "default_left", "left", "right", "value")


def _assert_identical(ours: list[Tree], theirs: list[Tree]) -> None:
    assert len(ours) == len(theirs)
    for t, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        for field in (*_FIELDS, "gain", "cover"):
            np.testing.assert_array_equal(
                getattr(a, field), getattr(b, field), err_msg=f"tree {t} {field}"
            )


async def test_an_intruder_cannot_disturb_a_training_it_is_not_part_of(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, federation_certs: Path
) -> None:
    X, y = breast
    Xg, Xh = X[:, :10], X[:, 10:]
    params = BoostParams(n_estimators=2, max_depth=3, max_bin=16)
    async with local_federation(WebSocketFabric(federation_certs), ["a", "b", "c"], TRAINING) as c:
        clean = await federate(c, Xg, y, [Xh], params, pool, keys, session="clean")

        # c predicts the name of the next training and writes first, on the very channels the
        # protocol uses, messages that would end or corrupt the run if they were taken.
        intruder = c["c"].session("train", peers=["a", "b"])
        await intruder.channel("b", "ctl").send({"t": "done", "fingerprint": "x", "n_trees": 0})
        await intruder.channel("b", "grad").send(b"\x00" * 1000)
        await intruder.channel("a", "ctl").send({"t": "decided", "ids": [], "bitmaps": []})
        await intruder.channel("a", "info").send({"t": "pkg", "tree": 0, "node": 0})
        await wait_until(lambda: all(c[p].stats().sessions == 1 for p in ("a", "b")))

        attacked = await federate(c, Xg, y, [Xh], params, pool, keys, session="train")

        with pytest.raises(SessionClosed, match="not a member of this session"):
            await intruder.channel("a", "ctl").recv()
        assert intruder.state is SessionState.FAILED
        await intruder.close()
        for party in ("a", "b"):
            stats = c[party].stats()
            assert stats.sessions == 0, party
            assert stats.peers["c"].receive_buffer_bytes == 0, party

    core = train(params, X, y)
    assert_same_trees(clean.joined(), core)
    assert_same_trees(attacked.joined(), core)
    _assert_identical(attacked.joined(), clean.joined())
    for ours, theirs in zip(attacked.guest.trees, clean.guest.trees, strict=True):
        np.testing.assert_array_equal(ours.owner, theirs.owner)
