"""The credit-scoring how-to (docs/how-to/credit-scoring.md) runs as written.

Every ``console`` block of the page is run in order: ``$`` lines in the working directory,
``telco$`` and ``bank$`` lines in the federation's directory, the telco's commands started
first and in the background (a host waits for the bank), the bank's one after the other. Each
``toml`` block is merged into the file its first line names (keys under a table the file
already has go under that table). The outputs the page promises are then checked.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app import config as app_config
from tests.cli.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
HOWTO = ROOT / "docs" / "how-to" / "credit-scoring.md"
#: Vertical monotone constraints in the party files (the host's own key) are supported here.
_BLOCK = re.compile(r"```(console|toml)\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(HOWTO.read_text())]


def merge_toml(path: Path, snippet: str) -> None:
    """Merge ``snippet``'s tables into ``path``: keys under an existing table go right after
    its header, new tables are appended."""
    lines = path.read_text().splitlines()
    table: str | None = None
    for line in snippet.splitlines()[1:]:
        if not line.strip():
            continue
        if line.startswith("["):
            table = line.strip()
            if table not in lines:
                lines += ["", table]
            continue
        assert table is not None, snippet
        lines.insert(lines.index(table) + 1, line)
    path.write_text("\n".join(lines) + "\n")


#: The parties run from the federation's directory: this source tree first on their path.
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def _cli(command: str) -> list[str]:
    words = shlex.split(command)
    if words[0] == "p2pboost":
        return [sys.executable, "-m", "p2pboost.app.cli", "--quiet", *words[1:]]
    return words


def run_block(text: str, root: Path, fed: Path, port: int) -> None:
    commands = [line for line in text.splitlines() if line.strip()]
    background: list[subprocess.Popen[str]] = []
    try:
        for line in commands:
            who, _, command = line.partition("$ ")
            command = command.replace("--port 8443", f"--port {port}")
            if who == "telco":
                background.append(
                    subprocess.Popen(
                        _cli(command),
                        cwd=fed,
                        env=ENV,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
                continue
            cwd = root if who == "" else fed
            done = subprocess.run(
                _cli(command), cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, f"{line}\n{done.stderr}"
        for proc in background:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
    finally:
        for proc in background:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_the_credit_scoring_howto_runs(tmp_path: Path) -> None:
    fed = tmp_path / "credit"
    port = free_port()
    for kind, text in blocks():
        if kind == "toml":
            merge_toml(fed / text.splitlines()[0].removeprefix("# ").strip(), text)
        else:
            run_block(text, tmp_path, fed, port)
    # IV: the bank's table covers both parties; the telco sees only its own kept names.
    result = json.loads((fed / "out-bank" / "binning.json").read_text())
    assert result
    assert (fed / "out-telco" / "binning.json").exists()
    # Explanations: contributions add up to the margin; telco players are tokens.
    explained = _rows(fed / "out-bank" / "explanations.csv")
    scores = {r["id"]: float(r["score"]) for r in _rows(fed / "out-bank" / "predictions.csv")}
    columns = list(explained[0])
    players = columns[1 : columns.index("base_value") + 1]
    assert [c for c in columns if c.startswith("reason_")] == [
        "reason_1",
        "reason_1_value",
        "reason_2",
        "reason_2_value",
        "reason_3",
        "reason_3_value",
    ]
    tokens = {r["column"]: r["feature"] for r in _rows(fed / "out-telco" / "feature_tokens.csv")}
    assert tokens
    assert {p for p in players if p.startswith("telco:")} == set(tokens)
    assert all(f.startswith("telco_") for f in tokens.values())
    for row in explained:
        margin = sum(float(row[p]) for p in players)
        np.testing.assert_allclose(1 / (1 + np.exp(-margin)), scores[row["id"]], atol=1e-9)
    # Monitoring: the training file against itself is stable; the report drew it.
    stability = json.loads((fed / "out-bank" / "stability.json").read_text())
    assert stability["score"]["psi"] == pytest.approx(0.0, abs=1e-12)
    assert (fed / "report" / "model_stability.png").exists()


def test_monotone_keys_of_the_howto_load(tmp_path: Path) -> None:
    """Both party files of the page, with its monotone blocks, are accepted."""
    fed = tmp_path / "credit"
    subprocess.run(
        _cli("p2pboost init credit --guest bank --hosts telco --key-bits 1024"),
        cwd=tmp_path,
        env=ENV,
        check=True,
        capture_output=True,
    )
    for kind, text in blocks():
        if kind == "toml" and "monotone_constraints" in text:
            merge_toml(fed / text.splitlines()[0].removeprefix("# ").strip(), text)
    for party in ("bank", "telco"):
        app_config.load_config(fed / f"{party}.toml")
