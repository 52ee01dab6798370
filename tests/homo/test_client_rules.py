"""An honest client's own checks: it never reveals what could unmask a single vector."""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import RemoteProtocolError
from p2pboost.homo._messages import Advert, Masked, Ready, Recovered, Reveal, Sealed, Signed
from p2pboost.homo.client import Client
from p2pboost.homo.config import ClientIdentity, HomoConfig
from tests.homo.conftest import hello


def _total(vectors: Iterable[Any]) -> Any:
    """What secure aggregation returns: the element-wise sum of the clients' vectors."""
    return functools.reduce(operator.add, vectors)


IDS = ["c1", "c2", "c3"]
CONFIG = HomoConfig(allow_two_clients=True, threshold=2)


def _clients(federation: Path) -> dict[str, Client]:
    rng = np.random.default_rng(0)
    out = {}
    for c in IDS:
        X = rng.normal(size=(20, 3))
        y = (rng.random(20) < 0.5).astype(float)
        ident = ClientIdentity.from_dir(federation / c)
        out[c] = Client(c, "server", X, y, CONFIG, identity=ident)
    return out


HELLO = hello(CONFIG)


def _setup(clients: dict[str, Client], t: int = 2) -> None:
    """Drive hello and one key epoch as the server would."""
    for cl in clients.values():
        cl.handle(HELLO)
    adverts = {
        c: cl.handle({"t": "epoch", "epoch": 1, "members": IDS, "threshold": t})
        for c, cl in clients.items()
    }
    assert all(isinstance(a, Advert) for a in adverts.values())
    relay = {
        "t": "adverts",
        "epoch": 1,
        **{
            k: {c: getattr(a, k) for c, a in adverts.items()}
            for k in ("public", "signature", "cert")
        },
    }
    sealed = {c: cl.handle(relay) for c, cl in clients.items()}
    for c, cl in clients.items():
        inbox = {}
        for s in IDS:
            if s != c:
                reply = sealed[s]
                assert isinstance(reply, Sealed)
                inbox[s] = reply.shares[c]
        assert cl.handle({"t": "shares", "epoch": 1, "shares": inbox}) == Ready()


def _collect(cl: Client, r: int) -> Masked:
    reply = cl.handle({"t": "stats", "round": r})
    assert isinstance(reply, Masked)
    return reply


def test_masked_sum_of_a_full_round_is_exact(federation: Path) -> None:
    clients = _clients(federation)
    _setup(clients)
    replies = {c: _collect(cl, 1) for c, cl in clients.items()}
    total = _total(r.z for r in replies.values() if r is not None)
    assert total[0] == 60  # rows of all three clients
    assert total[2] == sum(int((cl.y == 1).sum()) for cl in clients.values())
    for r in replies.values():
        assert r is not None
        assert r.z[0] != 20  # no single vector shows its client's row count


def test_refusals(federation: Path) -> None:
    clients = _clients(federation)
    _setup(clients)
    c1, c2 = clients["c1"], clients["c2"]
    _collect(c1, 5)
    _collect(c2, 5)
    with pytest.raises(RemoteProtocolError, match="replay"):
        _collect(c1, 5)
    survivors = {"t": "survivors", "round": 5, "survivors": ["c1", "c2"], "dropped": ["c3"]}
    with pytest.raises(RemoteProtocolError, match="no dropout"):
        c1.handle({**survivors, "survivors": IDS, "dropped": []})
    with pytest.raises(RemoteProtocolError, match="sent nothing"):
        c1.handle({**survivors, "round": 4})
    with pytest.raises(RemoteProtocolError, match="did not sign"):
        c1.handle({**survivors, "t": "unmask", "signatures": {}})
    with pytest.raises(RemoteProtocolError, match="did not unmask"):
        c1.handle({"t": "recover", "round": 5, "self_of": ["c2"], "key_of": ["c3"]})
    signed = {c: cl.handle(survivors) for c, cl in (("c1", c1), ("c2", c2))}
    assert all(isinstance(s, Signed) for s in signed.values())
    signatures = {c: s.signature for c, s in signed.items() if isinstance(s, Signed)}
    unmask = {**survivors, "t": "unmask", "signatures": signatures}
    reveal = c1.handle(unmask)
    assert isinstance(reveal, Reveal)
    assert sorted(reveal.pair_keys) == ["c3"]
    with pytest.raises(RemoteProtocolError, match="or again"):
        c1.handle(unmask)
    # Never the self seed of a dropped client, nor a mask key of a survivor.
    with pytest.raises(RemoteProtocolError, match="must not give"):
        c1.handle({"t": "recover", "round": 5, "self_of": ["c3"], "key_of": ["c3"]})
    with pytest.raises(RemoteProtocolError, match="must not give"):
        c1.handle({"t": "recover", "round": 5, "self_of": ["c2"], "key_of": ["c2"]})
    ok = c1.handle({"t": "recover", "round": 5, "self_of": ["c2"], "key_of": ["c3"]})
    assert isinstance(ok, Recovered)
    assert set(ok.self_seeds) == {"c2"}
    assert set(ok.mask_keys) == {"c3"}
    with pytest.raises(RemoteProtocolError, match="second"):
        c1.handle({"t": "recover", "round": 5, "self_of": ["c2"], "key_of": ["c3"]})
    # After a dropout the keys must be renewed before anything else is masked.
    with pytest.raises(RemoteProtocolError, match="before keys"):
        _collect(c1, 6)


def test_epoch_with_a_weak_threshold_or_foreign_members_is_refused(federation: Path) -> None:
    clients = _clients(federation)
    c1 = clients["c1"]
    c1.handle(HELLO)
    with pytest.raises(RemoteProtocolError, match="threshold"):
        c1.handle({"t": "epoch", "epoch": 1, "members": IDS, "threshold": 1})
    with pytest.raises(RemoteProtocolError, match="member list"):
        c1.handle({"t": "epoch", "epoch": 1, "members": ["c2", "c3"], "threshold": 2})
    with pytest.raises(RemoteProtocolError, match="settings differ"):
        clients["c2"].handle({**HELLO, "digest": "x"})
