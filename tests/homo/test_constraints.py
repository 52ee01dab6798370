"""Monotone and interaction constraints in horizontal training: the server applies them to
the aggregated sums, so the federated model is the core's constrained model on the union."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.noise import NoiseSource
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo.config import HomoConfig, HomoResult
from tests.homo.conftest import bundled, run_homo, same_trees

#: Breast cancer: size and concavity lower the odds of a benign tumour; groups of features.
MONO = tuple(-1 if f in (0, 2, 7, 20, 27) else 0 for f in range(30))
GROUPS = ((0, 1, 2, 3), (20, 21, 22, 23, 27), (7, 8, 9))


async def test_constrained_homo_model_is_the_cores(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    params = BoostParams(
        n_estimators=4,
        max_depth=4,
        max_bin=16,
        monotone_constraints=MONO,
        interaction_constraints=GROUPS,
    )
    parts = {"c1": breast[0], "c2": breast[1]}
    run = await run_homo(
        parts, HomoConfig(params=params, round_timeout=20, allow_two_clients=True), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    core = train(params, X, y)
    assert same_trees(run.result.booster, core)
    # The constraints changed the trees (the comparison above is not the plain model's).
    plain = train(BoostParams(n_estimators=4, max_depth=4, max_bin=16), X, y)
    assert not same_trees(plain, core)
    for model in run.models.values():
        assert isinstance(model, Booster), model
        np.testing.assert_array_equal(model.predict(X), core.predict(X))


@pytest.mark.parametrize(
    ("files", "params"),
    [
        (
            "wine",  # 13 features, 3 classes: one tree per class, each monotone
            BoostParams(
                objective="multi:softmax",
                num_class=3,
                n_estimators=2,
                max_depth=3,
                max_bin=16,
                monotone_constraints=(1, -1) + (0,) * 11,
                interaction_constraints=((0, 1, 2, 3), tuple(range(4, 13))),
            ),
        ),
        (
            "diabetes",  # 10 features, regression
            BoostParams(
                objective="reg:squarederror",
                n_estimators=3,
                max_depth=3,
                max_bin=16,
                monotone_constraints=(0, 0, 1, 1, 0, 0, -1, 0, 1, 0),
            ),
        ),
    ],
    ids=["multiclass", "regression"],
)
async def test_constrained_multiclass_and_regression_are_the_cores(
    files: str, params: BoostParams, federation: Path
) -> None:
    parts, _ = bundled(files)
    run = await run_homo(
        parts, HomoConfig(params=params, round_timeout=20, allow_two_clients=True), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    assert same_trees(run.result.booster, train(params, X, y))


async def test_private_constrained_homo_model_is_the_cores(
    breast: list[tuple[np.ndarray, np.ndarray]], federation: Path
) -> None:
    dp = {"epsilon": 4.0, "noise_seed": 11, "mechanism": "seq", "monotone_heuristic": True}
    params = BoostParams().with_updates(
        n_estimators=3,
        max_depth=3,
        max_bin=16,
        dp=dp,
        monotone_constraints=MONO,
        interaction_constraints=GROUPS,
    )
    parts = {"c1": breast[0], "c2": breast[1]}
    run = await run_homo(
        parts, HomoConfig(params=params, round_timeout=20, allow_two_clients=True), federation
    )
    assert isinstance(run.result, HomoResult), run.result
    X = np.vstack([p[0] for p in parts.values()])
    y = np.concatenate([p[1] for p in parts.values()])
    streams = {c: NoiseSource(11, f"rows:{c}") for c in parts}

    def keys(ensemble: int, n_rows: int) -> np.ndarray:
        return np.concatenate([streams[c].uniform(parts[c][1].size) for c in parts])

    assert same_trees(run.result.booster, train(params, X, y, row_keys=keys))


def test_named_constraints_are_refused_where_no_names_are_shared() -> None:
    for settings in (
        {"monotone_constraints": {"income": 1}},
        {"interaction_constraints": [["income", "debt"]]},
    ):
        with pytest.raises(InputError, match="horizontal training shares no feature names"):
            HomoConfig(params=BoostParams().with_updates(**settings)).validate()


def test_a_party_files_train_table_passes_the_settings(tmp_path: Path) -> None:
    import tomllib

    from p2pboost.app._toml import Reader, boost_params

    text = "monotone_constraints = [1, 0, -1]\ninteraction_constraints = [[0, 1], [2]]\n"
    params = boost_params(Reader(tmp_path / "party.toml", tomllib.loads(text), "train."))
    assert params.monotone_constraints == (1, 0, -1)
    assert params.interaction_constraints == ((0, 1), (2,))
    HomoConfig(params=params).validate()


async def test_a_client_refuses_constraints_that_do_not_fit_its_columns(
    breast: list[tuple[np.ndarray, np.ndarray]],
) -> None:
    """Checked before the client joins (the session is never used)."""
    from p2pboost.homo.client import client_train

    X, y = breast[0]
    config = HomoConfig(params=BoostParams(monotone_constraints=(1, 0)), masking=False)
    with pytest.raises(InputError, match="has 2 directions but the data have 30 features"):
        await client_train(None, "server", X, y, config, identity=None, me="c1")  # type: ignore[arg-type]
