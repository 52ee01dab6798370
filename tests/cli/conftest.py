"""Shared material for the command-line tests: certificates, CSVs and party config files.

The data is scikit-learn's bundled breast-cancer set (569 rows), split vertically: the guest
holds the label and the first 10 features of rows 0..549, the host the other 20 features of
rows 19..568 in another order, so the parties share 531 ids and PSI has work to do.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost import certs

ROOT = Path(__file__).resolve().parents[2]
GUEST_ROWS = range(0, 550)
HOST_ROWS = range(19, 569)
COMMON = 531


def free_port() -> int:
    """A port nobody listens on right now (the OS picks it; tiny reuse race accepted)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _write(path: Path, header: list[str], rows: Any) -> Path:
    lines = [",".join(header)] + [",".join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_vertical_csvs(directory: Path) -> tuple[Path, Path]:
    """guest.csv (id, y, g0..g9) and host.csv (id, h0..h19) in ``directory``."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X, y = np.asarray(data.data), np.asarray(data.target)
    guest = _write(
        directory / "guest.csv",
        ["id", "y", *(f"g{j}" for j in range(10))],
        ([f"p{i}", int(y[i]), *X[i, :10]] for i in GUEST_ROWS),
    )
    host_order = np.random.default_rng(1).permutation(np.asarray(HOST_ROWS))
    host = _write(
        directory / "host.csv",
        ["id", *(f"h{j}" for j in range(20))],
        ([f"p{i}", *X[i, 10:]] for i in host_order),
    )
    return guest, host


def write_horizontal_csvs(directory: Path, parts: int = 2) -> list[Path]:
    """``client{i}.csv`` (id, y, x0..x29): breast cancer's rows dealt to ``parts`` files, the
    columns of each file in another order (they are read by name)."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X, y = np.asarray(data.data), np.asarray(data.target)
    out = []
    for k in range(parts):
        cols = np.random.default_rng(k).permutation(X.shape[1]) if k else np.arange(X.shape[1])
        rows = range(k, y.size, parts)
        out.append(
            _write(
                directory / f"client{k + 1}.csv",
                ["id", *(f"x{j}" for j in cols), "y"],
                ([f"r{i}", *X[i, cols], int(y[i])] for i in rows),
            )
        )
    return out


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def write_config(path: Path, top: Mapping[str, Any], **tables: Mapping[str, Any]) -> Path:
    """A TOML file from a dict of top-level keys and one dict per table."""
    lines = [f"{k} = {toml_value(v)}" for k, v in top.items()]
    for name, table in tables.items():
        lines.append(f"\n[{name}]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in table.items())
    path.write_text("\n".join(lines) + "\n")
    return path


#: Small and fast, with the explicit opt-in a 1024-bit key needs.
FAST_TRAIN = {
    "n_estimators": 3,
    "max_depth": 3,
    "key_bits": 1024,
    "insecure_key_bits": True,
}
#: Short timeouts so that a missing peer fails the test in about a second.
FAST_NODE = {"reconnect_timeout": 1.5, "connect_timeout": 0.5}


@pytest.fixture(scope="session")
def cert_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Certificates for guest, host and an application calling the guest's endpoint (one CA),
    made once for the CLI tests."""
    root = tmp_path_factory.mktemp("certs")
    certs.init(root, ["guest", "host", "app"])
    return root


@pytest.fixture
def vertical(tmp_path: Path) -> tuple[Path, Path]:
    return write_vertical_csvs(tmp_path)


def party_configs(
    tmp_path: Path,
    cert_root: Path,
    *,
    port: int,
    train: Mapping[str, Any] = FAST_TRAIN,
    predict: Mapping[str, Any] | None = None,
    serve_port: int = 0,
) -> tuple[Path, Path]:
    """guest.toml and host.toml in ``tmp_path`` (CSVs there too); the host listens."""
    guest = write_config(
        tmp_path / "guest.toml",
        {
            "id": "guest",
            "role": "guest",
            "task": "train",
            "certs": str(cert_root / "guest"),
            "workdir": "out-guest",
        },
        peers={"host": f"wss://127.0.0.1:{port}"},
        data={"path": "guest.csv", "id_column": "id", "label_column": "y"},
        train=train,
        predict=predict or {"align": "psi"},
        serve={"listen": f"127.0.0.1:{serve_port}"},
        node={"reconnect_timeout": 20.0, "connect_timeout": 2.0},
    )
    host = write_config(
        tmp_path / "host.toml",
        {
            "id": "host",
            "role": "host",
            "task": "train",
            "listen": f"127.0.0.1:{port}",
            "certs": str(cert_root / "host"),
            "workdir": "out-host",
        },
        peers={"guest": ""},
        data={"path": "host.csv", "id_column": "id"},
        train={"eval_train": train.get("eval_train", True)},
        node={"reconnect_timeout": 20.0, "connect_timeout": 2.0},
    )
    return guest, host


def start_cli(*args: str, cwd: Path = ROOT) -> subprocess.Popen[str]:
    """``python -m p2pboost.app.cli ARGS`` as its own process (a party on its own machine)."""
    return subprocess.Popen(
        [sys.executable, "-m", "p2pboost.app.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen[str], marker: str) -> str:
    """Read ``proc``'s stderr until a line holds ``marker``; that line."""
    assert proc.stderr is not None
    seen: list[str] = []
    while not seen or marker not in seen[-1]:
        seen.append(proc.stderr.readline())
        if not seen[-1]:
            proc.kill()
            pytest.fail(f"the process ended before {marker!r}:\n{''.join(seen)}")
    return seen[-1]


def finish(proc: subprocess.Popen[str], timeout: float = 90.0) -> tuple[int, str, str]:
    """Wait for a CLI process; kill it (and fail) if it outlives ``timeout``."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"p2pboost did not finish in {timeout} s:\n{err}")
    return proc.returncode, out, err
