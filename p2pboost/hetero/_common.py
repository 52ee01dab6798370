"""Shared pieces of the hetero SecureBoost roles: phases, configuration, bitmaps, grids.

Messages and their rules are in :mod:`p2pboost.hetero._messages`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.keys import AnyPublicKey, check_scheme
from p2pboost.crypto.packing import PackingSpec
from p2pboost.exceptions import InputError, RemoteProtocolError
from p2pboost.gbdt.fixedpoint import Grid
from p2pboost.hetero.modes import check_modes

__all__ = [
    "VERSION",
    "GuestPhase",
    "HeteroConfig",
    "HostPhase",
    "Progress",
    "chunk_bounds",
    "grid_wire",
    "packing_spec",
    "positions",
    "unpack_bitmap",
]

logger = logging.getLogger("p2pboost.hetero")

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

#: The vertical training protocol's version (2: hello, setup, tree and done carry the run id
#: and fingerprint chain of checkpoints; 5: a tree's start says how many outputs a row packs;
#: 6: setup carries min_child_weight, so hosts leave out candidates no child could satisfy;
#: 7: a split's larger child comes as a ``Derived`` package, its sums left to the guest).
VERSION = 7


class GuestPhase(Enum):
    """Where the guest is, for logs, statistics and errors."""

    SETUP = "setup"
    ENCRYPT = "encrypt"
    SPLITS = "splits"
    DECIDE = "decide"
    PARTITION = "partition"
    EVALUATE = "evaluate"
    FINISH = "finish"
    DONE = "done"


class HostPhase(Enum):
    """Where a host is."""

    SETUP = "setup"
    ROOT = "root"
    LAYER = "layer"
    DECIDE = "decide"
    FINISH = "finish"
    DONE = "done"


@dataclass
class Progress:
    """Phase, tree and layer of a running party (read it from another task to monitor)."""

    phase: GuestPhase | HostPhase
    tree: int = -1
    depth: int = -1
    #: A host's ciphertext additions in histogram builds so far (all its shards, whole trees).
    additions: int = 0
    #: A host's largest measured bytes of histograms kept between layers in one tree (summed
    #: over its shards' peaks).
    hist_peak_bytes: int = 0

    def enter(self, phase: GuestPhase | HostPhase, depth: int = -1) -> None:
        self.phase, self.depth = phase, depth
        logger.debug("tree %d depth %d: %s", self.tree, depth, phase.value)


@dataclass(frozen=True, slots=True)
class HeteroConfig:
    """Knobs of the protocol (not of the model: those are :class:`BoostParams`).

    ``scheme``: the additive encryption of the gradients, ``"paillier"`` (default) or ``"ou"``
    (Okamoto-Uchiyama: cheaper additions and encryption, see docs/explanation/ou.md); the
    guest chooses, the hosts follow its key. ``key_bits`` below 2048 needs
    ``allow_insecure_key`` (1024 is for tests and comparisons).
    ``chunk_rows``: rows of the first streamed chunk of gradients (one pool task each); each
    later chunk is twice the one before, up to ``max_chunk_rows`` ciphertexts (a multi-output
    row packed in ``k`` ciphertexts counts ``k`` times; :func:`chunk_bounds`): the
    hosts start summing as soon as a small first chunk arrives, and the rest of the stream
    pays the per-task and per-message costs a few times rather than once per 2,048 rows.
    ``workers``:
    processes of the pool the protocol starts when no executor is given. ``precompute``:
    while the guest waits for the hosts, its idle pool makes the encryption randomisers of the
    next tree ahead of time on processors nobody else needs (at most ``stash_bytes`` of them
    are kept), so that tree's encryption costs one product per row for those.
    ``hello_timeout``: seconds the guest waits for every host to start (its first message);
    a host that is connected but runs something else (another task, other settings) is then
    named instead of being waited for until the node gives up on the session.
    ``complete_secure``: the first that many rounds use the guest's features only (the
    SecureBoost paper's RL-SecureBoost, FATE's ``complete_secure``): the hosts receive no
    gradients and no partitions for them, so the first tree's instance spaces, which the paper
    shows reveal much of the labels, stay with the guest (docs/explanation/modes.md).
    ``tree_num_per_party`` (mix mode) and ``host_depth``/``guest_depth`` (layered mode): the
    SecureBoost+ modes of :mod:`p2pboost.hetero.modes`.
    """

    key_bits: int = 2048
    allow_insecure_key: bool = False
    scheme: str = "paillier"
    chunk_rows: int = 2048
    max_chunk_rows: int = 16384
    workers: int | None = None
    precompute: bool = True
    stash_bytes: int = 64 * 1024 * 1024
    hello_timeout: float = 120.0
    complete_secure: int = 0
    tree_num_per_party: int = 0
    host_depth: int = 0
    guest_depth: int = 0

    def __post_init__(self) -> None:
        if self.complete_secure < 0:
            raise InputError("complete_secure counts rounds: it must be >= 0")
        check_modes(
            self.complete_secure, self.tree_num_per_party, self.host_depth, self.guest_depth
        )
        check_scheme(self.scheme)
        if not self.hello_timeout > 0:
            raise InputError("hello_timeout must be > 0")
        if self.chunk_rows < 1:
            raise InputError("chunk_rows must be at least 1")
        if self.max_chunk_rows < self.chunk_rows:
            raise InputError(
                f"max_chunk_rows ({self.max_chunk_rows}) must be at least chunk_rows "
                f"({self.chunk_rows})"
            )
        if self.workers is not None and self.workers < 1:
            raise InputError("workers must be at least 1")
        if self.stash_bytes < 0:
            raise InputError("stash_bytes must be >= 0")


def chunk_bounds(n: int, first: int, largest: int) -> list[tuple[int, int]]:
    """The ``(start, stop)`` of each streamed chunk of ``n`` rows: ``first`` rows, then each
    chunk twice the one before, up to ``largest`` rows.

    Why growing: the hosts wait for the first chunk (a pipeline's fill), so it is small; every
    chunk after it costs a task, a message and a host task per shard, which on a cluster
    (a scheduler's round trips, TLS between processes) are worth amortising over more rows.
    """
    bounds, start, size = [], 0, first
    while start < n:
        stop = min(n, start + size)
        bounds.append((start, stop))
        start, size = stop, min(2 * size, largest)
    return bounds


# -- message validation ------------------------------------------------------------------------


def positions(keys: npt.NDArray[Any], wanted: npt.NDArray[Any]) -> I64 | None:
    """Where each of ``wanted`` sits in ``keys`` (distinct, in any order), or None if one is
    not there: how a derived child's candidates are found in its parent's and sibling's
    packages, by the host (by candidate) and by the guest (by id)."""
    if keys.size == 0:
        return None if wanted.size else np.zeros(0, dtype=np.int64)
    order = np.argsort(keys)
    pos = order[np.searchsorted(keys, wanted, sorter=order).clip(0, keys.size - 1)]
    if not np.array_equal(keys[pos], wanted):
        return None
    return np.asarray(pos, dtype=np.int64)


def unpack_bitmap(obj: object, n: int, peer: str) -> B8:
    """Unpack a ``np.packbits`` bitmap of exactly ``n`` bits (padding bits must be 0)."""
    nbytes = (n + 7) // 8
    if not isinstance(obj, np.ndarray) or obj.dtype != np.uint8 or obj.shape != (nbytes,):
        raise RemoteProtocolError(f"bitmap must be {nbytes} uint8 bytes for {n} rows", peer=peer)
    bits = np.unpackbits(obj)
    if bits[n:].any():
        raise RemoteProtocolError("bitmap has bits set beyond its rows", peer=peer)
    return bits[:n].astype(np.bool_)


def grid_wire(g: Grid, h: Grid) -> list[int]:
    return [g.bits, g.magnitude_bits, h.bits, h.magnitude_bits]


def packing_spec(
    n_rows: int, grids: tuple[Grid, Grid], public_key: AnyPublicKey, outputs: int = 1
) -> PackingSpec:
    """The packing of a tree's rows under the key's own plaintext budget (smaller for OU):
    ``outputs`` gradient/hessian pairs per row (a multi-output tree's) in as few plaintexts as
    they fit."""
    return PackingSpec.for_grids(
        n_rows, grids[0], grids[1], plaintext_bits=public_key.plaintext_bits, n_outputs=outputs
    )
