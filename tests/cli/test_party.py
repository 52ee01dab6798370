"""``p2pboost party``: two parties as separate processes over real mutual TLS on loopback.

A guest and a host, each started from its own config file as a user would in two terminals,
align their rows with PSI, train, save their own model files, then predict; and the three
failures users meet first end with one clear line and a non-zero status: an unreachable
peer, a missing certificate, a certificate of another party.
"""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.app._progress import LogReporter
from p2pboost.app.cli import main
from p2pboost.app.config import load_config
from p2pboost.app.party import _Run, _store
from p2pboost.exceptions import ConfigError
from p2pboost.testing import time_factor
from tests.cli.conftest import (
    COMMON,
    FAST_NODE,
    FAST_TRAIN,
    finish,
    free_port,
    party_configs,
    start_cli,
    wait_for_line,
    write_config,
)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _run_pair(guest_args: list[str], host_args: list[str]) -> tuple[str, str, str]:
    """Start host then guest; both must succeed. Returns guest stdout, guest/host stderr."""
    host = start_cli(*host_args)
    guest = start_cli(*guest_args)
    g_code, g_out, g_err = finish(guest)
    h_code, _, h_err = finish(host)
    assert (g_code, h_code) == (0, 0), f"guest:\n{g_err}\nhost:\n{h_err}"
    return g_out, g_err, h_err


@pytest.mark.slow
def test_train_predict_and_serve_over_mtls(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    guest_toml, host_toml = party_configs(
        tmp_path, cert_root, port=free_port(), serve_port=free_port()
    )

    # train: text logs with bars for the guest, JSON logs for the host
    out, g_err, h_err = _run_pair(
        ["party", "--config", str(guest_toml)],
        ["--log-format", "json", "party", "--config", str(host_toml)],
    )
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["party"], summary["task"], summary["trees"]) == ("guest", "train", 3)
    assert summary["rows"] == COMMON
    assert f"PSI: {COMMON} common ids of 550" in g_err
    assert "tree 3/3 train logloss" in g_err  # the bar's label: tree and current metric
    host_logs = [json.loads(line) for line in h_err.strip().splitlines()]
    assert all(set(r) >= {"time", "level", "logger", "message"} for r in host_logs)
    # a clean run: nothing above info, and the guest's normal close is said to be one
    assert {r["level"] for r in host_logs} == {"info"}, host_logs
    assert "code 1000" not in g_err + h_err
    assert any(f"PSI: {COMMON} common ids" in r["message"] for r in host_logs)
    g_ids = [r["id"] for r in _read_csv(tmp_path / "out-guest" / "intersection.csv")]
    h_ids = [r["id"] for r in _read_csv(tmp_path / "out-host" / "intersection.csv")]
    assert g_ids == h_ids
    assert len(g_ids) == COMMON
    assert (tmp_path / "out-guest" / "model.json").is_file()
    assert (tmp_path / "out-host" / "model.json").is_file()
    from p2pboost.hetero.model import GuestModel

    history = GuestModel.load(tmp_path / "out-guest" / "model.json").history
    assert list(history) == ["train"]  # the training rows' metric is named for what it is

    # predict: the guest scores all 550 of its rows; 19 the host lacks stay empty (align=psi)
    out, _, _ = _run_pair(
        ["--quiet", "predict", "--config", str(guest_toml)],
        ["--quiet", "predict", "--config", str(host_toml)],
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["task"], result["rows"], result["scored"]) == ("predict", 550, COMMON)
    assert result["auc"] > 0.95
    rows = _read_csv(tmp_path / "out-guest" / "predictions.csv")
    assert [r["id"] for r in rows] == [f"p{i}" for i in range(550)]
    scores = np.array([float(r["score"]) if r["score"] else np.nan for r in rows])
    assert np.isnan(scores[:19]).all()
    assert ((scores[19:] > 0) & (scores[19:] < 1)).all()

    # columns in another order score the same: both parties read their features by name
    reordered = _reordered_configs(tmp_path, guest_toml, host_toml)
    out, _, _ = _run_pair(
        ["--quiet", "predict", "--config", str(reordered[0])],
        ["--quiet", "predict", "--config", str(reordered[1])],
    )
    rows = _read_csv(tmp_path / "out-guest" / "predictions.csv")
    again = np.array([float(r["score"]) if r["score"] else np.nan for r in rows])
    np.testing.assert_array_equal(again, scores)
    missing = tmp_path / "guest-missing.toml"
    _write_columns(tmp_path / "guest.csv", tmp_path / "guest-missing.csv", drop="g3")
    missing.write_text(
        guest_toml.read_text().replace('align = "psi"', 'align = "psi"\npath = "guest-missing.csv"')
    )
    code, _, err = finish(start_cli("--quiet", "predict", "--config", str(missing)))
    assert code == 1
    assert "the model's features g3 are missing" in err

    # align = "ids": the host lacks 19 of the guest's ids; the guest says which, in one line
    strict = tmp_path / "guest-ids.toml"
    strict.write_text(guest_toml.read_text().replace('align = "psi"', 'align = "ids"'))
    host = start_cli("--quiet", "predict", "--config", str(host_toml))
    code, _, err = finish(start_cli("--quiet", "predict", "--config", str(strict)))
    assert code == 1
    assert err == (
        "p2pboost: error: host: no features for 19 requested id(s): "
        "'p0', 'p1', 'p2', 'p3', 'p4', ...\n"
    )
    assert finish(host)[0] == 0

    # serve: new processes load the model files and serve the same scores to an application
    served = _serve_and_ask(guest_toml, host_toml, cert_root / "app", tmp_path / "guest.csv")
    assert served["p0"]["error"]["type"] == "UnknownIdError"  # the host has no p0
    for i in (19, 20, 300, 549):
        assert served[f"p{i}"] == {"id": f"p{i}", "score": scores[i]}


def _write_columns(source: Path, target: Path, *, drop: str | None = None) -> None:
    """``source`` with its columns reversed (and ``drop`` left out)."""
    with source.open(newline="") as fh:
        rows = list(csv.reader(fh))
    keep = [j for j, name in enumerate(rows[0]) if name != drop][::-1]
    with target.open("w", newline="") as fh:
        csv.writer(fh).writerows([[row[j] for j in keep] for row in rows])


def _reordered_configs(tmp_path: Path, guest_toml: Path, host_toml: Path) -> tuple[Path, Path]:
    """Both parties' configs scoring copies of their CSVs whose columns are reversed."""
    _write_columns(tmp_path / "guest.csv", tmp_path / "guest-reordered.csv")
    _write_columns(tmp_path / "host.csv", tmp_path / "host-reordered.csv")
    guest = tmp_path / "guest-reordered.toml"
    guest.write_text(
        guest_toml.read_text().replace(
            'align = "psi"', 'align = "psi"\npath = "guest-reordered.csv"'
        )
    )
    host = tmp_path / "host-reordered.toml"
    host.write_text(host_toml.read_text() + '\n[predict]\npath = "host-reordered.csv"\n')
    return guest, host


def _serve_and_ask(
    guest_toml: Path, host_toml: Path, app_certs: Path, guest_csv: Path
) -> dict[str, dict[str, Any]]:
    """Start host and guest ``serve``; send requests (ids only, and ids with features) as an
    application with its own certificate; SIGTERM both; the replies by id."""
    from p2pboost.certs import TLSConfig
    from p2pboost.hetero.inference.endpoint import stream_scores

    rows = {r["id"]: r for r in _read_csv(guest_csv)}
    requests: list[dict[str, Any]] = [{"id": "p0"}, {"id": "p19"}, {"id": "p20"}]
    for i in (300, 549):  # with the guest's features, as a new customer's request would be
        row = rows[f"p{i}"]
        requests.append({"id": f"p{i}", "features": [float(row[f"g{j}"]) for j in range(10)]})

    async def ask(url: str) -> list[dict[str, Any]]:
        tls = TLSConfig.from_dir(app_certs)
        return [r async for r in stream_scores(url, requests, tls=tls, server_party="guest")]

    host = start_cli("serve", "--config", str(host_toml))
    guest = start_cli("serve", "--config", str(guest_toml))
    try:
        line = wait_for_line(guest, "serving scores at ")
        replies = asyncio.run(ask(line.split("serving scores at ")[1].strip()))
    finally:
        for proc in (guest, host):
            proc.send_signal(signal.SIGTERM)
    for proc in (guest, host):
        code, _, err = finish(proc, timeout=30)
        assert code == 143, err
    return {r["id"]: r for r in replies}


def _guest_only(tmp_path: Path, cert_dir: Path, port: int, task: str = "psi") -> Path:
    (tmp_path / "guest.csv").write_text("id,y,a\n1,0,0.5\n2,1,0.7\n")
    return write_config(
        tmp_path / "guest.toml",
        {"id": "guest", "role": "guest", "task": task, "certs": str(cert_dir)},
        peers={"host": f"wss://127.0.0.1:{port}"},
        data={"path": "guest.csv", "label_column": "y"},
        node=FAST_NODE,
    )


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("p2pboost: error: ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.slow
def test_unreachable_peer_fails_fast_naming_it(
    tmp_path: Path, cert_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    config = _guest_only(tmp_path, cert_root / "guest", port)
    t0 = time.monotonic()
    assert main(["party", "--config", str(config)]) == 1
    assert time.monotonic() - t0 < 15 * time_factor()
    line = _one_error_line(capsys)
    assert "'host'" in line
    assert f"wss://127.0.0.1:{port}" in line
    assert "reconnect_timeout" in line


def test_missing_certificate_names_the_file(
    tmp_path: Path, cert_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certs = tmp_path / "mycerts"
    shutil.copytree(cert_root / "guest", certs)
    (certs / "cert.pem").unlink()
    config = _guest_only(tmp_path, certs, free_port())
    assert main(["party", "--config", str(config)]) == 1
    line = _one_error_line(capsys)
    assert "certificate file not found" in line
    assert str(certs / "cert.pem") in line


def test_missing_certificate_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _guest_only(tmp_path, tmp_path / "nowhere", free_port())
    assert main(["party", "--config", str(config)]) == 1
    assert str(tmp_path / "nowhere") in _one_error_line(capsys)


def test_certificate_of_another_party(
    tmp_path: Path, cert_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _guest_only(tmp_path, cert_root / "host", free_port())
    assert main(["party", "--config", str(config)]) == 1
    line = _one_error_line(capsys)
    assert "id is 'guest'" in line
    assert "for party 'host'" in line


def test_a_file_without_the_id_column_names_the_setting(
    tmp_path: Path, cert_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first run on one's own data: the ids are in another column than `id`."""
    config = _guest_only(tmp_path, cert_root / "guest", free_port(), task="train")
    (tmp_path / "guest.csv").write_text("customer,y,a\n1,0,0.5\n2,1,0.7\n")
    t0 = time.monotonic()
    assert main(["party", "--config", str(config)]) == 1
    assert time.monotonic() - t0 < 10 * time_factor()  # before any peer is waited for
    line = _one_error_line(capsys)
    assert "no id column 'id' (columns: customer, y, a)" in line
    assert "[data] id_column" in line


def test_a_scoring_file_without_the_id_column_names_the_setting(tmp_path: Path) -> None:
    """The host's serving store reads its file through another path; it says the same."""
    config_path = _guest_only(tmp_path, tmp_path, free_port(), task="serve")
    (tmp_path / "guest.csv").write_text("customer,a\n1,0.5\n")
    run = _Run(load_config(config_path), LogReporter())
    with pytest.raises(ConfigError, match=r"no id column 'id'.*\[data\] id_column"):
        _store(run, None)


def test_task_a_role_cannot_do(
    tmp_path: Path, cert_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path / "server.toml",
        {
            "id": "server",
            "role": "server",
            "task": "psi",
            "listen": "127.0.0.1:0",
            "certs": str(cert_root / "guest"),
        },
        peers={"c1": "", "c2": ""},
    )
    assert main(["party", "--config", str(config)]) == 1
    assert "a server has no 'psi' task (it can: train)" in _one_error_line(capsys)


@pytest.mark.slow
def test_psi_task_from_the_command_line(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    guest_toml, host_toml = party_configs(tmp_path, cert_root, port=free_port())
    out, _, _ = _run_pair(
        ["--quiet", "party", "--config", str(guest_toml), "--task", "psi"],
        ["--quiet", "party", "--config", str(host_toml), "--task", "psi"],
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["task"], result["rows"], result["common"]) == ("psi", 550, COMMON)
    ids = [r["id"] for r in _read_csv(tmp_path / "out-guest" / "intersection.csv")]
    assert ids == [f"p{i}" for i in range(19, 550)]  # the guest's order
    assert not (tmp_path / "out-guest" / "model.json").exists()


@pytest.mark.slow
def _homo_configs(
    tmp_path: Path, train: dict[str, Any], valid: bool = False
) -> tuple[Path, dict[str, Path]]:
    """server.toml and c1.toml, c2.toml on breast cancer rows split in two (each client's
    every fourth row for validation with ``valid``); the server listens."""
    from sklearn.datasets import load_breast_cancer

    from p2pboost import certs

    certs.init(tmp_path / "certs", ["server", "c1", "c2"])
    data = load_breast_cancer()
    header = "id,y," + ",".join(f"f{j}" for j in range(data.data.shape[1]))
    port = free_port()
    configs = {}
    for k, client in enumerate(["c1", "c2"]):
        rows = list(range(k, 569, 2))
        held = rows[::4] if valid else []
        files = {"": [i for i in rows if i not in held], "-valid": held}
        for suffix, ids in files.items():
            lines = [f"{i},{data.target[i]}," + ",".join(map(str, data.data[i])) for i in ids]
            (tmp_path / f"{client}{suffix}.csv").write_text("\n".join([header, *lines]) + "\n")
        table = {"path": f"{client}.csv", "label_column": "y"}
        configs[client] = write_config(
            tmp_path / f"{client}.toml",
            {"id": client, "role": "client", "certs": f"certs/{client}", "workdir": client},
            peers={"server": f"wss://127.0.0.1:{port}"},
            data={**table, "valid_path": f"{client}-valid.csv"} if valid else table,
            train=train,
        )
    server = write_config(
        tmp_path / "server.toml",
        {
            "id": "server",
            "role": "server",
            "listen": f"127.0.0.1:{port}",
            "certs": "certs/server",
            "workdir": "server",
        },
        peers={"c1": "", "c2": ""},
        train=train,
    )
    return server, configs


def _run_homo(server: Path, configs: dict[str, Path]) -> dict[str, Any]:
    procs = [start_cli("--quiet", "party", "--config", str(p)) for p in (server, *configs.values())]
    results = [finish(p) for p in procs]
    assert [code for code, _, _ in results] == [0, 0, 0], [err for _, _, err in results]
    summary: dict[str, Any] = json.loads(results[0][1].strip().splitlines()[-1])
    return summary


def test_homo_server_and_two_clients(tmp_path: Path) -> None:
    server, configs = _homo_configs(tmp_path, {"n_estimators": 3, "max_depth": 3})
    assert _run_homo(server, configs)["trees"] == 3

    # prediction is local to a homo client: no server, no network
    assert main(["--quiet", "predict", "--config", str(configs["c1"])]) == 0
    rows = _read_csv(tmp_path / "c1" / "predictions.csv")
    assert len(rows) == 285
    assert all(0 < float(r["score"]) < 1 for r in rows)


@pytest.mark.slow
def test_homo_validation_from_the_config_files(tmp_path: Path) -> None:
    """``train.eval_metric`` and ``early_stopping_rounds`` at every party, ``data.valid_path``
    at each client: the AUC over both clients' validation rows is in the model's history."""
    from p2pboost.gbdt.booster import Booster

    train = {"n_estimators": 4, "max_depth": 3, "eval_metric": "auc", "early_stopping_rounds": 3}
    server, configs = _homo_configs(tmp_path, train, valid=True)
    _run_homo(server, configs)
    model = Booster.load(tmp_path / "server" / "model.json")
    (per_set,) = model.history.values()
    assert len(per_set["auc"]) == 4
    assert all(0.9 < v <= 1.0 for v in per_set["auc"])


@pytest.mark.slow
def test_sigterm_stops_a_waiting_party_cleanly(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    port = free_port()
    _, host_toml = party_configs(tmp_path, cert_root, port=port)
    proc = start_cli("party", "--config", str(host_toml))
    assert proc.stderr is not None
    wait_for_line(proc, f"listening on wss://127.0.0.1:{port}")
    wait_for_line(proc, "PSI: waiting for guest")  # up, waiting for the guest
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc, timeout=30)
    assert code == 143
    assert "p2pboost: host: stopped (SIGTERM)" in err
    assert "Traceback" not in err
    assert "CancelledError" not in err


@pytest.mark.slow
def test_sigterm_in_json_mode_is_a_clean_stop_record(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    """Under a service manager: every stderr line a JSON record, none above info, the listen
    address among them, and the stop itself one record (it was plain text)."""
    port = free_port()
    _, host_toml = party_configs(tmp_path, cert_root, port=port)
    proc = start_cli("--log-format", "json", "party", "--config", str(host_toml))
    listening = json.loads(wait_for_line(proc, f"listening on wss://127.0.0.1:{port}"))
    assert listening["level"] == "info"
    waiting = json.loads(wait_for_line(proc, "PSI: waiting for guest"))
    assert waiting["level"] == "info"
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc, timeout=30)
    assert code == 143
    records = [json.loads(line) for line in err.strip().splitlines()]
    assert {r["level"] for r in records} == {"info"}, records
    assert records[-1]["message"] == "stopped (SIGTERM)"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("guest_changes", "host_task", "expected"),
    [
        ({"psi": False}, "train", "train.psi: false here, true at 'host'"),
        ({}, "psi", "task: 'train' here, 'psi' at 'host'"),
    ],
)
def test_parties_configured_differently_fail_at_once_naming_the_difference(
    tmp_path: Path,
    cert_root: Path,
    vertical: tuple[Path, Path],
    guest_changes: dict[str, Any],
    host_task: str,
    expected: str,
) -> None:
    """A guest with PSI and a host without it (or running another task) used to wait in
    different sessions until the node gave up; now both stop within seconds, naming the key."""
    guest_toml, host_toml = party_configs(
        tmp_path, cert_root, port=free_port(), train={**FAST_TRAIN, **guest_changes}
    )
    t0 = time.monotonic()
    host = start_cli("party", "--config", str(host_toml), "--task", host_task)
    guest = start_cli("party", "--config", str(guest_toml))
    (g_code, _, g_err), (h_code, _, h_err) = finish(guest), finish(host)
    assert time.monotonic() - t0 < 30 * time_factor()  # process start-up included
    assert (g_code, h_code) == (1, 1), f"guest:\n{g_err}\nhost:\n{h_err}"
    assert expected in g_err
    assert "configured differently" in h_err
    assert "Traceback" not in g_err + h_err


@pytest.mark.slow
def test_a_host_with_mostly_zero_features_trains_on_them_sparse(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    """A host CSV whose cells are mostly 0 is read into a sparse matrix (never dense) and
    trains; the same data with ``data.sparse = false`` gives the same model."""
    host_csv = tmp_path / "host.csv"
    rows = _read_csv(host_csv)
    rng = np.random.default_rng(0)
    for row in rows:
        for key in row:
            if key != "id" and rng.random() < 0.9:
                row[key] = "0"
    with host_csv.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    models = []
    for sparse in ("auto", False):
        guest_toml, host_toml = party_configs(tmp_path, cert_root, port=free_port())
        text = host_toml.read_text().replace(
            'id_column = "id"', f"id_column = {json.dumps('id')}\nsparse = {json.dumps(sparse)}"
        )
        host_toml.write_text(text)
        _, _, h_err = _run_pair(
            ["--quiet", "party", "--config", str(guest_toml)],
            ["party", "--config", str(host_toml)],
        )
        assert ("kept sparse" in h_err) is (sparse == "auto")
        models.append((tmp_path / "out-guest" / "model.json").read_text())
    assert json.loads(models[0])["trees"] == json.loads(models[1])["trees"]
