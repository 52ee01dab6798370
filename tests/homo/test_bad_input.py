"""A client that sends something invalid ends the run with an error naming it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import InputError, RemoteProtocolError
from p2pboost.gbdt.objectives import available_objectives
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo._messages import Advert, Joined, Reply
from p2pboost.homo.config import ClientIdentity, HomoConfig, HomoPhase
from tests.homo.conftest import run_homo

PARAMS = BoostParams(n_estimators=2, max_depth=2, max_bin=8)
CONFIG = HomoConfig(params=PARAMS, round_timeout=10, allow_two_clients=True)


def _parts(breast: list[tuple[np.ndarray, np.ndarray]], n: int) -> dict[str, Any]:
    X = np.vstack([p[0] for p in breast])
    y = np.concatenate([p[1] for p in breast])
    return {f"c{i + 1}": (X[i::n], y[i::n]) for i in range(n)}


def _on_nth_masked(nth: int, change: Any) -> Any:
    seen = [0]
    last: list[Reply] = []

    def hook(reply: Reply, phase: HomoPhase) -> Reply:
        if reply.TAG == "masked" and phase is HomoPhase.TREES:
            seen[0] += 1
            if seen[0] == nth:
                return change(reply, last[-1])
            last.append(reply)
        return reply

    return hook


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r, _: replace(r, z=r.z[:-1]), "expected uint64 vectors of length"),
        (lambda r, _: replace(r, z=r.z.view(np.int64)), "'z' must be a 1-d uint64 array"),
        (lambda r, prev: prev, "replayed or stale"),
        (lambda r, _: Joined(n_features=30), "expected a 'masked' message"),
    ],
    ids=["wrong-shape", "wrong-dtype", "replayed-round", "wrong-message"],
)
async def test_bad_vector_aborts_naming_the_client(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path, change: Any, message: str
) -> None:
    run = await run_homo(
        _parts(breast, 3), CONFIG, federation, hooks={"c2": _on_nth_masked(2, change)}
    )
    assert isinstance(run.result, RemoteProtocolError), run.result
    assert run.result.peer == "c2"
    assert message in str(run.result)


async def test_key_advert_signed_by_another_party_is_refused(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    """c1 signs its advert with c3's certificate: the others refuse it, naming c1."""
    impostor = ClientIdentity.from_dir(federation / "c3")
    run = await run_homo(_parts(breast, 3), CONFIG, federation, identities={"c1": impostor})
    for honest in ("c2", "c3"):
        err = run.models[honest]
        assert isinstance(err, RemoteProtocolError), err
        assert err.peer == "c1"
        assert "belongs to 'c3'" in str(err)


async def test_altered_key_advert_is_refused(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    """A server (or anyone) swapping c1's public key breaks c1's signature."""

    def swap(reply: Reply, phase: HomoPhase) -> Reply:
        if isinstance(reply, Advert):
            return replace(reply, public=bytes(reversed(reply.public)))
        return reply

    run = await run_homo(_parts(breast, 3), CONFIG, federation, hooks={"c1": swap})
    for honest in ("c2", "c3"):
        err = run.models[honest]
        assert isinstance(err, RemoteProtocolError), err
        assert err.peer == "c1"
        assert "bad signature" in str(err)


def test_config_rejects_unsupported_and_insecure_settings() -> None:
    for objective in available_objectives():  # every core objective, medians included
        classes = 3 if objective == "multi:softmax" else 1
        HomoConfig(params=BoostParams(objective=objective, num_class=classes)).validate()
    HomoConfig(params=BoostParams(objective="l1")).validate()  # the core's aliases too
    HomoConfig(eval_metric="ks").validate()  # from aggregated score histograms (binary)
    with pytest.raises(InputError, match="'ks' ranks the scores of a binary objective"):
        HomoConfig(params=BoostParams(objective="reg:squarederror"), eval_metric="ks").validate()
    with pytest.raises(InputError, match="'ndcg' is not"):
        HomoConfig(eval_metric="ndcg").validate()
    with pytest.raises(InputError, match="min_clients"):
        HomoConfig(min_clients=1).validate()
    HomoConfig(params=BoostParams(subsample=0.5)).validate()  # each client samples its rows
    # Masking off is a setting every party must share: it is part of the agreed digest.
    assert HomoConfig(masking=False).digest() != HomoConfig().digest()
