"""Shared pieces of the vertical training roles: phases, progress, the stream's chunks, bitmaps,
grids.

The protocol's settings and version are in :mod:`p2pboost.hetero.config` (the estimators and the
application read them too); nothing here is needed by inference, which imports nothing of
training.

Messages and their rules are in :mod:`p2pboost.hetero._messages`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.keys import AnyPublicKey
from p2pboost.crypto.packing import PackingSpec
from p2pboost.exceptions import RemoteProtocolError
from p2pboost.gbdt.fixedpoint import Grid

__all__ = [
    "GuestPhase",
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
