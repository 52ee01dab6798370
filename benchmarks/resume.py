"""Kill a party mid-training, start it again with ``--resume``: same model, little redone.

``python -m benchmarks resume --dataset default_credit --trees 8 --depth 4 --key-bits 1024
[--kill-after 3 --cases guest,host --bins 32 --data-dir DIR]``

Guest and host are ``p2pboost party`` processes, as operators run them: one config file each
(written to a temporary directory, pointing at ``NAME_hetero_guest.csv`` and
``NAME_hetero_host.csv`` where they are), throw-away certificates from one CA, mutual TLS
WebSockets on 127.0.0.1, PSI first, checkpoints on (the default). First an uninterrupted run;
then, per case, a fresh run in which the ``kill`` party gets SIGKILL as soon as the guest's
checkpoint holds ``--kill-after`` trees, and is started again with ``--resume``; the other
party keeps running and continues from its own checkpoint when it sees the restart.

Per case:

* ``identical``: every tree of both parties' model files (joined) equals the uninterrupted
  run's: structure, features, bins, directions and leaf values;
* ``trees_redone``: trees complete (in the guest's checkpoint) when the party was killed,
  minus the tree the parties resumed at (from the guest's log): trees grown twice;
* ``recovery_s``: seconds from the kill to the guest's first checkpoint after it (the first
  tree grown after the restart: process start, TLS, settings check, PSI and the resume
  agreement included).

Horizontal (homo) parties cannot resume from checkpoints yet: the cases are the guest's and
the host's.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table
from p2pboost import certs
from p2pboost.app.scaffold import write_toml
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.checkpoint import GuestCheckpoint, guest_checkpoint_path
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees

DATASETS = ("breast", "default_credit", "give_credit30k", "student", "synth150k")
CASES = ("guest", "host")
PARTY_TIMEOUT = 900.0
_RESUMED = re.compile(r"resuming at tree (\d+) of")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _configs(root: Path, data: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """guest.toml and host.toml of a fresh run in ``root`` (the host listens)."""
    root.mkdir(parents=True)
    certs.init(root / "certs", ["guest", "host"])
    port = _free_port()
    train = {
        "n_estimators": args.trees,
        "max_depth": args.depth,
        "max_bin": args.bins,
        "key_bits": args.key_bits,
        "insecure_key_bits": args.key_bits < 2048,
    }
    node = {"reconnect_timeout": 60.0}
    guest = write_toml(
        root / "guest.toml",
        {"id": "guest", "role": "guest", "task": "train", "certs": "certs/guest"}
        | {"workdir": "guest"},
        {
            "peers": {"host": f"wss://127.0.0.1:{port}"},
            "data": {"path": str(data / f"{args.dataset}_hetero_guest.csv"), "label_column": "y"},
            "train": train,
            "node": node,
        },
    )
    host = write_toml(
        root / "host.toml",
        {"id": "host", "role": "host", "task": "train", "certs": "certs/host"}
        | {"workdir": "host", "listen": f"127.0.0.1:{port}"},
        {
            "peers": {"guest": ""},
            "data": {"path": str(data / f"{args.dataset}_hetero_host.csv")},
            "node": node,
        },
    )
    return guest, host


@dataclass
class _Party:
    """A ``p2pboost party`` process and the file its log goes to (never a pipe that nobody
    reads while it runs)."""

    proc: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, config: Path, *extra: str) -> _Party:
        log = config.with_suffix(f".{time.monotonic_ns()}.log")
        with log.open("wb") as fh:
            command = ["party", "--config", str(config), *extra]
            proc = subprocess.Popen(
                [sys.executable, "-m", "p2pboost.app.cli", *command],
                stdout=subprocess.DEVNULL,
                stderr=fh,
            )
        return cls(proc, log)

    def finish(self, name: str) -> str:
        """Wait for it; its log. A failure or a hang ends the benchmark with the log."""
        try:
            self.proc.wait(timeout=PARTY_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = self.log.read_text(errors="replace")
        if self.proc.returncode != 0:
            raise SystemExit(f"{name} failed ({self.proc.returncode}):\n{err}")
        return err


def _trees(root: Path) -> list[Tree]:
    guest = GuestModel.load(root / "guest" / "model.json")
    return joined_trees(guest, [HostModel.load(root / "host" / "model.json")])


def _same(a: list[Tree], b: list[Tree]) -> bool:
    fields = ("feature", "threshold_bin", "left", "right", "value", "default_left", "owner")
    return len(a) == len(b) and all(
        np.array_equal(getattr(x, f), getattr(y, f))
        for x, y in zip(a, b, strict=True)
        for f in fields
    )


def _guest_trees(root: Path) -> int:
    saved = GuestCheckpoint.load(root / "guest" / "checkpoints")
    return 0 if saved is None else len(saved.chain)


def _run_case(kill: str, data: Path, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    guest_toml, host_toml = _configs(root, data, args)
    configs = {"guest": guest_toml, "host": host_toml}
    procs = {"host": _Party.start(host_toml), "guest": _Party.start(guest_toml)}
    ckpt = guest_checkpoint_path(root / "guest" / "checkpoints")
    deadline = time.monotonic() + PARTY_TIMEOUT
    while _guest_trees(root) < args.kill_after:
        if time.monotonic() > deadline or any(p.proc.poll() is not None for p in procs.values()):
            raise SystemExit(f"the run ended before tree {args.kill_after} (case {kill})")
        time.sleep(0.01)
    before = ckpt.stat().st_mtime_ns
    procs[kill].proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    procs[kill].proc.wait()
    held = _guest_trees(root)  # what was complete when the party died
    procs[kill] = _Party.start(configs[kill], "--resume")
    recovered_at = None
    while recovered_at is None and procs["guest"].proc.poll() is None:
        if ckpt.exists() and ckpt.stat().st_mtime_ns != before and _guest_trees(root) > held:
            recovered_at = time.monotonic()
        time.sleep(0.005)
    if recovered_at is None:
        recovered_at = time.monotonic()
    guest_log = procs["guest"].finish("guest")
    procs["host"].finish("host")
    found = _RESUMED.findall(guest_log)
    if not found:
        raise SystemExit(f"the guest never resumed (case {kill}):\n{guest_log}")
    return {
        "kill": kill,
        "held_at_kill": held,
        "resumed_at": int(found[-1]),
        "trees_redone": held - int(found[-1]),
        "recovery_s": round(recovered_at - killed_at, 3),
        "trees": _trees(root),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks resume",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", default="default_credit", choices=DATASETS)
    parser.add_argument("--trees", type=int, default=8)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--key-bits", type=int, default=1024, choices=[1024, 2048, 3072])
    parser.add_argument("--kill-after", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    if not cases or any(c not in CASES for c in cases):
        parser.error(f"--cases: a comma-separated subset of {','.join(CASES)}")
    if not 0 < args.kill_after < args.trees:
        parser.error("--kill-after must be between 0 and --trees")
    data = data_dir(args.data_dir)
    with tempfile.TemporaryDirectory(prefix="p2pboost-resume-") as tmp:
        base = Path(tmp)
        t0 = time.perf_counter()
        guest_toml, host_toml = _configs(base / "reference", data, args)
        host = _Party.start(host_toml)
        _Party.start(guest_toml).finish("guest")
        host.finish("host")
        reference_s = time.perf_counter() - t0
        reference = _trees(base / "reference")
        results = [_run_case(kill, data, args, base / f"kill-{kill}") for kill in cases]
    rows: list[tuple[str, Any]] = [("uninterrupted run s (PSI and training)", reference_s)]
    out = []
    for r in results:
        trees = r.pop("trees")
        r["identical"] = _same(trees, reference)
        out.append({k: r[k] for k in ("kill", "identical", "trees_redone", "recovery_s")})
        rows.append(
            (
                f"kill {r['kill']} after tree {args.kill_after}",
                f"identical {r['identical']}, held {r['held_at_kill']}, resumed at "
                f"{r['resumed_at']}, redone {r['trees_redone']}, recovery {r['recovery_s']} s",
            )
        )
    print_table(rows, f"resume: {args.dataset}, {args.trees} trees, depth {args.depth}")
    emit_json(
        {
            "benchmark": "resume",
            "dataset": args.dataset,
            "trees": args.trees,
            "depth": args.depth,
            "key_bits": args.key_bits,
            "cases": out,
        }
    )
    return 0 if all(c["identical"] for c in out) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main(sys.argv[1:]))
