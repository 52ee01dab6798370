"""The homo family's messages: one tag per message, a direction each, every field bounded,
and every refusal naming the peer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import RemoteProtocolError
from p2pboost.homo import _messages as m
from p2pboost.homo.client import Client
from p2pboost.homo.config import ClientIdentity, HomoConfig
from p2pboost.protocols._messages import decode, families
from tests.homo.conftest import hello

CONFIG = HomoConfig(allow_two_clients=True)
HELLO = hello(CONFIG)


def _messages() -> list[type[m.HomoMessage]]:
    return [
        cls
        for name in m.__all__
        if isinstance(cls := getattr(m, name), type) and issubclass(cls, m.HomoMessage) and cls.TAG
    ]


def test_every_message_has_its_own_tag_and_a_direction() -> None:
    classes = _messages()
    assert len(classes) == len(families()["homo"]) == len({c.TAG for c in classes})
    for cls in classes:
        assert issubclass(cls, m.Command) != issubclass(cls, m.Reply), cls


def test_messages_round_trip_through_the_validator() -> None:
    vec = np.arange(4, dtype=np.uint64)
    samples: list[m.HomoMessage] = [
        m.Epoch(3, ["a", "b"], 2),
        m.Sealed({"b": b"x" * 40}),
        m.Shares(3, {"a": b"x" * 40}),
        m.CollectBins(7, 1, np.array([0, 2]), np.array([5, 9], dtype=np.uint64)),
        m.CollectMedian(7, "labels", 8, 12, np.array([0]), np.array([129], dtype=np.uint64)),
        m.Masked(7, vec, vec),
        m.Masked(8, None, vec),
        m.Reveal(7, b"k" * 32, {"c": b"p" * 32}),
        m.Done(None, {"valid": {"logloss": [0.5, 0.4]}}),
    ]
    for msg in samples:
        back = decode(msg.wire(), type(msg), "peer")
        for f in dataclasses.fields(back):  # type: ignore[arg-type]
            np.testing.assert_array_equal(getattr(back, f.name), getattr(msg, f.name))


@pytest.mark.parametrize(
    ("wire", "kind", "match"),
    [
        ({"t": "epoch", "epoch": 1, "members": ["a"], "t_": 2}, m.Epoch, "unexpected fields"),
        ({"t": "epoch", "epoch": 0, "members": [], "threshold": 1}, m.Epoch, "'epoch' must be"),
        ({"t": "advert", "public": b"x" * 63, "signature": b"", "cert": b""}, m.Advert, "public"),
        ({"t": "sealed", "shares": {"a": b"x" * 513}}, m.Sealed, "shares"),
        (
            {
                "t": "bins",
                "round": 1,
                "level": 0,
                "feature": np.zeros(2, np.int64),
                "prefix": np.zeros(3, np.uint64),
            },
            m.CollectBins,
            "feature and prefix differ",
        ),
        (
            {
                "t": "children",
                "round": 1,
                "nodes": np.array([0]),
                "feature": np.array([0]),
                "threshold_bin": np.array([0]),
                "default_left": np.array([True]),
                "left": np.array([1]),
                "right": np.array([9]),
                "n_nodes": 3,
                "build": np.array([1]),
            },
            m.CollectChildren,
            "right out of range",
        ),
        (
            {
                "t": "median",
                "round": 1,
                "of": "labels",
                "depth": 60,
                "width": 8,
                "group": np.array([0]),
                "prefix": np.array([1], dtype=np.uint64),
                "tree": None,
            },
            m.CollectMedian,
            "past a key's last bit",
        ),
        ({"t": "masked", "round": 1, "y": None, "z": np.zeros(2)}, m.Masked, "uint64"),
        ({"t": "tree", "it": 0, "output": 0, "tree": [1, 2]}, m.FinishedTree, "'tree'"),
        ({"t": "shares", "epoch": 1, "shares": {}}, m.Sealed, "expected a 'sealed' message"),
    ],
    ids=[
        "extra-field",
        "epoch-zero",
        "short-key",
        "big-share",
        "bins-lengths",
        "child-range",
        "median-past-the-key",
        "float-vector",
        "tree-not-map",
        "shares-for-sealed",
    ],
)
def test_the_validator_names_the_peer(wire: dict[str, object], kind: type, match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match) as err:
        decode(wire, kind, "c9")
    assert err.value.peer == "c9"


def test_client_refuses_commands_before_hello_and_a_second_model(federation: Path) -> None:
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(10, 2)), (rng.random(10) < 0.5).astype(float)
    client = Client(
        "c1", "server", X, y, CONFIG, identity=ClientIdentity.from_dir(federation / "c1")
    )
    with pytest.raises(RemoteProtocolError, match="before hello") as err:
        client.handle({"t": "stats", "round": 1})
    assert err.value.peer == "server"
    with pytest.raises(RemoteProtocolError, match="unknown command"):
        client.handle({"op": "hello"})
    assert isinstance(client.handle(HELLO), m.Joined)
    model = {"t": "model", "edges": [np.array([0.0]), np.array([0.5])], "base": [0.0]}
    assert client.handle(model) is None
    with pytest.raises(RemoteProtocolError, match="second model"):
        client.handle(model)
