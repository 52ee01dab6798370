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

The horizontal cases run a server and three clients (``NAME_homo_guest.csv``,
``NAME_homo_host_1.csv``, ``NAME_homo_host_2.csv``) the same way: ``homo_server`` kills the
server after ``--kill-after`` rounds (in its checkpoint) and starts it with ``--resume``, the
clients rejoin its new run on their own; ``homo_client`` kills the first client and starts
it again, the running server takes it back. ``identical`` compares the server's model with an
uninterrupted horizontal run's; ``trees_redone`` is the rounds complete at the kill minus the
round the server went on from (0 when it never goes back: a client's restart only regrows
the tree in progress); ``recovery_s`` runs from the kill to the server's next checkpoint.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table
from p2pboost import certs
from p2pboost.app.scaffold import write_toml
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from p2pboost.hetero.training.checkpoint import GuestCheckpoint, guest_checkpoint_path
from p2pboost.homo.checkpoint import ServerCheckpoint, server_checkpoint_path

DATASETS = ("breast", "default_credit", "give_credit30k", "student", "synth150k")
CASES = ("guest", "host", "homo_server", "homo_client")
PARTY_TIMEOUT = 900.0
_RESUMED = re.compile(r"resuming at tree (\d+) of")
_HOMO_RESUMED = re.compile(r"resuming at round (\d+) of")
_CLIENTS = {"c1": "homo_guest", "c2": "homo_host_1", "c3": "homo_host_2"}


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


def _homo_configs(root: Path, data: Path, args: argparse.Namespace) -> dict[str, Path]:
    """server.toml and one client file per data part of a fresh horizontal run in ``root``
    (the server listens)."""
    root.mkdir(parents=True)
    certs.init(root / "certs", ["server", *_CLIENTS])
    port = _free_port()
    train = {"n_estimators": args.trees, "max_depth": args.depth, "max_bin": args.bins}
    node = {"reconnect_timeout": 60.0}
    out = {
        "server": write_toml(
            root / "server.toml",
            {"id": "server", "role": "server", "task": "train", "certs": "certs/server"}
            | {"workdir": "server", "listen": f"127.0.0.1:{port}"},
            {"peers": dict.fromkeys(_CLIENTS, ""), "train": train, "node": node},
        )
    }
    for client, part in _CLIENTS.items():
        out[client] = write_toml(
            root / f"{client}.toml",
            {"id": client, "role": "client", "task": "train", "certs": f"certs/{client}"}
            | {"workdir": client},
            {
                "peers": {"server": f"wss://127.0.0.1:{port}"},
                "data": {"path": str(data / f"{args.dataset}_{part}.csv"), "label_column": "y"},
                "train": train,
                "node": node,
            },
        )
    return out


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


@dataclass
class _Kill:
    """When a party was killed, how much was done then, and when the run next saved."""

    held: int
    seconds: float


def _kill_and_restart(
    procs: dict[str, _Party],
    configs: dict[str, Path],
    victim: str,
    keeper: str,
    ckpt: Path,
    done: Callable[[], int],
    kill_after: int,
) -> _Kill:
    """Wait until ``done()`` (trees or rounds in ``keeper``'s checkpoint ``ckpt``) reaches
    ``kill_after``, SIGKILL ``victim`` and start it again with ``--resume``; returns what was
    done at the kill and the seconds until ``keeper``'s next checkpoint with more."""
    deadline = time.monotonic() + PARTY_TIMEOUT
    while done() < kill_after:
        if time.monotonic() > deadline or any(p.proc.poll() is not None for p in procs.values()):
            raise SystemExit(f"the run ended before {kill_after} were done ({victim})")
        time.sleep(0.01)
    before = ckpt.stat().st_mtime_ns
    procs[victim].proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    procs[victim].proc.wait()
    held = done()  # what was complete when the party died
    procs[victim] = _Party.start(configs[victim], "--resume")
    recovered_at = None
    while recovered_at is None and procs[keeper].proc.poll() is None:
        if ckpt.exists() and ckpt.stat().st_mtime_ns != before and done() > held:
            recovered_at = time.monotonic()
        time.sleep(0.005)
    return _Kill(held, (recovered_at or time.monotonic()) - killed_at)


def _run_case(kill: str, data: Path, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    guest_toml, host_toml = _configs(root, data, args)
    configs = {"guest": guest_toml, "host": host_toml}
    procs = {"host": _Party.start(host_toml), "guest": _Party.start(guest_toml)}
    ckpt = guest_checkpoint_path(root / "guest" / "checkpoints")
    killed = _kill_and_restart(
        procs, configs, kill, "guest", ckpt, lambda: _guest_trees(root), args.kill_after
    )
    guest_log = procs["guest"].finish("guest")
    procs["host"].finish("host")
    found = _RESUMED.findall(guest_log)
    if not found:
        raise SystemExit(f"the guest never resumed (case {kill}):\n{guest_log}")
    return {
        "kill": kill,
        "held_at_kill": killed.held,
        "resumed_at": int(found[-1]),
        "trees_redone": killed.held - int(found[-1]),
        "recovery_s": round(killed.seconds, 3),
        "trees": _trees(root),
    }


def _server_rounds(root: Path) -> int:
    saved = ServerCheckpoint.load(root / "server" / "checkpoints")
    return 0 if saved is None else saved.model.n_rounds


def _homo_run(root: Path, data: Path, args: argparse.Namespace) -> list[Tree]:
    """An uninterrupted horizontal run; the server's trees."""
    configs = _homo_configs(root, data, args)
    procs = {name: _Party.start(path) for name, path in configs.items()}
    for name, proc in procs.items():
        proc.finish(name)
    return Booster.load(root / "server" / "model.json").trees


def _run_homo_case(kill: str, data: Path, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    configs = _homo_configs(root, data, args)
    procs = {name: _Party.start(path) for name, path in configs.items()}
    victim = "server" if kill == "homo_server" else "c1"
    ckpt = server_checkpoint_path(root / "server" / "checkpoints")
    killed = _kill_and_restart(
        procs, configs, victim, "server", ckpt, lambda: _server_rounds(root), args.kill_after
    )
    held = killed.held
    logs = {name: proc.finish(name) for name, proc in procs.items()}
    if victim == "server":
        found = _HOMO_RESUMED.findall(logs["server"])
        if not found:
            raise SystemExit(f"the server never resumed:\n{logs['server']}")
        went_on_from = int(found[-1])
    else:
        if "client c1 is back" not in logs["server"]:
            raise SystemExit(f"the server did not take c1 back:\n{logs['server']}")
        went_on_from = held  # the server never went back: the tree in progress was regrown
    return {
        "kill": kill,
        "held_at_kill": held,
        "resumed_at": went_on_from,
        "trees_redone": held - went_on_from,
        "recovery_s": round(killed.seconds, 3),
        "trees": Booster.load(root / "server" / "model.json").trees,
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
    rows: list[tuple[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="p2pboost-resume-") as tmp:
        base = Path(tmp)
        references: dict[bool, list[Tree]] = {}
        if any(not c.startswith("homo") for c in cases):
            t0 = time.perf_counter()
            guest_toml, host_toml = _configs(base / "reference", data, args)
            host = _Party.start(host_toml)
            _Party.start(guest_toml).finish("guest")
            host.finish("host")
            rows.append(
                ("uninterrupted vertical run s (PSI and training)", time.perf_counter() - t0)
            )
            references[False] = _trees(base / "reference")
        if any(c.startswith("homo") for c in cases):
            t0 = time.perf_counter()
            references[True] = _homo_run(base / "homo-reference", data, args)
            rows.append(("uninterrupted horizontal run s", time.perf_counter() - t0))
        results = [
            (_run_homo_case if kill.startswith("homo") else _run_case)(
                kill, data, args, base / f"kill-{kill}"
            )
            for kill in cases
        ]
    out = []
    for r in results:
        trees = r.pop("trees")
        r["identical"] = _same(trees, references[r["kill"].startswith("homo")])
        out.append({k: r[k] for k in ("kill", "identical", "trees_redone", "recovery_s")})
        rows.append(
            (
                f"kill {r['kill']} after tree (round) {args.kill_after}",
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
