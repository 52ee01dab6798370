"""The online micro-batcher of a :class:`~p2pboost.hetero.inference.predictor.GuestPredictor`:
requests queued one at a time (or as a group), scored in batches.

Online requests arrive one at a time (``submit``) or in groups (``submit_many``: the
endpoint's list messages). A dispatcher takes whatever requests are waiting (up to
``max_batch``), optionally waits up to ``max_wait`` seconds for more (default 0: batching
comes from the load itself), and scores them as one batch; up to ``max_inflight`` batches are
out at once, and requests that arrive while every slot is busy form the next one. Under heavy
load batches grow and the cost per request falls, so latency stays flat.

Why a class of its own: the queue, its bound, the carry of a group split by a full batch and
the in-flight tasks change for different reasons than the scoring (one round trip per host,
the forest's math, the stability window), and they are tested for different things (order,
back-pressure, no request left hanging on close). The batcher knows nothing of hosts: it is
given a scoring coroutine (the predictor's) and, for requests that carry only an id, a lookup
of the guest's own features. Failures stay per request where they can: an id the lookup or a
host lacks fails that request with :class:`~p2pboost.exceptions.UnknownIdError` and its
batch-mates get their scores; an error of the whole batch fails every request in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import (
    InputError,
    LocalProtocolError,
    P2PBoostError,
    SessionClosed,
    UnknownIdError,
)
from p2pboost.hetero.inference.explain import Contributions
from p2pboost.hetero.inference.feature_store import normalise_ids
from p2pboost.hetero.inference.queued import Group, Request
from p2pboost.hetero.inference.session import MAX_ID_CHARS

__all__ = ["Lookup", "MicroBatcher", "Scorer"]

F64 = npt.NDArray[np.float64]
#: Score one batch: ``(keys, rows, explain)`` to its scores, per host the positions of the
#: rows it lacks, and with ``explain`` the rows' contributions.
Scorer = Callable[
    [npt.NDArray[Any], F64, bool],
    Awaitable[tuple[F64, dict[str, npt.NDArray[np.int64]], Contributions | None]],
]
#: The guest's own features of ``keys``: rows and a mask of the ids found.
Lookup = Callable[[npt.NDArray[Any]], Awaitable[tuple[F64, npt.NDArray[np.bool_]]]]


class MicroBatcher:
    """The queue of online requests and the dispatcher that scores them in batches.

    ``score``: the coroutine that scores one batch. ``n_features``: the guest's features per
    request. ``lookup``: where requests that carry no features find them (``None``: every
    request must carry its row); ``party``: who to name when the lookup lacks an id.
    ``reasons``: how many reason codes a request that asks for them gets. The owner starts
    it (:meth:`start`) and closes it (:meth:`close`), which fails every request not yet
    answered, so none is left hanging.
    """

    def __init__(
        self,
        score: Scorer,
        *,
        n_features: int,
        lookup: Lookup | None,
        party: str,
        max_batch: int,
        max_wait: float,
        max_inflight: int,
        max_queue: int,
        reasons: int = 0,
    ) -> None:
        if max_batch < 1 or max_wait < 0 or max_inflight < 1:
            raise InputError("max_batch and max_inflight must be >= 1 and max_wait >= 0")
        self._score = score
        self.n_features = n_features
        self._lookup = lookup
        self.party = party
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.max_inflight = max_inflight
        self.max_queue = max_queue
        self.reasons = reasons
        #: Requests in arrival order, a call's (``submit``: one; ``submit_many``: its group)
        #: per entry; ``_carry``: the rest of an entry that did not fit the last batch.
        self._queue: asyncio.Queue[list[Request]] = asyncio.Queue()
        self._carry: list[Request] = []
        self._queued = 0  # requests in the queue and the carry (bounded by max_queue)
        self._dispatcher: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self.failed = 0  # requests failed since start (ServingStats.failed)

    @property
    def started(self) -> bool:
        return self._dispatcher is not None

    def start(self) -> None:
        """Start the dispatcher (in the running loop)."""
        if self._dispatcher is not None:
            raise LocalProtocolError("micro-batcher already started")
        self._dispatcher = asyncio.create_task(self._dispatch(), name="p2pboost-dispatcher")

    async def close(self) -> None:
        """Stop the dispatcher, cancel the batches in flight (they fail their requests) and
        fail every request still queued with :class:`~p2pboost.exceptions.SessionClosed`."""
        tasks = [t for t in (self._dispatcher, *self._inflight) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        left = self._carry
        self._carry = []
        while not self._queue.empty():
            left.extend(self._queue.get_nowait())
        for request in left:
            if not request.done():
                request.set_exception(SessionClosed("predictor closed"))

    # -- submitting -------------------------------------------------------------------------

    def submit(self, id: Any, x: Any = None, *, reasons: bool = False) -> asyncio.Future[Any]:
        """Queue one request now; the future resolves to its score (with ``reasons``:
        ``(score, reasons)``) or its error."""
        self._check_started()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            row = self._check_row(x)
            _check_id(id)
            if self._queued >= self.max_queue:
                raise InputError("too many queued requests (max_queue)")
            self._queue.put_nowait([Request(id, row, future, reasons)])
            self._queued += 1
        except P2PBoostError as exc:
            future.set_exception(exc)
        return future

    def submit_many(self, ids: Sequence[Any], X: Any = None) -> asyncio.Future[list[Any]]:
        """Queue several requests now as one entry of the queue, with one future for all
        (see :meth:`~p2pboost.hetero.inference.predictor.GuestPredictor.submit_many`)."""
        self._check_started()
        n = len(ids)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        group = Group(future, n)
        if not n:
            future.set_result([])
            return future
        try:
            rows = self._check_rows(X, n)
        except P2PBoostError as exc:
            for i in range(n):
                group.settle(i, exc)
            return future
        requests: list[Request] = []
        room = self.max_queue - self._queued
        for i, rid in enumerate(ids):
            try:
                _check_id(rid)
                if len(requests) >= room:
                    raise InputError("too many queued requests (max_queue)")
            except P2PBoostError as exc:
                group.settle(i, exc)
                continue
            requests.append(Request(rid, None if rows is None else rows[i], None, False, group, i))
        if requests:  # one queue entry for the group
            self._queue.put_nowait(requests)
            self._queued += len(requests)
        return future

    def _check_started(self) -> None:
        if self._dispatcher is None:
            raise LocalProtocolError("start the predictor first (async with / start())")

    def _check_row(self, x: Any) -> F64 | None:
        if x is None:
            if self._lookup is None:
                raise InputError("give the guest's features x, or a guest_store to look them up")
            return None
        row = np.asarray(x, dtype=np.float64)
        if row.shape != (self.n_features,):
            raise InputError(f"expected {self.n_features} guest features, got shape {row.shape}")
        return row

    def _check_rows(self, X: Any, n: int) -> F64 | None:
        if X is None:
            if self._lookup is None:
                raise InputError("give the guest's features X, or a guest_store to look them up")
            return None
        rows = np.asarray(X, dtype=np.float64)
        if rows.shape != (n, self.n_features):
            raise InputError(
                f"X must be ({n}, {self.n_features}) (one row of guest features per "
                f"id), got {rows.shape}"
            )
        return rows

    # -- batching ---------------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Form batches and keep up to ``max_inflight`` of them in flight.

        A slot is taken *before* a batch is collected, so while every slot is busy requests
        pile up and the next batch is as large as the load makes it.
        """
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(self.max_inflight)
        while True:
            await slots.acquire()
            batch = self._carry or await self._queue.get()
            self._carry = []
            deadline = loop.time() + self.max_wait
            try:
                while len(batch) < self.max_batch:
                    if self._queue.empty():
                        remaining = deadline - loop.time()
                        if remaining <= 0:
                            break
                        try:
                            async with asyncio.timeout(remaining):
                                batch.extend(await self._queue.get())
                        except TimeoutError:
                            break
                    else:
                        batch.extend(self._queue.get_nowait())
            except asyncio.CancelledError:  # closing: close() fails what was taken
                self._carry = batch
                raise
            if len(batch) > self.max_batch:  # a group's rest waits for the next batch
                self._carry, batch = batch[self.max_batch :], batch[: self.max_batch]
            self._queued -= len(batch)
            live = [r for r in batch if not r.done()]  # cancelled by their caller
            if not live:
                slots.release()
                continue
            task = asyncio.create_task(self._run_batch(live))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            task.add_done_callback(lambda _: slots.release())

    async def _run_batch(self, batch: Sequence[Request]) -> None:
        by_kind: dict[bool, list[Request]] = {}
        for r in batch:  # integer and string ids never share a query
            by_kind.setdefault(isinstance(r.id, str | np.str_), []).append(r)
        try:
            for group in by_kind.values():
                await self._run_group(group)
        except asyncio.CancelledError:  # the predictor closes: fail them, never leave a hang
            for r in batch:
                self._fail(r, SessionClosed("predictor closed"))
            raise

    async def _run_group(self, batch: Sequence[Request]) -> None:
        try:
            keys = normalise_ids([r.id for r in batch])
            rows = await self._batch_rows(batch, keys)
            explain = any(r.reasons for r in batch)
            scores, unknown, contributions = await self._score(keys, rows, explain)
        except P2PBoostError as exc:
            for r in batch:
                self._fail(r, exc)
            return
        for host, positions in unknown.items():
            for p in positions.tolist():
                self._fail(batch[p], UnknownIdError(host, [batch[p].id]))
        values: list[Any] = scores.tolist() if scores.ndim == 1 else list(scores)
        reasons = contributions.reasons(self.reasons) if contributions is not None else None
        for i, (r, value) in enumerate(zip(batch, values, strict=True)):
            r.set_result((value, reasons[i]) if r.reasons and reasons else value)

    def _fail(self, request: Request, exc: P2PBoostError) -> None:
        if not request.done():
            self.failed += 1
            request.set_exception(exc)

    async def _batch_rows(self, batch: Sequence[Request], keys: npt.NDArray[Any]) -> F64:
        need = [i for i, r in enumerate(batch) if r.x is None]
        if not need:
            return np.stack([r.x for r in batch if r.x is not None])
        rows = np.empty((len(batch), self.n_features))
        for i, r in enumerate(batch):
            if r.x is not None:
                rows[i] = r.x
        assert self._lookup is not None  # a request without its row needs the lookup
        looked, found = await self._lookup(keys[need])
        rows[need] = looked
        for j in np.flatnonzero(~found).tolist():
            self._fail(batch[need[j]], UnknownIdError(self.party, [batch[need[j]].id]))
        return rows


def _check_id(rid: Any) -> None:
    """One request's id: an int or a short str (cheap: this runs once per request)."""
    if isinstance(rid, bool) or not isinstance(rid, int | str | np.integer | np.str_):
        raise InputError(f"an id must be an int or a str, got {type(rid).__name__}")
    if isinstance(rid, str) and len(rid) > MAX_ID_CHARS:
        raise InputError(f"string ids longer than {MAX_ID_CHARS} characters")
