"""Per-tree checkpoints of vertical training, and how the parties agree where to resume.

Vertical training at 2048-bit keys runs for hours; a party that is killed or restarted must
not cost the trees already grown. So, when a checkpoint directory is given, every party writes
one file after each tree it has completed (atomically: :func:`p2pboost.files.atomic_write`)
holding exactly its own secrets, as its model file does, and what it needs to continue as if
nothing had happened:

* the **guest**: the model so far (a :class:`~p2pboost.hetero.model.GuestModel` whose
  fingerprint is the run id), the fingerprint chain, and the state at the end of the last two
  rounds (the random generator, the training and evaluation margins): two, because a host
  that died may hold one tree less than the guest, and the run must go back to a round both
  hold;
* a **host**: its own splits so far (a :class:`~p2pboost.hetero.model.HostModel`) and the
  fingerprint chain as the guest announced it.

**The fingerprint chain** binds a checkpoint to one training: ``chain[t]`` is a SHA-256 over
a secret of the run (kept by the guest only), the run id and the shape of the first ``t + 1``
trees (who owns each node, the children), computed by the guest and sent to every host at the
start of the next tree. The secret is there because a host knows most of a tree's shape (it
sees every split's children) and could otherwise try the few possible owner assignments
against the digest and learn which party owns the splits it does not; with it, the chain is
an opaque token to a host. At
session start a resuming host sends its run id and chain in its hello; the guest resumes at
the largest round boundary ``T`` that every party holds, after checking that each host's
chain agrees with its own up to ``T`` (a checkpoint of another training is refused, naming
the host), and tells the hosts ``T`` in the setup. Every party then drops what lies beyond
``T`` and the training continues from there: the trees that follow are the trees an
uninterrupted run grows, because the guest continues the same random generator from the same
margins, and the protocol is lossless.

**Integrity** (:mod:`p2pboost.checkpoint_files`): a file is a magic line, the
SHA-256 of its body and the body (msgpack, the wire codec); a truncated, edited or foreign
file is refused with :class:`CheckpointError` naming the cause, and so is a checkpoint
written for other data or other parameters (a digest of both is kept; the differing
parameters are named).

What a checkpoint reveals is what the party's model file already holds, plus (guest only)
its margins on its training and evaluation rows, which its labels and model give anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.checkpoint_files import read_checkpoint, write_checkpoint
from p2pboost.exceptions import CheckpointError
from p2pboost.gbdt.binning import is_sparse
from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.model import GuestModel, HostModel

__all__ = [
    "GuestCheckpoint",
    "HostCheckpoint",
    "RoundState",
    "chain_next",
    "chain_start",
    "data_digest",
    "guest_checkpoint_path",
    "host_checkpoint_path",
    "model_fingerprint",
    "new_chain_secret",
    "new_run_id",
    "resume_point",
]

F64 = npt.NDArray[np.float64]

_GUEST = "hetero-guest-checkpoint"
_HOST = "hetero-host-checkpoint"


def new_run_id() -> str:
    """A fresh training's id (random: two runs never share one)."""
    return secrets.token_hex(16)


def new_chain_secret() -> str:
    """The guest's secret of a fresh run (see the module docstring)."""
    return secrets.token_hex(32)


def chain_start(run: str) -> str:
    """The chain before any tree."""
    return hashlib.sha256(b"p2pboost/hetero/chain/v1" + run.encode()).hexdigest()


def chain_next(previous: str, tree: Tree, secret: str) -> str:
    """The chain after ``tree``: its shape (owners, children) on top of ``previous``, keyed
    by the guest's ``secret``."""
    h = hashlib.sha256(secret.encode() + previous.encode())
    for arr in (tree.owner, tree.left, tree.right):
        h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    return h.hexdigest()


def data_digest(*parts: Any) -> str:
    """SHA-256 over arrays (dtype, shape and bytes; a CSC matrix by its canonical arrays) and
    JSON-able settings, in order."""
    h = hashlib.sha256(b"p2pboost/hetero/data/v1")
    for part in parts:
        if is_sparse(part):
            h.update(f"csc{part.shape}".encode())
            for arr in (part.indptr, part.indices, part.data):
                h.update(np.ascontiguousarray(arr).tobytes())
        elif isinstance(part, np.ndarray):
            arr = np.ascontiguousarray(part)
            h.update(f"{arr.dtype.str}{arr.shape}".encode())
            h.update(arr.tobytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
    return h.hexdigest()


def guest_checkpoint_path(directory: str | os.PathLike[str]) -> Path:
    return Path(directory) / "hetero-guest.ckpt"


def host_checkpoint_path(directory: str | os.PathLike[str], guest: str) -> Path:
    """A host may train with several guests: one file per guest."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in guest)
    return Path(directory) / f"hetero-host-of-{safe}.ckpt"


def _chain(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise CheckpointError("checkpoint chain must be a list of digests")
    return list(value)


@dataclass(frozen=True, eq=False)
class RoundState:
    """The guest's state after ``rounds`` complete rounds."""

    rounds: int
    rng_state: dict[str, Any]
    margin: F64
    eval_margins: list[F64]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "rng": json.dumps(self.rng_state),  # PCG64's state holds 128-bit integers
            "margin": self.margin,
            "eval_margins": list(self.eval_margins),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RoundState:
        try:
            return cls(
                int(d["rounds"]),
                dict(json.loads(d["rng"])),
                np.asarray(d["margin"], dtype=np.float64),
                [np.asarray(m, dtype=np.float64) for m in d["eval_margins"]],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"invalid round state in checkpoint: {exc}") from None


@dataclass(frozen=True, eq=False)
class GuestCheckpoint:
    """What the guest keeps after each round (see the module docstring).

    ``model.fingerprint`` is the run id; ``chain[t]`` the chain after ``t + 1`` trees, keyed
    by ``secret``; ``states`` the last two rounds' states, oldest first; ``digest`` covers the
    guest's data, labels, evaluation sets, hosts and parameters.
    """

    model: GuestModel
    chain: list[str]
    states: list[RoundState]
    digest: str
    secret: str

    @property
    def run(self) -> str:
        return self.model.fingerprint

    def save(self, directory: str | os.PathLike[str]) -> None:
        write_checkpoint(
            guest_checkpoint_path(directory),
            _GUEST,
            {
                "model": json.dumps(self.model.to_dict()),  # JSON: the generator's 128-bit state
                "chain": self.chain,
                "states": [s.to_dict() for s in self.states],
                "digest": self.digest,
                "secret": self.secret,
            },
        )

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> GuestCheckpoint | None:
        """The directory's guest checkpoint, or None if it has none."""
        path = guest_checkpoint_path(directory)
        if not path.exists():
            return None
        body = read_checkpoint(path, _GUEST)
        try:
            model = GuestModel.from_dict(json.loads(body["model"]))
            states = [RoundState.from_dict(s) for s in body["states"]]
            ckpt = cls(
                model, _chain(body["chain"]), states, str(body["digest"]), str(body["secret"])
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"invalid guest checkpoint {str(path)!r}: {exc}") from None
        if len(ckpt.chain) != len(model.trees) or not states:
            raise CheckpointError(f"invalid guest checkpoint {str(path)!r}: inconsistent trees")
        return ckpt

    def state_at(self, rounds: int) -> RoundState | None:
        return next((s for s in self.states if s.rounds == rounds), None)

    def check_settings(self, digest: str, params: Mapping[str, Any]) -> None:
        """Refuse to continue with other data or parameters, naming what differs."""
        if digest == self.digest:
            return
        ours = self.model.params.to_dict()
        differ = sorted(k for k in set(ours) | set(params) if ours.get(k) != params.get(k))
        if differ:
            named = ", ".join(f"{k}: {ours.get(k)!r} then, {params.get(k)!r} now" for k in differ)
            raise CheckpointError(f"the checkpoint was written with other parameters ({named})")
        raise CheckpointError(
            "the checkpoint was written for other data (rows, labels, evaluation sets or hosts "
            "differ): resume with the data it was trained on, or start afresh"
        )


@dataclass(frozen=True, eq=False)
class HostCheckpoint:
    """What a host keeps after each tree: its splits (``model.fingerprint`` is the run id),
    the chain the guest announced, and a digest of its data."""

    model: HostModel
    chain: list[str]
    digest: str

    @property
    def run(self) -> str:
        return self.model.fingerprint

    def save(self, directory: str | os.PathLike[str]) -> None:
        write_checkpoint(
            host_checkpoint_path(directory, self.model.guest),
            _HOST,
            {
                "model": json.dumps(self.model.to_dict()),
                "chain": self.chain,
                "digest": self.digest,
            },
        )

    @classmethod
    def load(cls, directory: str | os.PathLike[str], guest: str) -> HostCheckpoint | None:
        path = host_checkpoint_path(directory, guest)
        if not path.exists():
            return None
        body = read_checkpoint(path, _HOST)
        try:
            ckpt = cls(
                HostModel.from_dict(json.loads(body["model"])),
                _chain(body["chain"]),
                str(body["digest"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"invalid host checkpoint {str(path)!r}: {exc}") from None
        if any(s.tree >= len(ckpt.chain) for s in ckpt.model.splits):
            raise CheckpointError(f"invalid host checkpoint {str(path)!r}: splits beyond its trees")
        return ckpt


def resume_point(
    guest: GuestCheckpoint | None,
    hosts: Sequence[tuple[str, str, list[str]]],
    trees_per_round: int,
) -> int:
    """Trees every party holds and agrees on (a whole number of rounds); 0 to start afresh.

    ``hosts``: per host, its name, run id and chain (empty when it has no checkpoint). Raises
    :class:`CheckpointError` for a host whose checkpoint belongs to another training.
    """
    if guest is None:
        return 0
    held = len(guest.chain)
    for name, run, chain in hosts:
        if not chain:
            return 0
        if run != guest.run:
            raise CheckpointError(
                f"host {name!r} resumes another training (run {run[:8]}, the guest's "
                f"{guest.run[:8]}): give it the checkpoint of this training, or start afresh"
            )
        held = min(held, len(chain))
    start = held - held % trees_per_round
    for name, _, chain in hosts:
        if start and chain[start - 1] != guest.chain[start - 1]:
            raise CheckpointError(
                f"host {name!r}'s checkpoint disagrees with the guest's at tree {start}: "
                "they come from different trainings"
            )
    if start and guest.state_at(start // trees_per_round) is None:
        raise CheckpointError(
            f"a host holds only {start} trees, the guest's checkpoint {len(guest.chain)}: "
            "the guest keeps the state of its last two rounds only; start afresh"
        )
    return start


def model_fingerprint(trees: Sequence[Tree]) -> str:
    """Shared model id: a random nonce and the public shape of the trees."""
    h = hashlib.sha256(b"p2pboost/hetero/model/v1" + secrets.token_bytes(16))
    for tree in trees:
        for arr in (tree.owner, tree.left, tree.right):
            h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    return h.hexdigest()[:32]
