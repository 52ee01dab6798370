"""Vertical validation from the party files: ``[data] valid_path`` at the guest and the host
(aligned by their own PSI), the guest's ``eval_metric`` and ``early_stopping_rounds``, and the
partner's contribution (gain shares, the guest-only model on the same validation rows) in the
summary, ``inspect`` and ``report``. Over loopback mutual TLS, 1024-bit keys, a few trees."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

from p2pboost.app.cli import main
from p2pboost.testing import time_factor
from tests.cli.conftest import (
    FAST_TRAIN,
    finish,
    free_port,
    party_configs,
    start_cli,
)

#: Ids the tests hold out (every fifth: rows both parties have and rows only one has).
HELD_OUT = 5


def _split(path: Path, valid: Path) -> int:
    """Move every fifth row of ``path`` (by id number) to ``valid``; the rows moved."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    fields = list(rows[0])
    out = [r for r in rows if int(r["id"][1:]) % HELD_OUT == 0]
    for target, part in ((path, [r for r in rows if r not in out]), (valid, out)):
        with target.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(part)
    return len(out)


def _with_valid(toml: Path, name: str) -> None:
    text = toml.read_text()
    toml.write_text(text.replace('id_column = "id"', f'id_column = "id"\nvalid_path = "{name}"'))


@pytest.mark.slow
def test_validation_early_stopping_and_the_partners_contribution(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _split(vertical[0], tmp_path / "guest-valid.csv")
    _split(vertical[1], tmp_path / "host-valid.csv")
    train = {**FAST_TRAIN, "n_estimators": 30, "eval_metric": "auc", "early_stopping_rounds": 2}
    train |= {"learning_rate": 1.0, "max_depth": 4}  # overfits fast: early stopping stops it
    guest_toml, host_toml = party_configs(tmp_path, cert_root, port=free_port(), train=train)
    _with_valid(guest_toml, "guest-valid.csv")
    _with_valid(host_toml, "host-valid.csv")
    host = start_cli("--log-format", "json", "party", "--config", str(host_toml))
    guest = start_cli("party", "--config", str(guest_toml))
    (g_code, g_out, g_err), (h_code, _, h_err) = finish(guest, 180), finish(host, 180)
    assert (g_code, h_code) == (0, 0), f"guest:\n{g_err}\nhost:\n{h_err}"
    # each file's held-out rows the other party also has: 110 of 550 at the guest, 106 common
    assert "PSI (valid): 106 common ids of 110" in g_err
    assert "valid auc" in g_err  # the learning curve shows the validation metric
    assert {json.loads(line)["level"] for line in h_err.strip().splitlines()} == {"info"}
    summary = json.loads(g_out.strip().splitlines()[-1])
    assert summary["trees"] < 30  # early stopping ended it
    shares = summary["gain_share"]
    assert set(shares) == {"guest", "host"}
    assert abs(sum(shares.values()) - 1.0) < 1e-6
    assert shares["host"] > 0
    comparison = summary["validation"]
    assert (comparison["metric"], comparison["valid_rows"]) == ("auc", 106)
    assert 0.5 < comparison["guest_only"] <= 1.0
    assert 0.5 < comparison["federated"] <= 1.0
    assert "guest-only, trained on the guest's features alone" in g_err

    from p2pboost.hetero.model import GuestModel

    model = GuestModel.load(tmp_path / "out-guest" / "model.json")
    assert list(model.history) == ["train", "valid"]
    assert model.best_iteration is not None
    assert model.diagnostics["contribution.guest_only.auc"] == comparison["guest_only"]

    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "out-guest" / "model.json")]) == 0
    text = capsys.readouterr().out
    assert "share of the total gain" in text
    assert f"host {shares['host']:.1%}" in text
    assert "guest-only" in text
    written = tmp_path / "plots"
    assert main(["report", str(tmp_path / "out-guest" / "model.json"), "--out", str(written)]) == 0
    assert (written / "model_contribution.png").is_file()


@pytest.mark.slow
def test_validation_rows_at_one_party_only_fail_at_once_on_both_sides(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    """A guest with validation rows and a host without stop within seconds, naming the key."""
    _split(vertical[0], tmp_path / "guest-valid.csv")
    guest_toml, host_toml = party_configs(tmp_path, cert_root, port=free_port())
    _with_valid(guest_toml, "guest-valid.csv")
    t0 = time.monotonic()
    host = start_cli("party", "--config", str(host_toml))
    guest = start_cli("party", "--config", str(guest_toml))
    (g_code, _, g_err), (h_code, _, h_err) = finish(guest), finish(host)
    assert time.monotonic() - t0 < 30 * time_factor()  # process start-up included
    assert (g_code, h_code) == (1, 1), f"guest:\n{g_err}\nhost:\n{h_err}"
    assert "data.valid_path: given here, none at 'host'" in g_err
    assert "data.valid_path: none here, given at 'guest'" in h_err
    assert "Traceback" not in g_err + h_err
