"""Every command-line example runs as its README says, on loopback, with real mutual TLS.

Each example directory is copied to a temporary directory and its README's commands are run
there, in order, as a user would copy-paste them: the parties as separate processes (one
"terminal" each), the short commands (certificates, data, inspect, report) in this process to
save interpreter start-ups. The test fails if a README command it runs is no longer in the
README, or if the README gains a command the test does not run. Only the TOML files are
adjusted: free ports instead of the fixed ones, 1024-bit Paillier keys (with the explicit
insecure opt-in), three trees and short timeouts, so the whole file stays well under a minute.
"""

from __future__ import annotations

import csv
import json
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from p2pboost.app.cli import main
from p2pboost.app.model_info import describe
from tests.cli.conftest import finish, free_port, write_config

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
#: What the test changes in every [train] table: small and fast.
FAST_TRAIN = {"n_estimators": 3, "key_bits": 1024, "insecure_key_bits": True}
#: Lines of the install block: run by CI on a fresh machine, not here.
_SETUP = ("python3 -m venv", "source ", "cd examples/")
_CODE_BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)
_PORT = re.compile(r"127\.0\.0\.1:(\d+)")


class Example:
    """One example directory, copied to ``workdir``, driven by its README's commands."""

    def __init__(self, name: str, workdir: Path) -> None:
        source = EXAMPLES / name
        self.dir = workdir / name
        shutil.copytree(source, self.dir, ignore=_generated)
        readme = (source / "README.md").read_text(encoding="utf-8")
        self.commands = [
            line.strip()
            for block in _CODE_BLOCK.findall(readme)
            for line in block.splitlines()
            if line.strip() and not line.strip().startswith(_SETUP)
        ]
        self.done: set[str] = set()
        self.ports: dict[str, int] = {}

    # -- the README's commands ----------------------------------------------------------------

    def _take(self, command: str) -> list[str]:
        assert command in self.commands, f"not a command of the README: {command}"
        self.done.add(command)
        return shlex.split(command)

    def run(self, command: str, capsys: pytest.CaptureFixture[str]) -> str:
        """A short command, in this process (cwd is the example's directory); its stdout."""
        args = self._take(command)
        capsys.readouterr()
        if args[0] == "p2pboost":
            assert main(args[1:]) == 0, capsys.readouterr().err
        elif args[0] == "python":
            _run_script(self.dir / args[1], args[2:])
        elif args[0] == "cp":
            shutil.copy(self.dir / args[1], self.dir / args[2])
        else:
            pytest.fail(f"the test does not know how to run {command!r}")
        return capsys.readouterr().out

    def start(self, command: str) -> subprocess.Popen[str]:
        """A party in its own process, as in its own terminal."""
        args = self._take(command)
        assert args[0] == "p2pboost", command
        return subprocess.Popen(
            [sys.executable, "-m", "p2pboost.app.cli", *args[1:]],
            cwd=self.dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def together(self, *commands: str) -> dict[str, dict[str, Any]]:
        """Start the parties (listeners first), wait for all; each one's last JSON line."""
        procs = [self.start(c) for c in commands]
        results = [finish(p, timeout=60.0) for p in procs]
        errors = "\n".join(
            f"--- {c}\n{err}" for c, (_, _, err) in zip(commands, results, strict=True)
        )
        assert [code for code, _, _ in results] == [0] * len(procs), errors
        lines = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in results]
        return {line["party"]: line for line in lines}

    def all_done(self) -> None:
        missing = [c for c in self.commands if c not in self.done]
        assert not missing, f"README commands the test does not run: {missing}"

    # -- the adjusted configuration ------------------------------------------------------------

    def make_fast(self) -> None:
        """Free ports, small keys and few trees in every TOML file of the copy."""
        for path in sorted(self.dir.glob("*.toml")):
            self.ports.update(dict.fromkeys(_PORT.findall(path.read_text()), 0))
        self.ports = {p: free_port() for p in self.ports}
        for path in sorted(self.dir.glob("*.toml")):
            _rewrite(path, self.ports)


def _generated(directory: str, names: list[str]) -> list[str]:
    """What the commands write: never copied from a developer's run of the example."""
    return [n for n in names if n.endswith(".csv") or n == "certs" or n.startswith("out-")]


def _run_script(path: Path, argv: list[str]) -> None:
    old = sys.argv
    sys.argv = [str(path), *argv]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = old


def _rewrite(path: Path, ports: Mapping[str, int]) -> None:
    config = tomllib.loads(path.read_text())

    def port(address: str) -> str:
        return _PORT.sub(lambda m: f"127.0.0.1:{ports[m.group(1)]}", address)

    if "listen" in config:
        config["listen"] = port(config["listen"])
    config["peers"] = {peer: port(address) for peer, address in config["peers"].items()}
    train = config.setdefault("train", {})
    if config["role"] == "guest":
        train.update(FAST_TRAIN)
    elif config["role"] != "host":
        train["n_estimators"] = FAST_TRAIN["n_estimators"]
    config["node"] = {**config.get("node", {}), "reconnect_timeout": 30.0, "connect_timeout": 2.0}
    top = {k: v for k, v in config.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in config.items() if isinstance(v, dict)}
    write_config(path, top, **tables)


def _ids(path: Path) -> list[str]:
    with path.open(newline="") as fh:
        return [row["id"] for row in csv.DictReader(fh)]


def _example(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Example:
    example = Example(name, tmp_path)
    monkeypatch.chdir(example.dir)
    return example


# -- the examples -----------------------------------------------------------------------------


def test_two_laptops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = _example("two-laptops", tmp_path, monkeypatch)
    ex.run("python make_data.py guest", capsys)
    ex.run("python make_data.py host", capsys)
    # Certificates: the host's key stays with the host; the CA holder signs its request.
    ex.run("p2pboost certs init --out certs --parties guest", capsys)
    ex.run("p2pboost certs request --party host --out certs/host", capsys)
    ex.run(
        "p2pboost certs sign --ca certs/ca --csr certs/host/host.csr --party host "
        "--out certs/host/cert.pem",
        capsys,
    )
    ex.run("cp certs/ca/ca.pem certs/host/ca.pem", capsys)
    assert sorted(p.name for p in (ex.dir / "certs" / "host").iterdir()) == [
        "ca.pem",
        "cert.pem",
        "host.csr",
        "key.pem",
    ]
    ex.make_fast()
    audit = ex.run("p2pboost audit guest.toml host.toml", capsys)  # before any training
    assert "359 aligned rows" in audit
    assert "[STAND-IN]" not in audit  # on one machine both files are there

    trained = ex.together("p2pboost party --config host.toml", "p2pboost party --config guest.toml")
    assert trained["guest"]["rows"] == trained["host"]["rows"] == 359  # as the README says
    assert trained["guest"]["trees"] == 3
    guest_ids = _ids(ex.dir / "out-guest" / "intersection.csv")
    assert guest_ids == _ids(ex.dir / "out-host" / "intersection.csv")

    scored = ex.together(
        "p2pboost predict --config host.toml", "p2pboost predict --config guest.toml"
    )
    assert scored["guest"]["scored"] == scored["guest"]["rows"] == 190
    assert scored["guest"]["auc"] > 0.95
    assert _ids(ex.dir / "out-guest" / "predictions.csv") == _ids(ex.dir / "guest_test.csv")

    guest_text = ex.run("p2pboost inspect out-guest/model.json", capsys)
    assert "guest's part" in guest_text
    assert "hosts         host" in guest_text
    host_text = ex.run("p2pboost inspect out-host/model.json", capsys)
    assert "a host's part" in host_text
    assert describe(ex.dir / "out-host" / "model.json")["fingerprint"] in guest_text
    plots = ex.run("p2pboost report out-guest/model.json --out out-guest/report", capsys)
    names = sorted(Path(line).name for line in plots.split())
    assert names == ["model_contribution.png", "model_importance.png", "model_learning_curve.png"]
    ex.all_done()


def test_three_parties(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = _example("three-parties", tmp_path, monkeypatch)
    ex.run("python make_data.py", capsys)
    ex.run("p2pboost certs init --out certs --parties guest,host-a,host-b", capsys)
    ex.make_fast()

    trained = ex.together(
        "p2pboost party --config host-a.toml",
        "p2pboost party --config host-b.toml",
        "p2pboost party --config guest.toml",
    )
    assert {r["rows"] for r in trained.values()} == {350}  # as the README says
    scored = ex.together(
        "p2pboost predict --config host-a.toml",
        "p2pboost predict --config host-b.toml",
        "p2pboost predict --config guest.toml",
    )
    assert scored["guest"]["scored"] == 190
    assert scored["guest"]["auc"] > 0.95

    guest = ex.run("p2pboost inspect out-guest/model.json", capsys)
    assert "hosts         host-a, host-b" in guest
    ex.run("p2pboost inspect out-host-a/model.json", capsys)
    ex.run("p2pboost report out-guest/model.json --out out-guest/report", capsys)
    d = describe(ex.dir / "out-guest" / "model.json")
    own = [
        describe(ex.dir / f"out-{h}" / "model.json")["splits"]["own"] for h in d["parties"]["hosts"]
    ]
    assert [d["splits"][h] for h in d["parties"]["hosts"]] == own
    ex.all_done()


def test_homo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = _example("homo", tmp_path, monkeypatch)
    ex.run("python make_data.py", capsys)
    ex.run("p2pboost certs init --out certs --parties server,clinic-a,clinic-b,clinic-c", capsys)
    ex.make_fast()

    trained = ex.together(
        "p2pboost party --config server.toml",
        "p2pboost party --config clinic-a.toml",
        "p2pboost party --config clinic-b.toml",
        "p2pboost party --config clinic-c.toml",
    )
    assert trained["server"]["trees"] == 3
    models = {p: json.loads((ex.dir / f"out-{p}" / "model.json").read_text()) for p in trained}
    clients = {json.dumps(m, sort_keys=True) for p, m in models.items() if p != "server"}
    assert len(clients) == 1  # every client holds the same model
    for model in models.values():  # the server's too, but for the covers and gains it keeps
        for tree in model["trees"]:
            assert any(tree.pop("cover")) == any(tree.pop("gain")) == (model is models["server"])
    assert len({json.dumps(m, sort_keys=True) for m in models.values()}) == 1

    out = ex.run("p2pboost predict --config clinic-a.toml", capsys)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["scored"] == result["rows"] == len(_ids(ex.dir / "clinic-a_test.csv"))
    assert result["auc"] > 0.95
    assert "complete boosting model" in ex.run("p2pboost inspect out-clinic-a/model.json", capsys)
    ex.run("p2pboost report out-clinic-a/model.json --out out-clinic-a/report", capsys)
    assert (ex.dir / "out-clinic-a" / "report" / "model_importance.png").is_file()
    ex.all_done()


@pytest.mark.parametrize(
    "path", sorted(EXAMPLES.glob("*/*.toml")), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_shipped_configs_are_valid_and_secure(path: Path) -> None:
    """As shipped (before the test's fast rewrite): valid, 2048-bit keys, no insecure opt-in."""
    from p2pboost.app.config import load_config

    config = load_config(path)
    assert config.train.key_bits >= 2048
    assert not config.train.insecure_key_bits
    assert config.certs.parent == path.parent / "certs"
