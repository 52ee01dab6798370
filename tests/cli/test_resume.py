"""``p2pboost party --resume``: a party SIGKILLed mid-training and started again continues from
its checkpoint; the other party, still running, sees the restart and continues from its own;
the models are those of an uninterrupted run. Separate processes over real mutual TLS."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app._recovery import explain, resume_hint
from p2pboost.app.config import load_config
from p2pboost.exceptions import CheckpointError, ConfigError, PeerDisconnected
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.hetero.training.checkpoint import GuestCheckpoint
from tests.cli.conftest import (
    finish,
    free_port,
    party_configs,
    start_cli,
    write_config,
    write_vertical_csvs,
)

TRAIN = {
    "n_estimators": 8,
    "max_depth": 3,
    "subsample": 0.8,
    "key_bits": 1024,
    "insecure_key_bits": True,
}


def _federation(root: Path, cert_root: Path) -> tuple[Path, Path]:
    root.mkdir()
    write_vertical_csvs(root)
    return party_configs(root, cert_root, port=free_port(), train=TRAIN)


def _trees(root: Path) -> list[Tree]:
    guest = GuestModel.load(root / "out-guest" / "model.json")
    host = HostModel.load(root / "out-host" / "model.json")
    return joined_trees(guest, [host])


def _wait_for_trees(root: Path, trees: int, within: float = 90.0) -> None:
    """Until the guest's checkpoint holds ``trees`` trees (it is replaced atomically)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        saved = GuestCheckpoint.load(root / "out-guest" / "checkpoints")
        if saved is not None and len(saved.chain) >= trees:
            return
        time.sleep(0.02)
    pytest.fail(f"the guest's checkpoint never held {trees} trees")


def _assert_same(ours: list[Tree], reference: list[Tree]) -> None:
    assert len(ours) == len(reference) == TRAIN["n_estimators"]
    for a, b in zip(ours, reference, strict=True):
        for field in ("feature", "threshold_bin", "left", "right", "value", "default_left"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def _both(guest: subprocess.Popen[str], host: subprocess.Popen[str]) -> tuple[str, str]:
    g_code, _, g_err = finish(guest, 120)
    h_code, _, h_err = finish(host, 120)
    assert (g_code, h_code) == (0, 0), f"guest:\n{g_err}\nhost:\n{h_err}"
    return g_err, h_err


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["host", "guest"])
def test_a_killed_party_resumes_and_the_model_is_the_uninterrupted_one(
    tmp_path: Path, cert_root: Path, killed: str
) -> None:
    ref_guest, ref_host = _federation(tmp_path / "reference", cert_root)
    host = start_cli("party", "--config", str(ref_host))
    _both(start_cli("party", "--config", str(ref_guest)), host)

    root = tmp_path / "crash"
    guest_toml, host_toml = _federation(root, cert_root)
    procs = {
        "host": start_cli("party", "--config", str(host_toml)),
        "guest": start_cli("party", "--config", str(guest_toml)),
    }
    _wait_for_trees(root, 3)
    procs[killed].send_signal(signal.SIGKILL)
    procs[killed].communicate(timeout=10)  # reaped, its pipes closed
    config = guest_toml if killed == "guest" else host_toml
    procs[killed] = start_cli("party", "--config", str(config), "--resume")
    g_err, h_err = _both(procs["guest"], procs["host"])

    survivor_log = h_err if killed == "guest" else g_err
    assert f"'{killed}' restarted: continuing from the checkpoints" in survivor_log
    _assert_same(_trees(root), _trees(tmp_path / "reference"))


def test_resume_needs_checkpoints_but_for_a_horizontal_client(tmp_path: Path) -> None:
    common = {"certs": "certs", "task": "train"}
    server = write_config(
        tmp_path / "server.toml",
        {"id": "server", "role": "server", "listen": "127.0.0.1:9000", **common},
        peers={"c1": ""},
        train={"checkpoint_dir": ""},
    )
    with pytest.raises(ConfigError, match="--resume needs"):
        load_config(server).with_resume()
    client = write_config(
        tmp_path / "client.toml",
        {"id": "c1", "role": "client", **common},
        peers={"server": "wss://127.0.0.1:9000"},
        data={"path": "c1.csv", "label_column": "y"},
    )
    loaded = load_config(client)
    assert loaded.with_resume() is loaded  # a client keeps no checkpoint: it rejoins
    guest = write_config(
        tmp_path / "guest.toml",
        {"id": "guest", "role": "guest", "workdir": "out", **common},
        peers={"host": "wss://127.0.0.1:9001"},
        data={"path": "guest.csv", "label_column": "y"},
        train={"checkpoint_dir": ""},
    )
    loaded = load_config(guest)
    assert loaded.checkpoint_path is None
    with pytest.raises(ConfigError, match="--resume needs"):
        loaded.with_resume()
    default = write_config(
        tmp_path / "default.toml",
        {"id": "guest", "role": "guest", "workdir": "out", **common},
        peers={"host": "wss://127.0.0.1:9001"},
        data={"path": "guest.csv", "label_column": "y"},
    )
    assert load_config(default).checkpoint_path == tmp_path / "out" / "checkpoints"
    assert load_config(default).with_resume().train.resume


def test_a_damaged_checkpoint_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "hetero-guest.ckpt").write_bytes(b"p2pboost checkpoint v1\n" + b"\0" * 40)
    with pytest.raises(CheckpointError, match=r"hetero-guest\.ckpt.*corrupted"):
        GuestCheckpoint.load(tmp_path)


def test_a_training_cut_off_by_a_peer_names_the_resume_command(
    tmp_path: Path, cert_root: Path
) -> None:
    """The error that ends a party's training because its peer is gone names `--resume` when
    this run's checkpoints hold trees, and only then (a stale file would be refused)."""
    guest_toml, _ = party_configs(tmp_path, cert_root, port=free_port(), train=TRAIN)
    config = load_config(guest_toml)
    assert config.checkpoint_path is not None
    command = f"p2pboost party --config {guest_toml} --resume"
    gone = PeerDisconnected("host")
    started = time.time()
    assert command not in str(explain(gone, config, started))  # no checkpoint yet
    config.checkpoint_path.mkdir(parents=True)
    (config.checkpoint_path / "hetero-guest.ckpt").write_bytes(b"trees")
    message = str(explain(gone, config, started))
    assert "is party 'host' at wss://127.0.0.1:" in message
    assert command in message
    assert str(config.checkpoint_path) in message
    # A checkpoint older than this run is an earlier training's: no hint, unless resuming.
    assert command not in str(explain(gone, config, started + 3600))
    assert command in str(explain(gone, config.with_resume(), started + 3600))
    assert resume_hint(config.with_task("predict"), started) == ""


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_the_survivor_of_a_crash_says_how_to_resume(
    tmp_path: Path, cert_root: Path, stop: signal.Signals
) -> None:
    guest_toml, host_toml = _federation(tmp_path / "crash", cert_root)
    for toml in (guest_toml, host_toml):  # the survivor gives up after 3 s, not 20
        toml.write_text(
            toml.read_text().replace("reconnect_timeout = 20.0", "reconnect_timeout = 3.0")
        )
    host = start_cli("party", "--config", str(host_toml))
    guest = start_cli("party", "--config", str(guest_toml))
    _wait_for_trees(tmp_path / "crash", 2)
    host.send_signal(stop)
    host.communicate(timeout=10)
    code, _, err = finish(guest, 60)
    assert code == 1, err
    assert f"p2pboost party --config {guest_toml} --resume" in err, err
