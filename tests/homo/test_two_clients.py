"""A federation of exactly two clients is told what its secure aggregation cannot hide.

With two clients, the server and one client together learn the other's vector exactly (the
aggregate minus their own), so the server and each client warn at the start of such a run,
unless the party said it knows (``allow_two_clients=True``); three clients run silently.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import TwoClientWarning
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.config import HomoConfig, HomoResult
from tests.homo.conftest import run_homo

PARAMS = BoostParams(n_estimators=1, max_depth=2, max_bin=8)


async def test_two_clients_warn_what_the_server_and_one_client_learn(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    parts = {"c1": breast[0], "c2": breast[1]}
    caplog.set_level(logging.WARNING, logger="p2pboost.homo")
    with pytest.warns(TwoClientWarning, match="colludes with one client") as caught:
        run = await run_homo(parts, HomoConfig(params=PARAMS, round_timeout=20), federation)
    assert isinstance(run.result, HomoResult), run.result
    assert len(caught) == 3  # the server and each client
    assert all("allow_two_clients" in str(w.message) for w in caught)
    logged = [r for r in caplog.records if "colludes with one client" in r.getMessage()]
    assert {r.name for r in logged} == {"p2pboost.homo.server", "p2pboost.homo.client"}


async def test_an_explicit_setting_silences_it_and_three_clients_need_none(
    breast: list[tuple[np.ndarray, np.ndarray]],
    federation: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="p2pboost.homo")
    X, y = np.vstack([b[0] for b in breast]), np.concatenate([b[1] for b in breast])
    thirds = np.array_split(np.arange(y.size), 3)
    runs = [
        ({"c1": breast[0], "c2": breast[1]}, True),
        ({f"c{k + 1}": (X[rows], y[rows]) for k, rows in enumerate(thirds)}, False),
    ]
    for parts, allow in runs:
        config = HomoConfig(params=PARAMS, round_timeout=20, allow_two_clients=allow)
        with warnings.catch_warnings():
            warnings.simplefilter("error", TwoClientWarning)
            run = await run_homo(parts, config, federation)
        assert isinstance(run.result, HomoResult), run.result
    assert not [r for r in caplog.records if "colludes" in r.getMessage()]


def test_the_setting_is_each_partys_own() -> None:
    """Whether a party accepts two clients is its own decision: not part of the digest the
    parties compare, so a client may insist on being warned while the server does not."""
    assert HomoConfig(allow_two_clients=True).digest() == HomoConfig().digest()
