"""``predict --contributions``: the flags, the refusals before any work, the file's columns."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app.config import load_config
from p2pboost.app.explain import (
    check_explanations,
    predict_changes,
    record_tokens,
    write_explanations,
)
from p2pboost.exceptions import ConfigError
from p2pboost.hetero.inference.explain import BASE, Contributions, FeatureTokens
from tests.cli.conftest import free_port, party_configs


def test_flags_change_only_what_is_given() -> None:
    assert predict_changes(False, None, False) == {}
    assert predict_changes(True, 3, True) == {"contributions": True, "reasons": 3, "force": True}
    assert predict_changes(False, 0, False) == {"reasons": 0}


def test_refused_before_any_work(tmp_path: Path, cert_root: Path) -> None:
    guest_toml, _ = party_configs(tmp_path, cert_root, port=free_port(), predict={"align": "ids"})
    config = load_config(guest_toml)
    assert check_explanations(config) is None  # not asked for
    asked = config.with_predict(contributions=True)
    path = check_explanations(asked)
    assert path == asked.workdir / "explanations.csv"
    path.parent.mkdir(parents=True)
    path.write_text("the record a notice was written from\n")
    with pytest.raises(ConfigError, match="--force"):
        check_explanations(asked)
    assert check_explanations(asked.with_predict(force=True)) == path
    with pytest.raises(ConfigError, match="align"):
        check_explanations(config.with_predict(reasons=2, align="psi"))


def test_bad_reasons_in_the_file(tmp_path: Path, cert_root: Path) -> None:
    guest_toml, _ = party_configs(tmp_path, cert_root, port=free_port(), predict={"reasons": -1})
    with pytest.raises(ConfigError, match="reasons"):
        load_config(guest_toml)


def test_columns_contributions_then_reasons(tmp_path: Path, cert_root: Path) -> None:
    guest_toml, _ = party_configs(tmp_path, cert_root, port=free_port())
    predict = load_config(guest_toml).with_predict(contributions=True, reasons=2).predict
    values = np.array([[0.5, -0.2, 0.1, -1.0], [-0.3, 0.0, 0.4, -1.0]])
    contributions = Contributions(values, ["g0", "g1", "host", BASE])
    out = tmp_path / "explanations.csv"
    write_explanations(out, "id", np.array([7, 8]), contributions, predict)
    with out.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == [
        "id",
        "g0",
        "g1",
        "host",
        BASE,
        "reason_1",
        "reason_1_value",
        "reason_2",
        "reason_2_value",
    ]
    assert rows[1][5:] == ["g0", "0.5", "host", "0.1"]
    assert rows[2][5:] == ["host", "0.4", "", ""]  # only one player raised row 8
    assert [float(v) for v in rows[2][1:5]] == values[1].tolist()


def test_host_record_maps_the_guests_columns(tmp_path: Path) -> None:
    tokens = FeatureTokens({0: 11, 2: 12}, {11: "tenure", 12: "arpu"})
    record_tokens(tmp_path / "feature_tokens.csv", "telco")(tokens)
    with (tmp_path / "feature_tokens.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["column"]: r["feature"] for r in rows} == {
        "telco:000000000000000b": "tenure",
        "telco:000000000000000c": "arpu",
    }
