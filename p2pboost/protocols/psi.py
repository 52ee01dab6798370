"""Private set intersection between one guest and any number of hosts (DH-PSI on X25519).

One coroutine per role, over a node session (the math is in :mod:`p2pboost.crypto.psi`)::

    guest                                            host (each)
    -----                                            ----
    psi:   hello {n: |X|}                     ->
                                              <-     psi:  hello {n: |Y|}
    mine:  X(a, H(x)) in batches              ->     blinds each batch with b, in order
                                              <-     back: X(b, X(a, H(x)))
                                              <-     theirs: X(b, H(y)) in batches
    blinds those with a: X(a, X(b, H(y)))
    intersects over all hosts
    psi:   positions of the common ids in     ->     aligns its rows to the guest's order
           *that host's* order, in guest order

Everything runs as streams: the guest blinds its set while the hosts blind theirs, and each
batch goes back the moment it is ready, so both cores of every party stay busy. The scalar
multiplications run in a process pool (``executor``), never on the event loop.

**Every worker busy.** Hashing and blinding are cut into tasks of at most ``1 / (4 W)`` of the
set they work on (``W`` the party's workers; :mod:`p2pboost.crypto.pieces`), with a floor so
that a task is worth its cost: a set is hashed by up to ``4 W`` tasks at once rather than by
one, and a streamed batch (``batch`` ids on the wire, whatever their number) is blinded in
pieces where it holds more than that share, its pieces joined before it goes on. Each stream
keeps about two tasks per worker in flight.

What each side learns: the common ids (in the guest's order) and the other side's set size.
With several hosts, each host learns which of *its* ids are common to *all* parties. Every
message from a peer is checked (types, sizes, counts, indices in range and unique) before use.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.pieces import MIN_HASHES, MIN_POINTS, cut, floor_for, task_bound
from p2pboost.crypto.psi import (
    POINT_BYTES,
    PsiKey,
    blind_blob,
    hash_ids,
    intersect_positions,
    split_blob,
)
from p2pboost.exceptions import InputError, RemoteProtocolError
from p2pboost.net.node import Channel, Session
from p2pboost.protocols._messages import Array, Int, Message, recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel
from p2pboost.workers import AnyExecutor, owned_executor

__all__ = ["DEFAULT_BATCH", "MAX_IDS", "PsiPhase", "PsiResult", "psi_guest", "psi_host"]

#: Ids per streamed batch: 4096 x 32 bytes = 128 KiB per message.
DEFAULT_BATCH = 4096
#: Largest set a peer may announce; bounds what it can make us allocate.
MAX_IDS = 50_000_000
_VERSION = 1

Ids = Sequence[str] | Sequence[bytes] | Sequence[int] | npt.NDArray[Any]


class PsiPhase(Enum):
    """Where a PSI run is, for logs and errors."""

    HELLO = "hello"
    BLIND = "blind"
    INTERSECT = "intersect"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class PsiResult:
    """The outcome for one party.

    ``positions`` indexes the caller's own ``ids``: row ``positions[k]`` is the ``k``-th common
    sample, in the same order at every party, so ``X[result.positions]`` aligns the rows.
    ``peer_sizes`` holds the set size each peer announced.
    """

    positions: npt.NDArray[np.int64]
    peer_sizes: dict[str, int]

    @property
    def size(self) -> int:
        return int(self.positions.size)


def _id_list(ids: Ids) -> list[str | bytes | int]:
    items: list[Any] = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    if not items:
        raise InputError("PSI needs at least one id")
    if len(items) > MAX_IDS:
        raise InputError(f"at most {MAX_IDS} ids per party")
    return items


def _check_workers(workers: int | None) -> None:
    if workers is not None and workers < 1:
        raise InputError("workers must be at least 1")


def _batches(blob: bytes, batch: int) -> Iterator[bytes]:
    step = batch * POINT_BYTES
    for start in range(0, len(blob), step):
        yield blob[start : start + step]


async def _hashed(executor: Executor, items: list[str | bytes | int], workers: int) -> bytes:
    """Hash ``items`` to points in the pool, in tasks of at most ``1 / (4 W)`` of them (and at
    least :data:`~p2pboost.crypto.pieces.MIN_HASHES`), joined in order."""
    loop = asyncio.get_running_loop()
    n = len(items)
    cuts = cut(n, workers, minimum=floor_for(executor, MIN_HASHES), largest=task_bound(n, workers))
    parts = await gather_or_cancel(
        *(loop.run_in_executor(executor, hash_ids, items[a:b]) for a, b in itertools.pairwise(cuts))
    )
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class _Blinding:
    """How one stream of points is blinded: the secret, the pool, how many tasks to keep in
    flight and the most points one task may hold."""

    key: PsiKey
    executor: Executor
    inflight: int
    piece: int
    floor: int

    @classmethod
    def of(cls, key: PsiKey, executor: Executor, workers: int, total: int) -> _Blinding:
        """For a stream of ``total`` points (a set's size) on ``workers`` workers."""
        floor = floor_for(executor, MIN_POINTS)
        return cls(key, executor, 2 * workers, task_bound(total, workers), floor)

    def cuts(self, points: int) -> list[int]:
        """Where a batch of ``points`` is cut: nowhere if it holds no more than :attr:`piece`
        points (or under two floors' worth), else in near-equal pieces."""
        # One "worker" per batch: a batch is cut only where it is too large, not to spread it
        # (the stream keeps the other workers busy with the batches around it).
        return cut(points, 1, minimum=self.floor, largest=self.piece)

    def submit(self, blob: bytes) -> list[asyncio.Future[bytes]]:
        """One task per piece of a batch (:meth:`cuts`)."""
        loop = asyncio.get_running_loop()
        cuts = self.cuts(len(blob) // POINT_BYTES)
        return [
            loop.run_in_executor(
                self.executor,
                blind_blob,
                self.key.private_bytes,
                blob[a * POINT_BYTES : b * POINT_BYTES],
            )
            for a, b in itertools.pairwise(cuts)
        ]


async def _blinded(how: _Blinding, batches: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Blind each batch in the pool, keeping about ``how.inflight`` tasks in flight beyond the
    oldest batch, and yield the results in input order, one per batch. An error in
    ``batches`` propagates at once."""
    window: deque[list[asyncio.Future[bytes]]] = deque()
    queued = 0
    try:
        async for blob in batches:
            window.append(how.submit(blob))
            queued += len(window[-1])
            while window and queued - len(window[0]) >= how.inflight:
                data = b"".join([await part for part in window[0]])
                queued -= len(window.popleft())
                yield data
        while window:
            data = b"".join([await part for part in window[0]])
            window.popleft()
            yield data
    finally:
        for futures in window:
            for future in futures:
                future.cancel()


async def _iterate(blob: bytes, batch: int) -> AsyncIterator[bytes]:
    for part in _batches(blob, batch):
        yield part


async def _receive_points(ch: Channel, expected: int, peer: str, what: str) -> AsyncIterator[bytes]:
    """Yield validated batches of points from a stream until exactly ``expected`` arrived."""
    received = 0
    async for item in ch.stream():
        if not isinstance(item, bytes) or not item or len(item) % POINT_BYTES:
            raise RemoteProtocolError(f"{what}: expected a non-empty blob of points", peer=peer)
        received += len(item) // POINT_BYTES
        if received > expected:
            raise RemoteProtocolError(
                f"{what}: more points than the {expected} announced", peer=peer
            )
        yield item
    if received != expected:
        raise RemoteProtocolError(f"{what}: {received} points, {expected} announced", peer=peer)


def _ticker(progress: Callable[[int, int], None] | None, total: int) -> Callable[[int], None]:
    """Counts points blinded on this side and tells ``progress`` (done, total) after each
    batch: PSI of many ids takes seconds, and without it a party showed no sign of life."""
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    return tick


async def _counted(
    source: AsyncIterator[bytes], tick: Callable[[int], None]
) -> AsyncIterator[bytes]:
    async for part in source:
        tick(len(part) // POINT_BYTES)
        yield part


async def _collect(source: AsyncIterator[bytes]) -> bytes:
    parts = [part async for part in source]
    return b"".join(parts)


class PsiMessage(Message):
    FAMILY = "psi"


@dataclass(frozen=True)
class Hello(PsiMessage, tag="hello"):
    """Both ways: the protocol version and the size of the sender's set."""

    v: Annotated[int, Int(0, 1 << 16)]
    n: Annotated[int, Int(1, MAX_IDS)]


@dataclass(frozen=True)
class Positions(PsiMessage, tag="positions"):
    """Guest -> host: where the common ids sit in the host's set, in the guest's order."""

    positions: Annotated[npt.NDArray[np.int64], Array("int64", max_len=MAX_IDS)]

    def check(self) -> str | None:
        p = self.positions
        if p.size and p.min() < 0:
            return "a position is out of range"
        return "positions repeat" if np.unique(p).size != p.size else None


async def _hello(ch: Channel, n: int, peer: str) -> int:
    await send(ch, Hello(_VERSION, n))
    msg = await recv(ch, Hello)
    if msg.v != _VERSION:
        raise reject(peer, f"PSI hello: expected version {_VERSION}")
    return msg.n


async def psi_guest(
    session: Session,
    hosts: Sequence[str],
    ids: Ids,
    *,
    executor: AnyExecutor | None = None,
    batch: int = DEFAULT_BATCH,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
) -> PsiResult:
    """Run PSI as the guest with every host in ``hosts``; returns the aligned positions.
    ``progress`` is called with (points blinded, points to blind) as batches finish.
    ``workers``: the workers the hashing and blinding are cut for and kept busy with (default:
    one per core, or the executor's), and the size of the pool started when no ``executor``
    is given."""
    if not hosts:
        raise InputError("psi_guest needs at least one host")
    if batch < 1:
        raise InputError("batch must be at least 1")
    _check_workers(workers)
    items = _id_list(ids)
    key = PsiKey.generate()
    async with owned_executor(executor, workers) as (pool, workers):
        points = await _hashed(pool, items, workers)
        channels = {h: session.channel(h, "psi") for h in hosts}
        sizes = dict(
            zip(
                hosts,
                await gather_or_cancel(*(_hello(channels[h], len(items), h) for h in hosts)),
                strict=True,
            )
        )
        tick = _ticker(progress, len(items) + sum(sizes.values()))

        async def broadcast_mine() -> None:
            """Blind our set once and stream each batch to every host as soon as it is ready."""
            outs = [session.channel(h, "mine") for h in hosts]
            mine = _Blinding.of(key, pool, workers, len(items))
            async for part in _counted(_blinded(mine, _iterate(points, batch)), tick):
                for out in outs:
                    await out.send(part)
            for out in outs:
                await out.end_stream()

        async def with_host(host: str) -> tuple[bytes, bytes]:
            back, theirs = session.channel(host, "back"), session.channel(host, "theirs")
            theirs_twice, mine_twice = await gather_or_cancel(
                _collect(
                    _counted(
                        _blinded(
                            _Blinding.of(key, pool, workers, sizes[host]),
                            _receive_points(theirs, sizes[host], host, "host set"),
                        ),
                        tick,
                    )
                ),
                _collect(_receive_points(back, len(items), host, "blinded guest set")),
            )
            return mine_twice, theirs_twice

        _, *pairs = await gather_or_cancel(broadcast_mine(), *(with_host(h) for h in hosts))
        twice = dict(zip(hosts, pairs, strict=True))

    # Intersect over all hosts, in the guest's order.
    common: set[int] | None = None
    host_position: dict[str, dict[int, int]] = {}
    for host, (mine_twice, theirs_twice) in twice.items():
        mine_pos, theirs_pos = intersect_positions(split_blob(mine_twice), split_blob(theirs_twice))
        host_position[host] = dict(zip(mine_pos, theirs_pos, strict=True))
        common = set(mine_pos) if common is None else common & set(mine_pos)
    ordered = np.array(sorted(common or ()), dtype=np.int64)
    for host in hosts:
        lookup = host_position[host]
        theirs = np.fromiter(
            (lookup[i] for i in ordered.tolist()), dtype=np.int64, count=ordered.size
        )
        await send(channels[host], Positions(theirs))
    return PsiResult(ordered, sizes)


async def psi_host(
    session: Session,
    guest: str,
    ids: Ids,
    *,
    executor: AnyExecutor | None = None,
    batch: int = DEFAULT_BATCH,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
) -> PsiResult:
    """Run PSI as a host with ``guest``; returns the positions of the common ids in guest order.
    ``progress`` is called with (points blinded, points to blind) as batches finish;
    ``workers`` as for :func:`psi_guest`."""
    if batch < 1:
        raise InputError("batch must be at least 1")
    _check_workers(workers)
    items = _id_list(ids)
    key = PsiKey.generate()
    ctl = session.channel(guest, "psi")
    async with owned_executor(executor, workers) as (pool, workers):
        points = await _hashed(pool, items, workers)
        guest_size = await _hello(ctl, len(items), guest)
        tick = _ticker(progress, guest_size + len(items))
        incoming, back, theirs = (session.channel(guest, n) for n in ("mine", "back", "theirs"))
        await gather_or_cancel(
            back.send_stream(
                _counted(
                    _blinded(
                        _Blinding.of(key, pool, workers, guest_size),
                        _receive_points(incoming, guest_size, guest, "guest set"),
                    ),
                    tick,
                )
            ),
            theirs.send_stream(
                _counted(
                    _blinded(_Blinding.of(key, pool, workers, len(items)), _iterate(points, batch)),
                    tick,
                )
            ),
        )
    positions = (await recv(ctl, Positions)).positions
    if positions.size > min(len(items), guest_size):
        raise reject(guest, "PSI result: more positions than common ids can be")
    if positions.size and positions.max() >= len(items):
        raise reject(guest, "PSI result: a position is out of range")
    return PsiResult(positions.copy(), {guest: guest_size})
