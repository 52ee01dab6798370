"""Explanations of vertical models: the guest's TreeSHAP equals the core's on the joined model."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost import codec
from p2pboost.exceptions import InputError
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.shap import booster_contributions
from p2pboost.hetero.estimators import HeteroGuest, HeteroHost
from p2pboost.hetero.inference import batch
from p2pboost.hetero.inference.batch import guest_explain, guest_predict, host_predict
from p2pboost.hetero.inference.explain import BASE, FeatureTokens, check_tokens
from p2pboost.hetero.model import merged_model
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import Federated, Keys, federate

COLUMNS = (slice(0, 4), slice(4, 9), slice(9, 14))


@pytest.fixture(scope="module")
def trained(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys
) -> tuple[Federated, np.ndarray]:
    X, y = breast
    X = X[:300, :14]
    params = BoostParams(n_estimators=3, max_depth=3, max_bin=16)

    async def run() -> Federated:
        async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
            hosts = [X[:, COLUMNS[1]], X[:, COLUMNS[2]]]
            return await federate(c, X[:, COLUMNS[0]], y[:300], hosts, params, pool, keys)

    fed = asyncio.run(run())
    names = [f"secret_{i}" for i in range(5)]
    fed = Federated(fed.guest, [replace(fed.hosts[0], feature_names=names), fed.hosts[1]])
    return fed, X


async def _explain(
    fed: Federated, X: np.ndarray, consent: tuple[bool, bool]
) -> tuple[Any, np.ndarray, list[FeatureTokens | None]]:
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:

        async def guest() -> Any:
            async with c["a"].session("explain", peers=["b", "c"]) as s:
                contributions = await guest_explain(s, fed.guest, X[:, COLUMNS[0]])
            async with c["a"].session("predict", peers=["b", "c"]) as s:
                margin = await guest_predict(s, fed.guest, X[:, COLUMNS[0]])
            return contributions, margin

        async def host(h: str, k: int) -> FeatureTokens | None:
            model, cols = fed.hosts[k], X[:, COLUMNS[k + 1]]
            async with c[h].session("explain", peers=["a"]) as s:
                tokens = await host_predict(s, model, cols, explain_features=consent[k])
            async with c[h].session("predict", peers=["a"]) as s:
                await host_predict(s, model, cols)
            return tokens

        (contributions, margin), *tokens = await asyncio.gather(guest(), host("b", 0), host("c", 1))
    return contributions, margin[:, 0], tokens


def test_grouped_values_are_the_cores_with_each_host_grouped(
    trained: tuple[Federated, np.ndarray],
) -> None:
    fed, X = trained
    contributions, margin, tokens = asyncio.run(_explain(fed, X, (False, False)))
    assert tokens == [None, None]
    assert contributions.names == ["f0", "f1", "f2", "f3", "b", "c", BASE]
    values = contributions.values
    np.testing.assert_allclose(values.sum(axis=1), margin, rtol=0, atol=1e-9)
    groups = np.array([0, 1, 2, 3] + [4] * 5 + [5] * 5)
    core = booster_contributions(merged_model(fed.guest, fed.hosts), X, groups=groups)
    np.testing.assert_allclose(values, core, rtol=0, atol=1e-9)
    assert np.abs(values[:, 4:6]).max() > 0  # the hosts' splits do move the margin


def test_consented_values_are_the_cores_per_feature(
    trained: tuple[Federated, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host ``b`` consents (per feature), host ``c`` does not (one player); ``b``'s feature
    names never cross the wire, and only ``b`` can map its tokens back."""
    fed, X = trained
    sent: list[bytes] = []
    real_send = batch.send  # type: ignore[attr-defined]

    async def spy(ch: Any, msg: Any) -> None:
        sent.append(codec.encode(msg.wire()))
        await real_send(ch, msg)

    monkeypatch.setattr(batch, "send", spy)
    contributions, margin, tokens = asyncio.run(_explain(fed, X, (True, False)))
    b_tokens = tokens[0]
    assert b_tokens is not None
    assert tokens[1] is None
    assert not any(b"secret_" in m for m in sent)
    names = contributions.names
    assert not any("secret_" in n for n in names)
    np.testing.assert_allclose(contributions.values.sum(axis=1), margin, rtol=0, atol=1e-9)
    # The core's players: every guest and b feature on its own, c's features as one.
    groups = np.array(list(range(9)) + [9] * 5)
    core = booster_contributions(merged_model(fed.guest, fed.hosts), X, groups=groups)
    by_name = b_tokens.names("b")
    assert set(by_name) == {n for n in names if n.startswith("b:")}
    for j, name in enumerate(names):
        if name.startswith("b:"):
            feature = 4 + int(by_name[name].removeprefix("secret_"))
        else:
            feature = {"f0": 0, "f1": 1, "f2": 2, "f3": 3, "c": 9, BASE: 10}[name]
        np.testing.assert_allclose(contributions.values[:, j], core[:, feature], atol=1e-9)
    # Every b feature not named never split: its core value is zero.
    named = {4 + int(v.removeprefix("secret_")) for v in by_name.values()}
    for f in set(range(4, 9)) - named:
        np.testing.assert_array_equal(core[:, f], 0.0)
    reasons = contributions.reasons(2)
    assert all(len(r) <= 2 and all(v > 0 for _, v in r) for r in reasons)


def test_tokens_are_validated() -> None:
    assert check_tokens(None, 3) is None
    assert check_tokens(np.array([1, 2, 1]), 3) is None
    assert check_tokens(np.array([1, 2]), 3) is not None
    assert check_tokens(np.array([1, -2, 1]), 3) is not None
    assert check_tokens(np.array([1, 1 << 62, 1]), 3) is not None


def test_contributions_need_every_hosts_bits(trained: tuple[Federated, np.ndarray]) -> None:
    from p2pboost.hetero.inference.explain import guest_contributions

    fed, X = trained
    with pytest.raises(InputError, match="hosts"):
        guest_contributions(fed.guest, X[:, COLUMNS[0]], [])


def test_estimators_pred_contribs_with_a_consenting_host(
    trained: tuple[Federated, np.ndarray], tmp_path: Path
) -> None:
    """``HeteroGuest.apredict(..., pred_contribs=True)`` against ``HeteroHost(explain_features=
    True).aserve_predict``; host ``c`` stays one player."""
    fed, X = trained
    fed.guest.save(tmp_path / "guest.json")
    for name, model in zip("bc", fed.hosts, strict=True):
        model.save(tmp_path / f"{name}.json")
    guest = HeteroGuest.load(tmp_path / "guest.json")
    b = HeteroHost.load(tmp_path / "b.json", explain_features=True)
    c = HeteroHost.load(tmp_path / "c.json")

    async def run() -> np.ndarray:
        async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as nodes:
            out, _, _ = await asyncio.gather(
                guest.apredict(nodes["a"], X[:, COLUMNS[0]], pred_contribs=True),
                b.aserve_predict(nodes["b"], X[:, COLUMNS[1]]),
                c.aserve_predict(nodes["c"], X[:, COLUMNS[2]]),
            )
        return np.asarray(out)

    values = asyncio.run(run())
    names = guest.contribution_names_
    assert set(b.feature_tokens_) == {n for n in names if n.startswith("b:")}
    assert not hasattr(c, "feature_tokens_")
    assert names[-2:] == ["c", BASE]
    margin = fed.guest.predict_margin(
        X[:, COLUMNS[0]],
        [h.decisions(X[:, s]) for h, s in zip(fed.hosts, COLUMNS[1:], strict=True)],
    )[:, 0]
    np.testing.assert_allclose(values.sum(axis=1), margin, rtol=0, atol=1e-9)
