"""``p2pboost stability``: each party's PSI on its own side, equal to a plaintext computation;
a batch shifted by one standard deviation is flagged, the training population is not; and
``p2pboost report --stability`` draws the result."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app.cli import main
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.stability import feature_counts, psi, score_counts, score_edges
from p2pboost.hetero.model import GuestModel
from tests._model_files import ModelFiles, make_model_files
from tests.cli.conftest import free_port, party_configs


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> ModelFiles:
    return make_model_files(tmp_path_factory.mktemp("stability-models"))


def _table(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], [r[0] for r in rows[1:]], np.array(rows[1:])


def _batch(src: Path, out: Path, shift: str | None) -> np.ndarray:
    """The rows of ``src`` (shuffled), feature ``shift`` moved by one standard deviation;
    returns the new features (every column but id and y)."""
    header, _, cells = _table(src)
    cells = cells[np.random.default_rng(3).permutation(len(cells))]
    feats = [k for k, c in enumerate(header) if c not in ("id", "y")]
    X = cells[:, feats].astype(np.float64)
    if shift is not None:
        j = [header[k] for k in feats].index(shift)
        X[:, j] += X[:, j].std()
    cells = cells.copy().astype(object)
    cells[:, feats] = X
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(cells.tolist())
    return X


def _features(path: Path) -> np.ndarray:
    header, _, cells = _table(path)
    return cells[:, [k for k, c in enumerate(header) if c not in ("id", "y")]].astype(np.float64)


def _scores(path: Path, values: np.ndarray) -> Path:
    path.write_text("id,score\n" + "".join(f"r{i},{float(v)!r}\n" for i, v in enumerate(values)))
    return path


def test_stability_per_party_equals_plaintext_and_flags_a_shift(
    tmp_path: Path,
    cert_root: Path,
    vertical: tuple[Path, Path],
    models: ModelFiles,
    capsys: pytest.CaptureFixture[str],
) -> None:
    guest_toml, host_toml = party_configs(tmp_path, cert_root, port=free_port())
    for party, model in (("guest", models.guest), ("host", models.host)):
        (tmp_path / f"out-{party}").mkdir()
        shutil.copy(model, tmp_path / f"out-{party}" / "model.json")
    guest_csv, host_csv = vertical

    # guest: feature g3 shifted; scores shifted too
    X_new = _batch(guest_csv, tmp_path / "guest_new.csv", shift="g3")
    rng = np.random.default_rng(0)
    before, after = rng.normal(size=550), rng.normal(1.0, 1.0, size=300)
    assert (
        main(
            [
                "stability",
                "--config",
                str(guest_toml),
                "--batch",
                str(tmp_path / "guest_new.csv"),
                "--train-scores",
                str(_scores(tmp_path / "train_scores.csv", before)),
                "--scores",
                str(_scores(tmp_path / "new_scores.csv", after)),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("guest: 550 training rows, 550 new rows")
    summary = json.loads(out[-1])
    assert summary["shifted"] == ["g3"]
    result = json.loads((tmp_path / "out-guest" / "stability.json").read_text())
    mapper = GuestModel.load(models.guest).mapper
    want = psi(feature_counts(mapper, _features(guest_csv)), feature_counts(mapper, X_new))
    assert [f["psi"] for f in result["features"]] == want.tolist()
    by_name = {f["feature"]: f for f in result["features"]}
    assert by_name["g3"]["psi"] > 0.25
    assert by_name["g3"]["band"] == "shift"
    assert max(f["psi"] for name, f in by_name.items() if name != "g3") < 0.1
    edges = score_edges(before)
    assert result["score"]["psi"] == float(
        psi(score_counts(before, edges), score_counts(after, edges))
    )
    assert result["score"]["band"] == "shift"

    # host: its own features in bins fitted again on its training file, nothing shifted
    X_host = _batch(host_csv, tmp_path / "host_new.csv", shift=None)
    cmd = ["stability", "--config", str(host_toml), "--batch", str(tmp_path / "host_new.csv")]
    assert main(cmd) == 0
    host = json.loads((tmp_path / "out-host" / "stability.json").read_text())
    train = _features(host_csv)
    mapper = BinMapper(32).fit(train)
    want = psi(feature_counts(mapper, train), feature_counts(mapper, X_host))
    assert [f["psi"] for f in host["features"]] == want.tolist()
    assert all(f["band"] == "stable" for f in host["features"])
    assert host["score"] is None
    capsys.readouterr()
    assert main(cmd) == 1  # the result file exists: refused without --force
    assert "--force" in capsys.readouterr().err
    assert main([*cmd, "--force"]) == 0

    # the report: table and plot
    stab = str(tmp_path / "out-guest" / "stability.json")
    plots = tmp_path / "plots"
    assert main(["report", str(models.guest), "--out", str(plots), "--stability", stab]) == 0
    stem = models.guest.stem
    with (plots / f"{stem}_stability.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["feature"] == "(score)"
    assert {r["feature"]: r["band"] for r in rows}["g3"] == "shift"
    assert (plots / f"{stem}_stability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
