"""The README's main job: ``p2pboost demo`` runs, reports a sane metric and a JSON last line.

The federated modes run for real here: separate party processes, mutual-TLS WebSockets on
loopback, temporary certificates. Small models (2 trees of depth 2) keep them to seconds.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from p2pboost.app.cli import main
from p2pboost.testing import time_factor
from tests.cli.conftest import ROOT, write_horizontal_csvs, write_vertical_csvs

SMALL = ["--trees", "2", "--depth", "2"]


def _last_json(out: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _demo_processes() -> list[str]:
    """Party processes of the demo still alive (other tests' pools may run alongside)."""
    return [p.name for p in multiprocessing.active_children() if p.name.startswith("p2pboost-")]


def test_demo_prints_json_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--mode", "plain", "--trees", "10", "--depth", "3"]) == 0
    result = _last_json(capsys.readouterr().out)
    assert result["mode"] == "plain"
    assert result["trees"] == 10
    assert result["metric"] == "auc"
    assert 0.95 <= result["auc"] <= 1.0
    assert result["s_per_tree"] > 0


@pytest.mark.slow
def test_default_demo_is_hetero_over_tls_processes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["demo", "--mode", "plain", *SMALL, "--out", str(tmp_path / "plain")]) == 0
    plain = _last_json(capsys.readouterr().out)
    assert main(["demo", *SMALL, "--out", str(tmp_path / "fed")]) == 0  # no --mode: hetero
    captured = capsys.readouterr()
    result = _last_json(captured.out)
    assert set(result) == {"mode", "trees", "s_per_tree", "metric", "auc"}
    assert (result["mode"], result["trees"], result["metric"]) == ("hetero", 2, "auc")
    assert 0.9 < result["auc"] <= 1.0
    assert result["auc"] == plain["auc"]  # lossless: the same trees as the plaintext core
    assert result["s_per_tree"] > 0
    assert "host listening on wss://127.0.0.1:" in captured.err
    assert "1024-bit Paillier keys for speed" in captured.err
    assert "guest: tree 2/2" in captured.err
    assert not _demo_processes()
    # --out: each party's own file; joined, they are the plaintext model's trees.
    from p2pboost.gbdt.estimators import GBDTClassifier
    from p2pboost.hetero.model import GuestModel, HostModel, joined_trees

    trees = joined_trees(
        GuestModel.load(tmp_path / "fed" / "guest.json"),
        [HostModel.load(tmp_path / "fed" / "host.json")],
    )
    core = GBDTClassifier.load_model(tmp_path / "plain" / "plain.json").booster_.trees
    assert [t.feature.tolist() for t in trees] == [t.feature.tolist() for t in core]


@pytest.mark.slow
def test_hetero_demo_under_okamoto_uchiyama(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--mode", "plain", *SMALL]) == 0
    plain = _last_json(capsys.readouterr().out)
    assert main(["demo", "--scheme", "ou", *SMALL]) == 0
    captured = capsys.readouterr()
    result = _last_json(captured.out)
    assert result["auc"] == plain["auc"]  # lossless under OU too
    assert "1024-bit Okamoto-Uchiyama keys" in captured.err


@pytest.mark.slow
def test_homo_demo_runs_a_server_and_two_clients(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["demo", "--mode", "plain", *SMALL]) == 0
    plain = _last_json(capsys.readouterr().out)
    assert main(["demo", "--mode", "homo", *SMALL, "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    result = _last_json(captured.out)
    assert (result["mode"], result["trees"], result["metric"]) == ("homo", 2, "auc")
    assert 0.9 < result["auc"] <= 1.0
    assert result["auc"] == plain["auc"]  # lossless, as the hetero mode
    assert result["s_per_tree"] > 0
    assert "server listening on wss://127.0.0.1:" in captured.err
    assert "c1: test AUC" in captured.err
    assert "c2: test AUC" in captured.err
    assert not _demo_processes()
    files = {p: json.loads((tmp_path / f"{p}.json").read_text()) for p in ("server", "c1", "c2")}
    assert files["c1"] == files["c2"]  # every client holds the same model
    for model in files.values():  # the server's too, but for the covers and gains it keeps
        for tree in model["trees"]:
            assert any(tree.pop("cover")) == (model is files["server"])
            tree.pop("gain")
    assert files["server"] == files["c1"]


@pytest.mark.slow
def test_a_failing_party_ends_the_demo_with_one_clear_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    t0 = time.monotonic()
    assert main(["demo", *SMALL, "--key-bits", "512"]) == 1
    err = capsys.readouterr().err
    assert "p2pboost: error: demo party 'guest' failed: InputError: key size" in err
    assert "Traceback" not in err
    assert time.monotonic() - t0 < 60 * time_factor()
    assert not _demo_processes()  # the host was stopped, not left waiting


def test_a_run_past_its_deadline_is_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *SMALL, "--timeout", "0.2"]) == 1
    err = capsys.readouterr().err
    assert "did not finish within 0.2 s" in err
    assert "every party was stopped" in err
    assert not _demo_processes()


def test_demo_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--trees", "0"]) == 1
    assert "at least 1" in capsys.readouterr().err
    assert main(["demo", "--timeout", "0"]) == 1
    assert "--timeout" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--mode", "nonsense"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--scheme", "rsa"])
    assert exc.value.code == 2


def test_console_script_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "p2pboost.app.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "demo" in out
    assert "certs" in out


@pytest.mark.slow
def test_plaintext_example_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "plaintext" / "train.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "predicts identically: True" in proc.stdout
    assert (tmp_path / "breast.json").is_file()


@pytest.mark.slow
def test_demo_on_the_users_csvs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    guest, host = write_vertical_csvs(tmp_path)
    argv = ["--log-format", "json", "demo", *SMALL, "--guest", str(guest), "--host", str(host)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    result = _last_json(captured.out)
    assert (result["mode"], result["trees"], result["metric"]) == ("hetero", 2, "auc")
    assert 0.9 < result["auc"] <= 1.0
    records = [json.loads(line) for line in captured.err.strip().splitlines()]
    messages = " | ".join(r["message"] for r in records)
    assert "guest.csv (label + 10 features) and host.csv (20 features), 531 ids in common" in (
        messages
    )
    assert "host listening on wss://127.0.0.1:" in messages
    assert not _demo_processes()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--guest", "{tmp}/guest.csv"], "give both --guest and --host"),
        (["--mode", "homo", "--guest", "{tmp}/guest.csv", "--host", "{tmp}/host.csv"], "hetero"),
        (["--guest", "{tmp}/guest.csv", "--host", "{tmp}/nope.csv"], "nope.csv"),
        (["--guest", "{tmp}/guest.csv", "--host", "{tmp}/host.csv", "--id-column", "k"], "'k'"),
        (["--guest", "{tmp}/host.csv", "--host", "{tmp}/host.csv"], "no label column 'y'"),
    ],
)
def test_demo_csv_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    write_vertical_csvs(tmp_path)
    assert main(["demo", *SMALL, *(a.format(tmp=tmp_path) for a in extra)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("p2pboost: error: ")
    assert message in err
    assert not _demo_processes()


def test_quiet_demo_prints_only_the_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "demo", "--mode", "plain", *SMALL]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert len(captured.out.strip().splitlines()) == 1
    assert _last_json(captured.out)["mode"] == "plain"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from p2pboost import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"p2pboost {__version__}\n"


@pytest.mark.slow
def test_homo_and_plain_demos_on_the_users_csvs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three clients' files, their columns in different orders (read by name), a server."""
    files = write_horizontal_csvs(tmp_path, parts=3)
    argv = ["-q", "demo", "--mode", "homo", *SMALL, "--out", str(tmp_path / "models")]
    assert main([*argv, *(a for f in files for a in ("--client", str(f)))]) == 0
    homo = _last_json(capsys.readouterr().out)
    assert (homo["mode"], homo["metric"]) == ("homo", "auc")
    assert 0.9 < homo["auc"] <= 1.0
    assert {p.name for p in (tmp_path / "models").iterdir()} == {
        "server.json",
        "c1.json",
        "c2.json",
        "c3.json",
    }
    assert main(["-q", "demo", "--mode", "plain", *SMALL, "--data", str(files[0])]) == 0
    plain = _last_json(capsys.readouterr().out)
    assert plain["mode"] == "plain"
    assert 0.9 < plain["auc"] <= 1.0
    assert not _demo_processes()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mode", "homo", "--client", "{tmp}/client1.csv"], "two client CSVs or more"),
        (["--mode", "plain", "--client", "{tmp}/client1.csv"], "--client is for --mode homo"),
        (["--data", "{tmp}/client1.csv"], "--data is for --mode plain"),
        (
            ["--mode", "homo", "--client", "{tmp}/client1.csv", "--client", "{tmp}/odd.csv"],
            "odd.csv",
        ),
    ],
)
def test_demo_labelled_csv_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    files = write_horizontal_csvs(tmp_path)
    lines = files[1].read_text().splitlines()
    (tmp_path / "odd.csv").write_text(
        "\n".join([lines[0] + ",extra"] + [x + ",1" for x in lines[1:]])
    )
    assert main(["demo", *SMALL, *(a.format(tmp=tmp_path) for a in extra)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("p2pboost: error: ")
    assert message in err
