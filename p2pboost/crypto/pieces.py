"""How a phase's work is cut into pool tasks, so that every worker of a party stays busy.

The rule (docs/explanation/hetero.md, "Where the work runs"): no task holds more than about
``1 / (4 W)`` of a phase's work, ``W`` being the party's workers, and none is so small that
the pool's cost per task eats into it.

**Why a quarter of a worker's share.** A pool is a list scheduler: a free worker takes the
next task. Such a schedule ends at most one task after the ideal ``work / W`` (Graham's
bound), so with tasks of at most ``work / (4 W)`` a phase takes at most 1.25 times the ideal,
a parallel efficiency of 0.8 or better whatever the order in which the tasks come and however
unequal the workers turn out to be (a worker that also makes randomisers, or shares its core).
One task per chunk, the old way, gave a 100,000-row tree 9 tasks of 2,048 to 16,384 rows for
8 workers: the largest alone was a sixth of the tree.

**Why a floor.** A task costs the party's process and a worker about 0.3 to 0.5 ms of wall
time on a local process pool (pickling, two pipes, waking the worker; measured on the 2-core
machine of the benchmarks with one-row encryption tasks, as opposed to about 20 us for the
row itself), and a few milliseconds on a Dask cluster (about 2 ms of CPU between client,
scheduler and worker and a 5 to 15 ms round trip: ``python -m benchmarks scaleout``). The
floors below keep that under a few percent of a task's own work: :data:`MIN_CIPHERTEXTS` is
256 encryptions (22 ms at 2048 bits, 11 ms at 1024 with gmpy2; a few ms where every
randomiser was made ahead, which then is a small share of the tree), :data:`MIN_POINTS` 512
X25519 multiplications (about 17 ms), :data:`MIN_HASHES` 16,384 SHA-256 hashes of ids
(about 11 ms); a cluster's floors are four times larger.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor

from p2pboost.workers import ClusterPool

__all__ = [
    "MIN_CIPHERTEXTS",
    "MIN_HASHES",
    "MIN_POINTS",
    "PIECES_PER_WORKER",
    "cut",
    "floor_for",
    "on_cluster",
    "task_bound",
]

#: Tasks per worker a phase is cut into at least: a task holds at most ``1 / (4 W)`` of it.
PIECES_PER_WORKER = 4
#: Fewest ciphertexts worth an encryption task of their own on a local pool.
MIN_CIPHERTEXTS = 256
#: Fewest X25519 multiplications (PSI blinding) worth a task of their own on a local pool.
MIN_POINTS = 512
#: Fewest ids worth a hashing task of their own on a local pool (SHA-256 is cheap).
MIN_HASHES = 16_384
#: How much larger a task must be on a Dask cluster, whose cost per task is about five times
#: a local pool's (and whose round trips are longer still).
CLUSTER_FACTOR = 4


def task_bound(total: int, workers: int) -> int:
    """The most items one task of a phase of ``total`` items should hold: ``1 / (4 W)`` of
    them, rounded up (at least 1)."""
    return max(1, math.ceil(total / (PIECES_PER_WORKER * max(1, workers))))


def on_cluster(executor: Executor | None) -> bool:
    """Whether ``executor`` runs its tasks on a Dask cluster (where a task costs more)."""
    return isinstance(executor, ClusterPool)


def floor_for(executor: Executor | None, local: int) -> int:
    """The floor ``local`` of a local pool, raised for a Dask cluster (its tasks cost more)."""
    return local * CLUSTER_FACTOR if on_cluster(executor) else local


def cut(n: int, workers: int, *, minimum: int = 1, largest: int | None = None) -> list[int]:
    """Cut points ``0 = c_0 < c_1 < ... < c_k = n`` of ``n`` items in ``k`` contiguous pieces
    whose sizes differ by at most one: one piece per worker, more where a piece would hold
    more than ``largest`` items, fewer where one would hold fewer than ``minimum`` (the floor
    wins over ``largest``: never more than about ``n / minimum`` pieces). ``[0]`` for nothing.

    Why one piece per worker and not more when the phase allows it: a piece of a chunk is
    waited for with the rest of the chunk (the chunk is sent whole), so W pieces end the chunk
    soonest, and the caller keeps several chunks in flight, which fills the pool meanwhile.
    """
    if n <= 0:
        return [0]
    minimum = max(1, minimum)
    count = max(1, min(workers, n // minimum))
    if largest is not None:
        count = max(count, math.ceil(n / max(largest, minimum)))
    count = min(count, n)
    base, extra = divmod(n, count)
    cuts = [0]
    for i in range(count):
        cuts.append(cuts[-1] + base + (1 if i < extra else 0))
    return cuts
