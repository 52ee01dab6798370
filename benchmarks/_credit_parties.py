"""The ``credit`` benchmark's federation: a bank (guest) and a telco (host), each a ``p2pboost``
command in a process of its own, over loopback WebSocket + mutual TLS, exactly as the
credit-scoring how-to runs them (``docs/how-to/credit-scoring.md``).

:class:`CreditFederation` writes a throw-away CA, both party files and each party's CSVs
(training rows, held-out rows, and a shifted copy of the held-out rows) into a temporary
directory, and runs one step at a time: the telco's command started first (it waits for the
bank), then the bank's; both must succeed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from p2pboost import certs
from p2pboost.app.scaffold import write_toml

__all__ = ["BANK", "TELCO", "CreditFederation", "write_party_csv"]

BANK = "bank"
TELCO = "telco"
ROOT = Path(__file__).resolve().parent.parent
#: The longest one step may take (seconds): training 30,000 rows on 2 cores stays well below.
STEP_TIMEOUT = 3600.0


class _Drain:
    """Read a process's stdout and stderr to the end in threads (no pipe ever fills)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.out = self.err = ""
        self._threads = [
            threading.Thread(target=self._read, args=(proc.stdout, "out"), daemon=True),
            threading.Thread(target=self._read, args=(proc.stderr, "err"), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self, stream: IO[str] | None, name: str) -> None:
        if stream is not None:
            with stream:
                setattr(self, name, stream.read())

    def join(self) -> None:
        for t in self._threads:
            t.join()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_party_csv(
    path: Path, ids: np.ndarray, X: np.ndarray, names: Sequence[str], y: np.ndarray | None = None
) -> Path:
    """``id[,y],features...`` with floats written exactly (``repr``)."""
    header = ["id", *(["y"] if y is not None else []), *names]
    lines = [",".join(header)]
    for i, row in enumerate(X.tolist()):
        head = [str(int(ids[i]))] + ([str(int(y[i]))] if y is not None else [])
        lines.append(",".join(head + [repr(float(v)) for v in row]))
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class CreditFederation:
    """Both parties' files in ``directory`` (see the module docstring)."""

    directory: Path
    trees: int
    depth: int
    bins: int
    key_bits: int

    def __post_init__(self) -> None:
        certs.init(self.directory / "certs", [BANK, TELCO])
        port = _free_port()
        train = {
            "n_estimators": self.trees,
            "max_depth": self.depth,
            "max_bin": self.bins,
            "learning_rate": 0.3,
            "key_bits": self.key_bits,
            "insecure_key_bits": self.key_bits < 2048,
            "psi": False,  # the files hold the same ids in the same order
        }
        node = {"reconnect_timeout": 120.0, "connect_timeout": 5.0}
        write_toml(
            self.directory / f"{BANK}.toml",
            {
                "id": BANK,
                "role": "guest",
                "certs": str(self.directory / "certs" / BANK),
                "workdir": "out-bank",
            },
            {
                "peers": {TELCO: f"wss://127.0.0.1:{port}"},
                "data": {"path": "bank.csv", "id_column": "id", "label_column": "y"},
                "train": train,
                "predict": {"path": "bank_test.csv"},
                "node": node,
            },
        )
        write_toml(
            self.directory / f"{TELCO}.toml",
            {
                "id": TELCO,
                "role": "host",
                "listen": f"127.0.0.1:{port}",
                "certs": str(self.directory / "certs" / TELCO),
                "workdir": "out-telco",
            },
            {
                "peers": {BANK: ""},
                "data": {"path": "telco.csv", "id_column": "id"},
                "train": {"psi": False},
                "predict": {"path": "telco_test.csv"},
                "node": node,
            },
        )

    def out(self, party: str, name: str) -> Path:
        return self.directory / f"out-{party}" / name

    def set_predict(self, party: str, **keys: Any) -> None:
        """Rewrite ``party``'s ``[predict]`` table with ``keys`` (between steps)."""
        path = self.directory / f"{party}.toml"
        lines = path.read_text().splitlines()
        start = lines.index("[predict]")
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), None)
        end = len(lines) if end is None else end
        body = [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        path.write_text("\n".join([*lines[: start + 1], *body, "", *lines[end:]]) + "\n")

    def step(
        self, bank: Sequence[str], telco: Sequence[str] | None = None
    ) -> tuple[dict[str, Any], float]:
        """Run ``p2pboost BANK_ARGS`` (and ``p2pboost TELCO_ARGS`` beside it, started first);
        the bank's last stdout line (its JSON summary) and the step's wall time."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        cmd = [sys.executable, "-m", "p2pboost.app.cli", "--quiet"]
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(
                [*cmd, *args],
                cwd=self.directory,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for args in ([telco] if telco is not None else []) + [bank]
        ]
        outputs = [_Drain(p) for p in procs]
        try:
            # Whichever fails first stops the step (a party alone would wait for its peer).
            while any(p.poll() is None for p in procs):
                failed = [p for p in procs if p.poll() not in (None, 0)]
                if failed or time.perf_counter() - t0 > STEP_TIMEOUT:
                    break
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            for d in outputs:
                d.join()
        who = ([TELCO] if telco is not None else []) + [BANK]
        # The party that failed by itself (a positive status) first, then one stopped here.
        for p, d, name in sorted(
            zip(procs, outputs, who, strict=True), key=lambda e: (e[0].returncode or 0) < 0
        ):
            if p.returncode != 0:
                raise RuntimeError(f"{name}: p2pboost failed ({p.returncode}):\n{d.err}")
        seconds = time.perf_counter() - t0
        lines = outputs[-1].out.strip().splitlines()
        return (json.loads(lines[-1]) if lines else {}), seconds
