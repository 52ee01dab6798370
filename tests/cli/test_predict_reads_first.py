"""The guest's ``predict`` reads its scoring file before it starts its node: a missing column
or a file that cannot be read fails at once, naming the file and the setting, before any
network (it used to fail seconds later, after the node had started and dialled the host)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app import party
from p2pboost.app.config import load_config
from p2pboost.exceptions import ConfigError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.model import GuestModel
from p2pboost.testing import time_factor
from tests.cli.conftest import free_port, party_configs
from tests.cli.test_party import _write_columns


@pytest.fixture
def guest_toml(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A guest set to predict with a model of features g0..g9 (no trees: nothing here scores),
    whose node must never start."""
    guest, _ = party_configs(tmp_path, cert_root, port=free_port())
    config = load_config(guest)
    config.model_path.parent.mkdir(parents=True)
    X = np.random.default_rng(0).normal(size=(20, 10))
    names = [f"g{j}" for j in range(10)]
    mapper = BinMapper(8).fit(X)
    model = GuestModel("f" * 16, BoostParams(), ("host",), mapper, np.zeros(1), [], [], 1, None)
    dataclasses.replace(model, feature_names=names).save(config.model_path)

    def no_node(*_: object) -> None:
        raise AssertionError("the node was started before the scoring file was read")

    monkeypatch.setattr(party, "build_node", no_node)
    return guest


def _fails_at_once(toml: Path, path: str) -> str:
    text = toml.read_text().replace('align = "psi"', f'align = "psi"\npath = "{path}"')
    toml.write_text(text)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        party.run(load_config(toml).with_task("predict"))
    assert time.perf_counter() - t0 < 1.5 * time_factor()
    return str(info.value)


def test_a_missing_column_fails_before_the_node(guest_toml: Path, tmp_path: Path) -> None:
    _write_columns(tmp_path / "guest.csv", tmp_path / "guest-missing.csv", drop="g3")
    message = _fails_at_once(guest_toml, "guest-missing.csv")
    assert "the model's features g3 are missing" in message
    assert str(tmp_path / "guest-missing.csv") in message
    assert "[predict] path" in message


def test_an_unreadable_file_fails_before_the_node(guest_toml: Path, tmp_path: Path) -> None:
    message = _fails_at_once(guest_toml, "nowhere.csv")
    assert str(tmp_path / "nowhere.csv") in message
    assert "[predict] path" in message
