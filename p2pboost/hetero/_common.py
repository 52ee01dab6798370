"""Shared pieces of the hetero SecureBoost roles: phases, configuration, message checks.

Every message from a peer goes through the validators here, which raise
:class:`~p2pboost.exceptions.RemoteProtocolError` naming the peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.packing import PackingSpec
from p2pboost.crypto.paillier import (
    PublicKey,
)
from p2pboost.exceptions import (
    InputError,
    RemoteProtocolError,
)
from p2pboost.gbdt.fixedpoint import Grid
from p2pboost.workers import default_workers, process_pool

__all__ = [
    "MAX_FEATURES",
    "MAX_ROWS",
    "VERSION",
    "GuestPhase",
    "HeteroConfig",
    "HostPhase",
    "Progress",
    "array_field",
    "expect",
    "grid_wire",
    "int_field",
    "list_field",
    "offload",
    "own_executor",
    "packing_spec",
    "unpack_bitmap",
]

logger = logging.getLogger("p2pboost.hetero")

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
T = TypeVar("T")

VERSION = 1
#: Largest row count a host may announce (bounds what a peer can make us allocate).
MAX_ROWS = 100_000_000
MAX_FEATURES = 1_000_000


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

    def enter(self, phase: GuestPhase | HostPhase, depth: int = -1) -> None:
        self.phase, self.depth = phase, depth
        logger.debug("tree %d depth %d: %s", self.tree, depth, phase.value)


@dataclass(frozen=True, slots=True)
class HeteroConfig:
    """Knobs of the protocol (not of the model: those are :class:`BoostParams`).

    ``key_bits`` below 2048 needs ``allow_insecure_key`` (1024 is for tests and comparisons).
    ``chunk_rows``: ciphertexts per streamed chunk. ``workers``: processes of the pool the
    protocol starts when no executor is given.
    """

    key_bits: int = 2048
    allow_insecure_key: bool = False
    chunk_rows: int = 2048
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.chunk_rows < 1:
            raise InputError("chunk_rows must be at least 1")
        if self.workers is not None and self.workers < 1:
            raise InputError("workers must be at least 1")


@contextlib.asynccontextmanager
async def own_executor(
    executor: Executor | None, workers: int | None
) -> AsyncIterator[tuple[Executor, int]]:
    """``executor`` as is, or a fresh ``spawn`` process pool shut down on exit."""
    if executor is not None:
        yield executor, workers or default_workers()
        return
    n = workers or default_workers()
    pool = process_pool(n)  # spawn, workers at lower priority than the event loop
    try:
        yield pool, n
    finally:
        await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)


# -- message validation ------------------------------------------------------------------------


def expect(msg: object, kind: str, peer: str) -> dict[str, Any]:
    if not isinstance(msg, dict) or msg.get("t") != kind:
        got = msg.get("t") if isinstance(msg, dict) else type(msg).__name__
        raise RemoteProtocolError(f"expected a {kind!r} message, got {got!r}", peer=peer)
    return msg


def int_field(msg: dict[str, Any], key: str, peer: str, low: int, high: int) -> int:
    v = msg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise RemoteProtocolError(f"{key!r} must be an integer in [{low}, {high}]", peer=peer)
    return v


def array_field(
    msg: dict[str, Any], key: str, peer: str, dtype: Any, shape: tuple[int, ...] | None
) -> npt.NDArray[Any]:
    v = msg.get(key)
    if not isinstance(v, np.ndarray) or v.dtype != np.dtype(dtype) or v.ndim != 1:
        raise RemoteProtocolError(f"{key!r} must be a 1-d {np.dtype(dtype)} array", peer=peer)
    if shape is not None and v.shape != shape:
        raise RemoteProtocolError(f"{key!r} must have shape {shape}", peer=peer)
    return v


def list_field(msg: dict[str, Any], key: str, peer: str, length: int) -> list[Any]:
    v = msg.get(key)
    if not isinstance(v, list) or len(v) != length:
        raise RemoteProtocolError(f"{key!r} must be a list of {length} items", peer=peer)
    return v


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


def packing_spec(n_rows: int, grids: tuple[Grid, Grid], public_key: PublicKey) -> PackingSpec:
    return PackingSpec.for_grids(n_rows, grids[0], grids[1], key_bits=public_key.bits)


async def offload(executor: Executor, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` in the process pool."""
    return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)
