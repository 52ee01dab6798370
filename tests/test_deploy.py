"""The service recipe (deploy/, docs/how-to/run-as-a-service.md), tested without containers.

No container runtime runs here, so the image is not built: its Dockerfile's instructions are
checked instead, the systemd unit is parsed (and verified by ``systemd-analyze`` where it
exists), and the how-to's commands that prepare the parties' directories run verbatim; the
parties then train and predict as the unit runs them, and their probe ports are read.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from p2pboost.app.cli import main
from p2pboost.app.config import load_config
from tests.cli.conftest import finish, free_port
from tests.test_examples import EXAMPLES, _generated, _rewrite, _run_script

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
UNIT = ROOT / "deploy" / "p2pboost-party@.service"
HOWTO = ROOT / "docs" / "how-to" / "run-as-a-service.md"
_BASH = re.compile(r"```bash\n(.*?)```", re.DOTALL)


def instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions: (KEYWORD, arguments), continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            out.append((keyword.upper(), " ".join(args.split())))
    return out


def test_the_image_is_slim_non_root_and_takes_the_extras_as_an_argument() -> None:
    steps = instructions(DOCKERFILE.read_text())
    keywords = [k for k, _ in steps]
    bases = [a for k, a in steps if k == "FROM"]
    assert len(bases) == 2
    assert all(re.match(r"python:\$\{PYTHON_VERSION\}-slim\b", b) for b in bases), bases
    user = [a for k, a in steps if k == "USER"]
    assert user, "no USER: the party would run as root"
    uid, _, gid = user[-1].partition(":")
    assert uid.isdigit(), user
    assert int(uid) > 0, user
    assert gid.isdigit(), user
    assert int(gid) > 0, user
    last_user = len(keywords) - 1 - keywords[::-1].index("USER")
    assert "RUN" not in keywords[last_user:]  # nothing runs as root after it
    assert "ADD" not in keywords
    assert ("ENTRYPOINT", '["p2pboost"]') in steps
    extras = next(a for k, a in steps if k == "ARG" and a.startswith("EXTRAS="))
    default = extras.split("=", 1)[1]
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(default.split(",")) <= set(declared["optional-dependencies"]), default
    install = next(a for k, a in steps if k == "RUN" and "pip install" in a)
    spec = re.search(r'"(\.\$\{EXTRAS:\+\[\$EXTRAS\]\})"', install)
    assert spec is not None, install
    for value, expected in (("metrics,parquet", ".[metrics,parquet]"), ("", ".")):
        shell = subprocess.run(
            ["sh", "-c", f'echo "{spec.group(1)}"'],
            env={"EXTRAS": value},
            capture_output=True,
            text=True,
            check=True,
        )
        assert shell.stdout.strip() == expected
    for k, a in steps:
        if k == "COPY" and not a.startswith("--from"):
            *sources, _ = a.split()
            missing = [s for s in sources if not (ROOT / s).exists()]
            assert not missing, f"COPY of files the repository lacks: {missing}"


def test_keys_and_data_stay_out_of_the_build_context() -> None:
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for pattern in ("**/certs", "**/*.pem", "**/*.csv", "**/out-*", ".git"):
        assert pattern in ignored, pattern


def _unit() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    assert set(parser.sections()) == {"Unit", "Service", "Install"}
    return parser["Service"]


def test_the_unit_runs_the_files_task_as_an_unprivileged_user() -> None:
    service = _unit()
    assert service["User"] == service["Group"] == "p2pboost"
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == "/opt/p2pboost/bin/p2pboost"
    assert argv[1:] == ["--log-format", "json", "party", "--config", "%i.toml"]
    assert service["WorkingDirectory"] == "/var/lib/p2pboost/%i"
    assert service["KillSignal"] == "SIGTERM"
    assert "143" in service["SuccessExitStatus"].split()  # a clean stop is a success
    assert service["Restart"] == "on-failure"
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["CapabilityBoundingSet"] == ""


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """Verified as an instance, with a user and an executable that exist on this machine
    (verify checks both); any warning fails the test."""
    import grp
    import os
    import pwd

    text = UNIT.read_text()
    text = text.replace("/opt/p2pboost/bin/p2pboost", str(Path(sys.executable).parent / "p2pboost"))
    text = text.replace("User=p2pboost", f"User={pwd.getpwuid(os.getuid()).pw_name}")
    text = text.replace("Group=p2pboost", f"Group={grp.getgrgid(os.getgid()).gr_name}")
    unit = tmp_path / "p2pboost-party@host.service"
    unit.write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr


# -- the walk-through -------------------------------------------------------------------------


def _block_after(heading: str) -> str:
    """The first bash block after ``heading`` in the how-to."""
    text = HOWTO.read_text()
    start = text.index(heading)
    found = _BASH.search(text, start)
    assert found is not None
    return found.group(1)


def _as_the_unit_runs(party: str, directory: Path) -> subprocess.Popen[str]:
    """The unit's ExecStart for instance ``party``, in its WorkingDirectory."""
    argv = shlex.split(_unit()["ExecStart"].replace("%i", party))
    return subprocess.Popen(
        [sys.executable, "-m", "p2pboost.app.cli", *argv[1:]],
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _records(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait_for_probe(url: str) -> None:
    for _ in range(300):
        try:
            _get(url)
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"no probe at {url}")


def _clean(records: list[dict[str, Any]], who: str) -> None:
    bad = [r for r in records if r["level"] in ("error", "critical")]
    assert not bad, f"{who}: error-level records on a clean run: {bad}"


@pytest.mark.slow
def test_the_two_laptops_example_runs_as_two_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    example = tmp_path / "two-laptops"
    shutil.copytree(EXAMPLES / "two-laptops", example, ignore=_generated)
    monkeypatch.chdir(example)
    _run_script(example / "make_data.py", ["guest"])
    _run_script(example / "make_data.py", ["host"])
    assert main(["certs", "init", "--out", "certs", "--parties", "guest,host"]) == 0
    ports = {"8444": free_port()}
    for name in ("guest.toml", "host.toml"):
        _rewrite(example / name, ports)  # a free port, small keys, three trees
    capsys.readouterr()

    prepare = _block_after("## Prepare the two parties' directories")
    subprocess.run(["bash", "-euo", "pipefail", "-c", prepare], cwd=example, check=True)
    parties = {p: example / "parties" / p for p in ("guest", "host")}
    probes = {"guest": free_port(), "host": free_port()}
    for party, directory in parties.items():
        toml = directory / f"{party}.toml"
        text = toml.read_text().replace('"127.0.0.1:9464"', f'"127.0.0.1:{probes["guest"]}"')
        toml.write_text(text.replace('"127.0.0.1:9465"', f'"127.0.0.1:{probes["host"]}"'))
        config = load_config(toml)
        assert config.serve.probe == f"127.0.0.1:{probes[party]}"
        assert config.data is not None
        assert config.data.path.parent == directory
        assert (directory / "certs" / party / "key.pem").exists()
        assert not list(directory.rglob("ca-key.pem"))  # the CA's key stays with its holder
    assert not (parties["guest"] / "host.csv").exists()
    assert not (parties["host"] / "guest.csv").exists()

    # Train: the host's service, then the guest's.
    host = _as_the_unit_runs("host", parties["host"])
    guest = _as_the_unit_runs("guest", parties["guest"])
    (h_code, _, h_err), (g_code, g_out, g_err) = finish(host), finish(guest)
    assert (h_code, g_code) == (0, 0), h_err + g_err
    host_records, guest_records = _records(h_err), _records(g_err)
    _clean(host_records, "host")
    _clean(guest_records, "guest")
    host_trees = [r for r in host_records if r.get("progress") == "training"]
    assert [(r["done"], r["total"]) for r in host_trees][-1] == (3, 3)
    psi = [r for r in guest_records if r.get("progress") == "PSI"]
    assert psi, "no PSI progress record"
    assert (psi[-1]["done"], psi[-1]["eta_s"]) == (psi[-1]["total"], 0.0)
    assert json.loads(g_out.splitlines()[-1])["trees"] == 3

    # Predict: the same unit, with task = "predict" in both files.
    for party, directory in parties.items():
        toml = directory / f"{party}.toml"
        toml.write_text(toml.read_text().replace('task = "train"', 'task = "predict"'))
    host = _as_the_unit_runs("host", parties["host"])
    probe = f"http://127.0.0.1:{probes['host']}"
    _wait_for_probe(probe + "/healthz")
    assert _get(probe + "/healthz") == (200, '{"status": "ok"}\n')
    waiting = _get(probe + "/readyz")
    status, text = _get(probe + "/metrics")
    assert status == 200
    families = {f.name for f in text_string_to_metric_families(text)}
    assert {"p2pboost_node_peer_up", "p2pboost_node_sent_bytes"} <= families
    guest = _as_the_unit_runs("guest", parties["guest"])
    (h_code, _, h_err), (g_code, g_out, g_err) = finish(host), finish(guest)
    assert (h_code, g_code) == (0, 0), h_err + g_err
    assert waiting[0] == 503  # the guest had not started
    assert json.loads(waiting[1]) == {"status": "waiting", "guest": "guest"}
    _clean(_records(h_err), "host")
    _clean(_records(g_err), "guest")
    assert json.loads(g_out.splitlines()[-1])["scored"] == 190
