"""``write_report`` plots, and the evaluation history that model files now carry."""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app.report import write_report
from p2pboost.exceptions import ConfigError, InputError, ModelError
from p2pboost.gbdt.booster import Booster
from p2pboost.hetero.model import GuestModel
from tests._model_files import ModelFiles, breast, make_model_files

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> ModelFiles:
    return make_model_files(tmp_path_factory.mktemp("report"))


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def assert_plot(path: Path) -> None:
    width, height = png_size(path)
    assert width >= 300
    assert height >= 200
    assert path.stat().st_size > 5_000  # axes, bars and text, not an empty canvas
    from matplotlib.image import imread

    pixels = imread(path)[:, :, :3]
    drawn = (pixels < 0.9).any(axis=2).mean()  # share of pixels that are not (near) white
    assert 0.01 < drawn < 0.9


# -- plots ------------------------------------------------------------------------------------


def test_guest_report_has_importance_and_learning_curve(files: ModelFiles, tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir"  # created on demand
    paths = write_report(files.guest, out)
    assert [p.name for p in paths] == [
        "guest_importance.png",
        "guest_learning_curve.png",
        "guest_contribution.png",
    ]
    for path in paths:
        assert path.parent == out
        assert_plot(path)
    # Two panels (gain and split count) make the importance plot wider than a host's.
    host = write_report(files.host, tmp_path)
    assert png_size(paths[0])[0] > png_size(host[0])[0]


def test_host_report_has_no_learning_curve(files: ModelFiles, tmp_path: Path) -> None:
    paths = write_report(files.host, tmp_path)
    assert [p.name for p in paths] == ["host_importance.png"]
    assert_plot(paths[0])


def test_booster_report_with_best_round(files: ModelFiles, tmp_path: Path) -> None:
    paths = write_report(files.booster, tmp_path, feature_names=[f"c{i}" for i in range(30)])
    assert [p.name for p in paths] == ["booster_importance.png", "booster_learning_curve.png"]
    for path in paths:
        assert_plot(path)
    # Two metrics (logloss and auc) give two panels side by side.
    guest_curve = write_report(files.guest, tmp_path)[1]
    assert png_size(paths[1])[0] > png_size(guest_curve)[0]


def test_missing_matplotlib_is_a_config_error_saying_what_to_install(
    files: ModelFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError, match=r"pip install 'p2pboost\[report\]'"):
        write_report(files.guest, tmp_path)
    assert not list(tmp_path.iterdir())


def test_an_existing_plot_is_replaced_only_with_overwrite(
    files: ModelFiles, tmp_path: Path
) -> None:
    curve = tmp_path / "guest_learning_curve.png"
    curve.write_bytes(b"kept")
    with pytest.raises(InputError, match=r"guest_learning_curve\.png already exists.*--force"):
        write_report(files.guest, tmp_path)
    assert curve.read_bytes() == b"kept"
    assert not (tmp_path / "guest_importance.png").exists()  # checked before anything is drawn
    paths = write_report(files.guest, tmp_path, overwrite=True)
    assert [p.name for p in paths] == [
        "guest_importance.png",
        "guest_learning_curve.png",
        "guest_contribution.png",
    ]
    assert_plot(curve)


def test_the_default_directory_is_the_model_files(files: ModelFiles, tmp_path: Path) -> None:
    model = tmp_path / "party" / "model.json"
    model.parent.mkdir()
    model.write_bytes(files.guest.read_bytes())
    paths = write_report(model)
    assert paths == [
        model.parent / "model_importance.png",
        model.parent / "model_learning_curve.png",
        model.parent / "model_contribution.png",  # a guest's: each party's share of the gain
    ]


def test_report_on_a_file_that_is_not_a_model(tmp_path: Path) -> None:
    bad = tmp_path / "data.json"
    bad.write_text(json.dumps({"rows": [1, 2, 3]}))
    with pytest.raises(ModelError, match="not a p2pboost model"):
        write_report(bad, tmp_path / "out")


# -- history in model files -------------------------------------------------------------------


def test_training_records_history_in_the_model(files: ModelFiles) -> None:
    guest = files.guest_model
    assert guest.history == files.guest_record  # what the callbacks saw, every round
    assert len(guest.history["valid_0"]["logloss"]) == guest.n_rounds
    booster = files.booster_model
    assert booster.best_iteration is not None
    valid = booster.history["valid"]["logloss"]
    assert len(valid) == booster.n_rounds
    assert valid[booster.best_iteration] == min(valid)


def test_history_round_trips_and_keeps_the_fingerprint(files: ModelFiles, tmp_path: Path) -> None:
    guest = GuestModel.load(files.guest)
    assert guest.history == files.guest_model.history
    assert guest.fingerprint == files.guest_model.fingerprint == files.host_model.fingerprint
    booster = Booster.load(files.booster)
    assert booster.history == files.booster_model.history
    # An undefined round (NaN) survives as null in JSON and NaN again after loading.
    guest.history["valid_0"]["auc"] = [math.nan, 0.5, 0.75, 1.0]
    guest.save(tmp_path / "nan.json")
    assert '"auc":[null,0.5,0.75,1.0]' in (tmp_path / "nan.json").read_text()
    again = GuestModel.load(tmp_path / "nan.json")
    assert math.isnan(again.history["valid_0"]["auc"][0])
    assert again.history["valid_0"]["auc"][1:] == [0.5, 0.75, 1.0]


def test_files_without_history_still_load_and_predict_alike(
    files: ModelFiles, tmp_path: Path
) -> None:
    for path, cls in ((files.guest, GuestModel), (files.booster, Booster)):
        doc = json.loads(path.read_text())
        del doc["history"]  # as written before history existed
        old = tmp_path / f"old_{path.name}"
        old.write_text(json.dumps(doc))
        model = cls.load(old)
        assert model.history == {}
        assert "history" not in model.to_dict()  # and it is not invented on save
    X, _ = breast()
    old_booster = Booster.load(tmp_path / "old_booster.json")
    np.testing.assert_array_equal(old_booster.predict(X), files.booster_model.predict(X))
    old_guest = GuestModel.load(tmp_path / "old_guest.json")
    assert old_guest.fingerprint == files.guest_model.fingerprint
    paths = write_report(tmp_path / "old_guest.json", tmp_path)
    assert [p.name for p in paths] == ["old_guest_importance.png", "old_guest_contribution.png"]


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([1, 2], "expected an object"),
        ({"valid": [0.5]}, "metrics per set"),
        ({"valid": {"auc": "0.5"}}, "at most"),
        ({"valid": {"auc": [0.5] * 99}}, "at most"),
        ({"valid": {"auc": [True]}}, "numbers or null"),
        ({"": {"auc": [0.5]}}, "name"),
    ],
)
def test_broken_history_is_a_model_error(
    files: ModelFiles, tmp_path: Path, history: object, problem: str
) -> None:
    for path, cls in ((files.guest, GuestModel), (files.booster, Booster)):
        doc = json.loads(path.read_text())
        doc["history"] = history
        bad = tmp_path / path.name
        bad.write_text(json.dumps(doc))
        with pytest.raises(ModelError, match=problem):
            cls.load(bad)


def test_importance_shows_the_stored_names_and_gain_shares(tmp_path: Path) -> None:
    import pandas as pd  # type: ignore[import-untyped]
    from matplotlib.figure import Figure

    from p2pboost.app.model_info import load_model
    from p2pboost.app.report import _importance_figure
    from p2pboost.gbdt.booster import train
    from p2pboost.gbdt.params import BoostParams

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(300, 3)), columns=["age", "income", "debt"])
    y = (X["income"] + 0.3 * X["debt"] > 0).to_numpy(dtype=np.float64)
    train(BoostParams(n_estimators=3, max_depth=2), X, y).save(tmp_path / "m.json")
    figure = _importance_figure(Figure, load_model(tmp_path / "m.json"), ["age", "income", "debt"])
    gain_axes = figure.axes[0]
    assert gain_axes.get_xlabel() == "share of the total gain (%)"
    assert gain_axes.get_yticklabels()[0].get_text() == "income"  # the strongest on top
    shares = [float(t.get_text().rstrip("%")) for t in gain_axes.texts]
    assert sum(shares) == pytest.approx(100.0, abs=0.2)


# -- the partners' contribution ---------------------------------------------------------------


def test_gain_shares_and_the_guest_only_comparison(files: ModelFiles, tmp_path: Path) -> None:
    """Shares of the gain by owner over the used trees; the guest-only model trained on the
    guest's columns, evaluated on the same rows, stored in the diagnostics and shown by
    ``inspect`` and ``report`` (a second panel beside the shares)."""
    from p2pboost.app._contribution import comparison_of, gain_shares, guest_only_comparison
    from p2pboost.app.model_info import describe, format_description
    from tests._model_files import GUEST_COLUMNS, HETERO_PARAMS

    model = GuestModel.load(files.guest)
    by_owner = np.zeros(2)
    for tree in model.trees[: model.used_trees()]:
        for owner in (0, 1):
            by_owner[owner] += tree.gain[tree.owner == owner].clip(min=0).sum()
    shares = gain_shares(model)
    assert list(shares) == ["guest", "b"]
    np.testing.assert_allclose(list(shares.values()), by_owner / by_owner.sum())
    plain = write_report(files.guest, tmp_path / "plain")[-1]
    X, y = breast()
    Xg = X[:, :GUEST_COLUMNS]
    figures = guest_only_comparison(model, HETERO_PARAMS, Xg, y, (Xg, y), None, "valid_0")
    metric = next(iter(model.history["valid_0"]))
    assert figures["contribution.valid_rows"] == y.size
    assert figures[f"contribution.federated.{metric}"] == model.history["valid_0"][metric][-1]
    model.diagnostics.update(figures)
    comparison = comparison_of(model.diagnostics)
    assert comparison is not None
    assert comparison["metric"] == metric == "logloss"  # lower is better: the lift's sign flips
    assert comparison["lift"] == comparison["guest_only"] - comparison["federated"]
    saved = tmp_path / "with.json"
    model.save(saved)
    text = format_description(describe(saved))
    assert "gain share    guest " in text
    assert "guest-only, trained on the guest's features alone" in text
    assert "contribution." not in text  # in words, not as raw diagnostics
    drawn = write_report(saved, tmp_path / "with")[-1]
    assert drawn.name == "with_contribution.png"
    assert_plot(drawn)
    assert png_size(drawn)[0] > png_size(plain)[0]  # the comparison's panel beside the shares
