"""``describe`` / ``format_description``: what each kind of model file holds, and what it not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app.model_info import describe, format_description, load_model
from p2pboost.exceptions import InputError, ModelError
from tests._model_files import GUEST_COLUMNS, HETERO_PARAMS, ModelFiles, make_model_files

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> ModelFiles:
    return make_model_files(tmp_path_factory.mktemp("model-info"))


def test_guest_file_is_described_from_the_guests_view(files: ModelFiles) -> None:
    d = describe(files.guest)
    guest = files.guest_model
    assert d["kind"] == "hetero-guest"
    assert (d["format"], d["version"]) == ("p2pboost.hetero.guest", 1)
    assert d["fingerprint"] == guest.fingerprint == files.host_model.fingerprint
    assert d["parties"] == {"hosts": ["b"]}
    assert d["objective"] == "binary:logistic"
    assert d["params"]["max_depth"] == HETERO_PARAMS.max_depth
    assert (d["n_trees"], d["n_rounds"]) == (HETERO_PARAMS.n_estimators,) * 2
    assert d["best_iteration"] is None
    assert set(d["diagnostics"]) == {"leaf_purity_first_tree", "leaf_purity_first_shared_tree"}
    assert "diagnostics   leaf_purity_first_tree 0." in format_description(d)
    assert d["n_features"] == GUEST_COLUMNS == len(d["features"])
    gains = [f["gain"] for f in d["features"]]
    np.testing.assert_allclose(gains, guest.feature_importance("gain"))
    assert [f["splits"] for f in d["features"]] == guest.feature_importance("split").tolist()
    # Splits per party add up to every internal node; the host's count matches its own file.
    internal = sum(int((t.owner >= 0).sum()) for t in guest.trees)
    assert d["splits"]["guest"] + d["splits"]["b"] == internal
    assert d["splits"]["b"] == len(files.host_model.splits) > 0
    assert d["history"] == files.guest_record
    assert any("host" in s and "thresholds" in s for s in d["does_not_hold"])
    json.dumps(d, allow_nan=False)  # --json output is strict JSON


def test_host_file_knows_only_its_splits(files: ModelFiles) -> None:
    d = describe(files.host)
    host = files.host_model
    assert d["kind"] == "hetero-host"
    assert d["parties"] == {"guest": "a"}
    assert d["objective"] is None
    assert d["params"] is None
    assert d["n_trees"] is None
    assert d["best_iteration"] is None
    assert d["trees_with_own_splits"] == len({s.tree for s in host.splits})
    assert d["splits"] == {"own": len(host.splits)}
    assert d["n_features"] == 30 - GUEST_COLUMNS
    assert all(f["gain"] is None for f in d["features"])
    assert [f["splits"] for f in d["features"]] == host.feature_importance().tolist()
    assert d["history"] == {}
    assert any("leaf weights" in s for s in d["does_not_hold"])
    json.dumps(d, allow_nan=False)


def test_booster_file_is_a_complete_model(files: ModelFiles) -> None:
    d = describe(files.booster)
    booster = files.booster_model
    assert d["kind"] == "booster"
    assert d["fingerprint"] is None
    assert d["parties"] is None
    assert d["best_iteration"] == booster.best_iteration is not None
    assert d["n_trees"] == len(booster.trees) < 60  # early stopping ended it
    assert d["splits"] == {"all": sum(int((t.feature >= 0).sum()) for t in booster.trees)}
    assert set(d["history"]) == {"train", "valid"}
    assert all(len(v) == booster.n_rounds for s in d["history"].values() for v in s.values())
    np.testing.assert_allclose([f["gain"] for f in d["features"]], booster.feature_importance())


def test_text_says_what_is_held_and_ranks_features(files: ModelFiles) -> None:
    guest = format_description(describe(files.guest, feature_names=[f"g{i}" for i in range(10)]))
    assert "guest's part" in guest
    assert files.guest_model.fingerprint in guest
    assert "hosts         b" in guest
    assert "valid_0 logloss" in guest
    assert "does not hold:" in guest
    # The most important feature by gain is listed first, under the given name.
    top = int(np.argmax(files.guest_model.feature_importance("gain")))
    first_row = guest.split("by importance:")[1].splitlines()[2]
    assert first_row.split()[0] == f"g{top}"

    host = format_description(describe(files.host))
    assert "unknown to a host" in host
    assert "gains are the guest's" in host
    assert "gain" not in host.split("by importance:")[1].splitlines()[1]  # no gain column

    booster = format_description(describe(files.booster))
    best = files.booster_model.best_iteration
    assert best is not None
    assert f"best round {best + 1}" in booster
    assert "valid auc" in booster
    assert "at the best round" in booster


def test_files_that_are_not_models_get_clear_errors(files: ModelFiles, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such model file"):
        describe(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("id,y\n1,0\n")
    with pytest.raises(ModelError, match="not a p2pboost model file"):
        describe(bad)
    bad.write_text(json.dumps({"format": "xgboost", "learner": {}}))
    with pytest.raises(ModelError, match="'xgboost'"):
        describe(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ModelError, match="not a JSON object"):
        load_model(bad)
    with pytest.raises(InputError, match="3 feature names"):
        describe(files.guest, feature_names=["a", "b", "c"])


def test_the_names_a_model_was_trained_with_are_shown(tmp_path: Path) -> None:
    import pandas as pd  # type: ignore[import-untyped]

    from p2pboost.gbdt.booster import train
    from p2pboost.gbdt.params import BoostParams

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(200, 3)), columns=["age", "income", "debt"])
    y = (X["income"] > 0).to_numpy(dtype=np.float64)
    path = tmp_path / "named.json"
    train(BoostParams(n_estimators=2, max_depth=2), X, y).save(path)
    d = describe(path)
    assert [f["name"] for f in d["features"]] == ["age", "income", "debt"]
    assert "income" in format_description(d)
    given = describe(path, feature_names=["a", "b", "c"])  # given names still take precedence
    assert [f["name"] for f in given["features"]] == ["a", "b", "c"]
