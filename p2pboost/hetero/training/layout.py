"""The block-cyclic layout of a tree's rows over a host's shards.

A host cuts each tree's sampled rows (the *slots* of the guest's gradient stream: the ``s``-th
sampled row is slot ``s``) into blocks of :func:`shard_block` slots and deals the blocks to its
``W`` shards in turn, as ScaLAPACK lays out matrices: slot ``s`` belongs to shard
``(s // block) % W``. This module is that arithmetic and nothing else: which shard owns a slot
(:func:`slot_owner`), where a slot sits among its shard's (:func:`local_position`) and back
(:func:`slots_of`), and how a chunk of the stream is cut into the parts of the shards it reaches
(:func:`chunk_parts`, :func:`shards_reached`). It runs on the host's event loop (numpy only)
and in the shards' workers alike.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "MAX_BLOCK",
    "chunk_parts",
    "local_position",
    "shard_block",
    "shards_reached",
    "slot_owner",
    "slots_of",
]

I64 = npt.NDArray[np.int64]


#: The most rows a block of a tree's shard layout holds (:func:`shard_block`).
MAX_BLOCK = 1024


def shard_block(rows: int, shards: int) -> int:
    """Rows per block of a tree's shard layout: the tree's slots are dealt to the shards in
    blocks of this many, in turn (block-cyclic, as ScaLAPACK lays out matrices).

    Why blocks: a chunk of the gradient stream then reaches only the shards of the blocks it
    spans, one task each, instead of every shard (a 16,384-row chunk over 128 workers: about
    20 tasks, not 128, each with more rows). Why at most ``rows / (8 shards)``: every shard
    holds at least 8 blocks spread over the whole sample, so any node whose rows fill a run of
    the sample as long as ``shards`` blocks is built evenly by all shards, whatever the rows'
    order in the file. Why at most :data:`MAX_BLOCK`: a chunk of the stream (2,048 rows or
    more by default) then reaches at least two shards, and consecutive chunks the next ones, so
    the stream keeps every shard busy rather than filling one shard's blocks at a time. One
    row per block is plain round-robin.

    Why every shard gets the same number of blocks (the size is shrunk until the sample is a
    whole number of rounds, only the last block short): a shard's rows set its share of the
    root and of every node built from rows spread over the sample, and each split waits for
    its slowest shard. With the largest block allowed, the rounds did not come out even: a
    100,000-row tree on 8 shards was 97.7 blocks of 1,024, so two shards held 13 blocks and
    six held 12, and the busiest shard had 6.5 % more rows than the mean (10 % on 64 shards,
    up to 12.5 % in general); now it has at most a few rows more (0.2 % or less on these).
    """
    largest = max(1, min(MAX_BLOCK, rows // (8 * shards)))
    per_shard = -(-rows // (largest * shards))  # blocks each shard holds, rounded up
    return max(1, -(-rows // (per_shard * shards)))


def shards_reached(start: int, stop: int, block: int, shards: int) -> int:
    """How many shards the chunk of slots ``start .. stop - 1`` reaches in that layout (the
    parts :func:`chunk_parts` makes of it): one per block it spans, at most every shard."""
    return min(shards, (stop - 1) // block - start // block + 1) if stop > start else 0


def slot_owner(slots: I64, block: int, shards: int) -> I64:
    """The shard of each slot in the layout of :func:`shard_block`."""
    return (slots // block) % shards


def local_position(slots: I64, block: int, shards: int) -> I64:
    """Each slot's position among its shard's slots."""
    return slots // (block * shards) * block + slots % block


def slots_of(local: I64, index: int, block: int, shards: int) -> I64:
    """The slots at positions ``local`` of shard ``index`` (the inverse of
    :func:`local_position`)."""
    return (local // block * shards + index) * block + local % block


def chunk_parts(
    start: int, data: bytes, width: int, shards: int, block: int = 1
) -> list[tuple[int, int, bytes]]:
    """Cut a chunk of ciphertexts (slots ``start, start + 1, ...``, ``width`` bytes each) into
    the shards' parts in the layout of :func:`shard_block`: ``(shard, first slot, bytes of the
    shard's slots from the first on, in order)``, for the shards the chunk reaches.

    Runs on the event loop: one numpy gather of the chunk, no per-ciphertext Python.
    """
    n = len(data) // width
    if shards == 1:
        return [(0, start, bytes(data))] if n else []
    slots = np.arange(start, start + n, dtype=np.int64)
    owner = slot_owner(slots, block, shards)
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=shards)
    rows = np.frombuffer(data, dtype=np.uint8).reshape(n, width)[order]
    parts, at = [], 0
    for shard in np.flatnonzero(counts).tolist():
        end = at + int(counts[shard])
        parts.append((shard, int(slots[order[at]]), rows[at:end].tobytes()))
        at = end
    return parts
