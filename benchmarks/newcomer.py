"""A newcomer's first day, scripted: ``python -m benchmarks newcomer [--skip-slow] [--keep DIR]``.

What a new user does in the first hour, each step as its own process on this machine, timed:

1. the README's two commands' equivalent in the current environment (``p2pboost demo``; the
   install is the environment this runs in, so it is not repeated);
2. the simulation tutorial (``docs/tutorial/simulate.md``) saved as a script and run by a fresh
   interpreter;
3. the two-laptops example, as its test runs it (``tests/test_examples.py::test_two_laptops``);
4. ``p2pboost init`` (a guest and one host), then the README's training commands, its scoring
   commands, ``report`` for both parties and ``inspect``;
5. the mistakes a newcomer makes, each asserted to be answered within 10 s on the side that
   can know, and within ``node.reconnect_timeout`` + 5 s on the side that cannot, with a
   message that names the cause and the setting or command that fixes it: a host ``predict``
   whose guest never comes, a guest ``predict`` that fails on its own file while its host
   waits, a guest whose certificate comes from another CA, a host that sets the guest's
   ``[train]`` values, parties whose shared settings differ, a report or an ``init`` that
   would overwrite files.

A mistake's time counts from the moment its process is up: the seconds a p2pboost command
takes to start on this machine (the interpreter and imports: ``config check``, measured once
before the mistakes; about 3 s on a loaded 2-core machine) are taken off; the JSON line keeps
the raw times too. It asserts that no file is overwritten (every file ``init`` wrote and every
file training wrote keeps its content to the end, checkpoints excepted) and that the clean runs
log nothing at error level (their logs are read as JSON records). CI does not run it (it takes
minutes); the last line is one JSON object with every step's time (see benchmarks/README.md).
``--skip-slow`` leaves out steps 1 to 3, which other tests cover.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The side of a mistake that can know answers within this many seconds.
KNOWS = 10.0
#: Beyond ``reconnect_timeout``, the side that cannot know answers within this many seconds.
GRACE = 5.0
#: The mistakes' parties wait this long for a peer (``[node] reconnect_timeout``).
WAIT = 4.0
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


@dataclass
class Run:
    """One process: its exit code, output, and seconds from start to exit."""

    code: int
    out: str
    err: str
    seconds: float

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Report:
    steps: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    #: Seconds a p2pboost process takes to start and read its file on this machine now (the
    #: interpreter and imports), taken off the mistakes' times: a party answers once it runs.
    startup: float = 0.0
    #: Each mistake: seconds from the process's start, and the message it ended with.
    answers: dict[str, dict[str, object]] = field(default_factory=dict)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)
            print(f"  FAIL {what}", flush=True)


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _start(args: Sequence[str], cwd: Path) -> tuple[subprocess.Popen[str], float]:
    cmd = [sys.executable, *args] if args[0].endswith(".py") or args[0] == "-m" else None
    if cmd is None:  # a p2pboost command
        cmd = [sys.executable, "-m", "p2pboost.app.cli", *args]
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, time.monotonic()


def _wait(started: tuple[subprocess.Popen[str], float], timeout: float = 600.0) -> Run:
    proc, t0 = started
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return Run(-9, out, err + f"\n(killed after {timeout:.0f} s)", time.monotonic() - t0)
    return Run(proc.returncode, out, err, time.monotonic() - t0)


def _run(args: Sequence[str], cwd: Path, timeout: float = 600.0) -> Run:
    return _wait(_start(args, cwd), timeout)


def _together(commands: Sequence[Sequence[str]], cwd: Path, timeout: float = 600.0) -> list[Run]:
    """Start every command (in order, a moment apart, as a person in terminals); wait for all."""
    started = []
    for args in commands:
        started.append(_start(args, cwd))
        time.sleep(0.3)
    return [_wait(s, timeout) for s in started]


def _error_records(run: Run) -> list[str]:
    """Error-level lines of a run logged as JSON records (``--log-format json``)."""
    bad = []
    for line in run.err.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            bad.append(f"not a JSON record: {line}")
            continue
        if isinstance(record, dict) and record.get("level") in ("error", "critical"):
            bad.append(line)
    return bad


def _files(directory: Path) -> dict[Path, str]:
    """Every file under ``directory`` and a digest of its content (checkpoints left out)."""
    return {
        p: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and "checkpoints" not in p.parts
    }


def _free_base(count: int) -> int:
    """A first port of ``count`` free consecutive ports (tiny reuse race accepted)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            base: int = sock.getsockname()[1]
        if base + count < 65535 and all(_free(base + i) for i in range(1, count)):
            return base
    raise RuntimeError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _timed(report: Report, name: str, step: Callable[[], None]) -> None:
    print(f"{name} ...", flush=True)
    t0 = time.monotonic()
    step()
    report.steps[name] = round(time.monotonic() - t0, 1)
    print(f"{name}: {report.steps[name]:.1f} s", flush=True)


# -- steps 1 to 3: what other tests cover, run as a newcomer would -----------------------------


def _demo(report: Report, tmp: Path) -> None:
    run = _run(["--log-format", "json", "demo"], tmp)
    report.check(run.code == 0, f"demo exits 0 ({run.err[-2000:]})")
    report.check(not _error_records(run), f"demo logs no error: {_error_records(run)[:3]}")


def _tutorial(report: Report, tmp: Path) -> None:
    page = (ROOT / "docs" / "tutorial" / "simulate.md").read_text(encoding="utf-8")
    script = tmp / "simulate_demo.py"
    script.write_text("\n".join(_PYTHON_BLOCK.findall(page)), encoding="utf-8")
    run = _run([str(script)], tmp)
    report.check(run.code == 0, f"the tutorial runs as a script ({run.err[-2000:]})")
    report.check("vertical AUC 0.9" in run.out, "the tutorial prints its vertical AUC")


def _two_laptops(report: Report, tmp: Path) -> None:
    test = "tests/test_examples.py::test_two_laptops"
    run = _run(["-m", "pytest", test, "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp)], ROOT)
    report.check(run.code == 0, f"the two-laptops example runs ({run.out[-2000:]})")


# -- step 4: init, train, predict, report -------------------------------------------------------


def _readme_commands(fed: Path, verb: str) -> list[list[str]]:
    readme = (fed / "README.md").read_text(encoding="utf-8")
    found = re.findall(r"`p2pboost (" + verb + r" --config \S+)`", readme)
    return [["--log-format", "json", *c.split()] for c in found]


def _init_flow(report: Report, fed: Path, port: int) -> dict[Path, str]:
    args = ["init", str(fed), "--guest", "bank", "--hosts", "telco", "--trees", "4"]
    run = _run([*args, "--key-bits", "1024", "--port", str(port)], fed.parent)
    report.check(run.code == 0, f"init exits 0 ({run.err})")
    written = _files(fed)
    clean: list[Run] = []
    trained = _together(_readme_commands(fed, "party"), fed)
    clean += trained
    report.check(all(r.code == 0 for r in trained), "the README's training commands run")
    summary = json.loads(trained[-1].out.strip().splitlines()[-1]) if trained[-1].out else {}
    report.check("validation" in summary, "the guest compares itself with a guest-only model")
    after_training = _files(fed)
    scored = _together(_readme_commands(fed, "predict"), fed)
    clean += scored
    report.check(all(r.code == 0 for r in scored), "the README's scoring commands run")
    result = json.loads(scored[-1].out.strip().splitlines()[-1]) if scored[-1].out else {}
    held = len((fed / "bank-holdout.csv").read_text().splitlines()) - 1
    report.check(result.get("rows") == held, f"predict scores the {held} held-out rows: {result}")
    for party in ("bank", "telco"):
        run = _run(["report", f"out-{party}/model.json"], fed)
        report.check(run.code == 0, f"report for {party} ({run.err})")
    inspect = _run(["inspect", "out-bank/model.json"], fed)
    report.check("gain share" in inspect.out and "guest-only" in inspect.out, "inspect's lift")
    for run in clean:
        report.check(not _error_records(run), f"a clean run logs no error: {_error_records(run)}")
    final = _files(fed)
    for path, digest in {**written, **after_training}.items():
        report.check(final.get(path) == digest, f"{path} is not overwritten")
    return final


# -- step 5: the mistakes -----------------------------------------------------------------------


def _variant(fed: Path, party: str, name: str, edit: Callable[[str], str]) -> str:
    """A copy of ``party``'s file (its model, its workdir) with a short wait and ``edit``."""
    text = (fed / f"{party}.toml").read_text(encoding="utf-8")
    text += f"\n[node]\nreconnect_timeout = {WAIT}\nconnect_timeout = 1.0\n"
    path = fed / f"{name}.toml"
    path.write_text(edit(text), encoding="utf-8")
    return path.name


def _answered(
    report: Report, what: str, run: Run, within: float, *needles: str, code: int = 1
) -> None:
    text = " ".join(run.text.split())
    net = run.seconds - report.startup
    report.check(run.code == code, f"{what}: exit {run.code}, wanted {code}: {text[-600:]}")
    report.check(net <= within, f"{what}: answered {net:.1f} s after start-up > {within} s")
    for needle in needles:
        report.check(needle in text, f"{what}: the message names {needle!r}: {text[-800:]}")
    said = [line for line in run.text.splitlines() if line.strip()]
    last = said[-1] if said else ""
    report.answers[what] = {"seconds": round(run.seconds, 1), "message": last}
    print(f"  {what}: {run.seconds:.1f} s ({net:.1f} s after start-up)\n    {last}", flush=True)


def _mistakes(report: Report, fed: Path, port: int) -> None:
    late = WAIT + GRACE
    report.startup = _run(["config", "check", "bank.toml"], fed).seconds
    # a host predict whose guest never comes: it cannot know why; it stops after its wait
    host = _variant(fed, "telco", "m-host-alone", lambda t: t)
    run = _run(["predict", "--config", host], fed)
    _answered(report, "host predict without guest", run, late, "reconnect_timeout")
    # the guest's predict fails on its own file; the host, waiting, hears nothing and stops
    bad = fed / "bank-bad.csv"
    lines = (fed / "bank-holdout.csv").read_text().splitlines()
    bad.write_text("\n".join(",".join(r.split(",")[:-1]) for r in lines) + "\n")
    guest = _variant(fed, "bank", "m-guest-bad", lambda t: t.replace("bank-holdout", "bank-bad"))
    h, g = _together([["predict", "--config", host], ["predict", "--config", guest]], fed)
    _answered(report, "guest predict on a file without a column", g, KNOWS, "g9", "missing")
    _answered(report, "its host, waiting", h, late, "reconnect_timeout")
    # a guest whose certificate comes from another CA
    from p2pboost import certs

    certs.init(fed / "other-ca", ["bank"])
    guest = _variant(
        fed, "bank", "m-guest-ca", lambda t: t.replace('"certs/bank"', '"other-ca/bank"')
    )
    h, g = _together([["party", "--config", host], ["party", "--config", guest]], fed)
    _answered(report, "guest with another CA's certificate", g, KNOWS, "CA", "certs")
    _answered(report, "the host it dialled", h, late, "refused a TLS handshake")
    # a host that sets the guest's [train] values: refused naming the guest as their owner
    host_train = _variant(fed, "telco", "m-host-train", lambda t: t + "\n[train]\nmax_depth = 6\n")
    run = _run(["config", "check", host_train], fed)
    _answered(report, "host [train] values", run, KNOWS, "max_depth", "guest")
    # shared settings that differ: both sides know at once
    guest = _variant(
        fed, "bank", "m-guest-psi", lambda t: t.replace("[train]", "[train]\npsi = false")
    )
    h, g = _together([["party", "--config", host], ["party", "--config", guest]], fed)
    for who, run in (("guest", g), ("host", h)):
        _answered(report, f"psi differs ({who})", run, KNOWS, "train.psi", "the same")
    # overwrites: report again, init again
    run = _run(["report", "out-bank/model.json"], fed)
    _answered(report, "report over existing plots", run, KNOWS, "already exists", "--force")
    run = _run(["init", str(fed), "--guest", "bank", "--hosts", "telco"], fed.parent)
    _answered(report, "init into a full directory", run, KNOWS, "not empty", "--force")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks newcomer")
    parser.add_argument(
        "--skip-slow", action="store_true", help="leave out demo, tutorial, example"
    )
    parser.add_argument("--keep", type=Path, help="work in DIR (kept) instead of a temporary one")
    args = parser.parse_args(argv)
    report = Report()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        if not args.skip_slow:
            _timed(report, "demo", lambda: _demo(report, tmp))
            _timed(report, "tutorial", lambda: _tutorial(report, tmp))
            _timed(report, "two_laptops", lambda: _two_laptops(report, tmp / "example"))
        fed, port = tmp / "fed", _free_base(2)
        if fed.exists():
            shutil.rmtree(fed)
        kept: dict[Path, str] = {}
        _timed(
            report, "init_train_predict_report", lambda: kept.update(_init_flow(report, fed, port))
        )
        _timed(report, "mistakes", lambda: _mistakes(report, fed, port))
        for path, digest in kept.items():  # the mistakes overwrote nothing either
            report.check(_files(fed).get(path) == digest, f"{path} kept through the mistakes")
    total = round(time.monotonic() - t0, 1)
    print(f"{len(report.failures)} failure(s) in {total:.1f} s")
    result = {"benchmark": "newcomer", "seconds": total, "steps": report.steps}
    result |= {"startup": round(report.startup, 1), "answers": report.answers}
    print(json.dumps(result | {"failures": report.failures}))
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
