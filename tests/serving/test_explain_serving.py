"""The online predictor's explanations (reason codes, per-feature tokens) and stability window."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.shap import booster_contributions
from p2pboost.gbdt.stability_window import StabilityWindow
from p2pboost.hetero.inference.endpoint import probe_routes
from p2pboost.hetero.inference.explain import BASE, FeatureTokens
from p2pboost.hetero.inference.predictor import GuestPredictor, serve_host
from p2pboost.hetero.model import merged_model
from p2pboost.metrics import EndpointMetrics
from p2pboost.testing import Fabric, local_federation
from tests.serving.conftest import Trained
from tests.serving.test_serving import CONFIG


async def test_explain_batch_reasons_and_consented_tokens(
    memory_fabric: Fabric, trained: Trained
) -> None:
    """Host ``b`` consents and keeps its tokens; host ``c`` is one player."""
    records: list[FeatureTokens] = []
    rows = np.arange(0, 120)
    async with local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c:
        tasks = [
            asyncio.create_task(
                serve_host(
                    c["b"],
                    trained.host("b"),
                    trained.store("b"),
                    explain_features=True,
                    on_tokens=records.append,
                )
            ),
            asyncio.create_task(serve_host(c["c"], trained.host("c"), trained.store("c"))),
        ]
        try:
            async with GuestPredictor(c["a"], trained.guest, output="margin", reasons=3) as p:
                contributions = await p.explain_batch(trained.ids[rows], trained.guest_X(rows))
                score, reasons = await p.predict_reasons(trained.ids[5], trained.guest_X(5))
                streamed = [pred async for pred in p.stream(_requests(trained, rows[:10]))]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    assert len(records) == 1
    margin = trained.reference_margin(rows)[:, 0]
    values = contributions.values
    np.testing.assert_allclose(values.sum(axis=1), margin, rtol=0, atol=1e-9)
    by_name = records[0].names("b")
    names = contributions.names
    assert {n for n in names if n.startswith("b:")} == set(by_name)
    # The core: guest and b features one by one, c's as one player.
    groups = np.array(list(range(20)) + [20] * 10)
    core = booster_contributions(
        merged_model(trained.guest, [trained.host("b"), trained.host("c")]),
        trained.X[rows],
        groups=groups,
    )
    for j, name in enumerate(names):
        if name.startswith("b:"):
            col = 10 + int(by_name[name].removeprefix("f"))
        else:
            fixed = {"c": 20, BASE: 21}
            col = fixed[name] if name in fixed else int(name.removeprefix("f"))
        np.testing.assert_allclose(values[:, j], core[:, col], rtol=0, atol=1e-9)
    assert score == trained.reference_margin(np.array([5]))[0, 0]
    assert reasons == contributions.reasons(3)[5]
    assert [s.reasons for s in streamed] == contributions.reasons(3)[:10]


async def _requests(trained: Trained, rows: np.ndarray) -> AsyncIterator[tuple[int, np.ndarray]]:
    for r in rows.tolist():
        yield int(trained.ids[r]), trained.guest_X(r)


async def test_stability_window_on_readyz_and_metrics(
    memory_fabric: Fabric, trained: Trained
) -> None:
    train_scores = trained.guest.transform(trained.reference_margin())
    window = StabilityWindow.from_scores(train_scores, size=200, min_rows=50)
    hosts = list(trained.guest.hosts)
    async with local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c:
        tasks = [
            asyncio.create_task(serve_host(c[h], trained.host(h), trained.store(h))) for h in hosts
        ]
        try:
            async with GuestPredictor(c["a"], trained.guest, window=window) as p:
                routes = probe_routes(p, EndpointMetrics())
                assert p.stability() == {"rows": 0, "psi": None, "band": None}
                rows = np.arange(100)
                await p.predict_batch(trained.ids[rows], trained.guest_X(rows))
                _, _, ready = routes["/readyz"]()
                _, _, scraped = routes["/metrics"]()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    snap = json.loads(ready)["stability"]
    assert snap["rows"] == 100
    assert snap["psi"] == pytest.approx(window.psi())
    assert snap["psi"] > 0
    assert "p2pboost_serve_score_psi" in scraped
    assert "p2pboost_serve_stability_window_rows 100.0" in scraped


async def test_reasons_need_the_option(memory_fabric: Fabric, trained: Trained) -> None:
    async with local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c:
        p = GuestPredictor(c["a"], trained.guest)
        with pytest.raises(InputError, match="reasons"):
            await p.predict_reasons(trained.ids[0], trained.guest_X(0))
        with pytest.raises(InputError, match="reasons"):
            GuestPredictor(c["a"], trained.guest, reasons=-1)
