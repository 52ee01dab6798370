"""Long-lived hetero inference sessions: one round trip per host per batch, rows found by id.

::

    guest                                          host
    -----                                          ----
    serve: {"t": "hello", "v", "fingerprint",
            "trees"}                           ->
                                               <-  {"t": "ready", "tree", "node"}  (or "refuse")
    serve: {"t": "q", "seq", "ids"}            ->  looks the ids up in its feature store,
                                               <-  {"t": "bits", "seq", "bits", "unknown"}
    ...one "q" per batch, for as long as the session lives...
    serve: {"t": "psi", "seq", "session"}      ->  (only when a batch asks for PSI alignment)
                                               <-  {"t": "psi-ready", "seq"}; then PSI runs in
                                                   that sub-session on the batch's ids
    serve: {"t": "bye"}                        ->  the host ends the session

At ``hello`` both sides check the model fingerprint (files of another training are refused
at connect, not at the first request), the guest says how many trees it predicts with (the
host sends no bits for later trees), and the host states which splits it will answer for, in
the order its bits will come: the guest checks that list against its trees once, so a batch
carries nothing but the ids and the packed bits. ``unknown`` lists the positions of ids the
host does not hold (their bits are zero); the guest turns them into
:class:`~p2pboost.exceptions.UnknownIdError` for those rows only.

What crosses the wire: the host receives sample ids, never the guest's features or scores;
the guest receives one bit per (host split, row), never a host value or threshold. The bits
include splits off the row's path (see ``docs/explanation/leakage.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import (
    InputError,
    ModelError,
    P2PBoostError,
    PeerDisconnected,
    RemoteProtocolError,
    SessionClosed,
)
from p2pboost.hetero._messages import (
    MAX_ID_CHARS,
    MAX_SERVE_ROWS,
    PrivateAnswer,
    PrivateQuery,
    Query,
    QueryBits,
    ServeBye,
    ServeHello,
    ServePrivate,
    ServePrivateReady,
    ServePsi,
    ServePsiReady,
    ServeReady,
    ServeRefuse,
)
from p2pboost.hetero.inference.explain import FeatureTokens, check_tokens
from p2pboost.hetero.inference.feature_store import FeatureStore, normalise_ids
from p2pboost.hetero.inference.forest import (
    HostSplits,
    host_bits,
    pack_bits,
    padding_is_clear,
    unpack_bits,
)
from p2pboost.hetero.inference.private_host import PrivateHost
from p2pboost.hetero.inference.private_session import host_private_query, host_private_setup
from p2pboost.hetero.inference.psi_pool import PsiPool
from p2pboost.hetero.model import HostModel
from p2pboost.net.node import Channel, Node, Session
from p2pboost.protocols._messages import Message, recv, reject, send
from p2pboost.protocols.psi import psi_guest, psi_host
from p2pboost.workers import AnyExecutor

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_ID_CHARS",
    "MAX_ROWS",
    "HostAnswer",
    "HostClient",
    "ServePhase",
    "serve_host",
]

logger = logging.getLogger("p2pboost.hetero.serving")

#: The serving protocol's version (2: ``ready`` carries a consenting host's feature tokens).
PROTOCOL_VERSION = 2
CHANNEL = "serve"
DEFAULT_PREFIX = "p2pboost-serve"
#: Rows one query may name (the guest splits larger batches); bounds the host's memory.
MAX_ROWS = MAX_SERVE_ROWS
#: Above this many (split x row) decisions, the work leaves the event loop for a thread.
OFFLOAD_CELLS = 2_000_000

B8 = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]


class ServePhase(Enum):
    """Where a serving session is (for logs and error messages)."""

    CONNECTING = "connecting"
    SERVING = "serving"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True, eq=False)
class HostAnswer:
    """One host's answer to a query: ``go_left[split, row]`` and the rows it lacks;
    ``tokens``: the session's feature token per split of a consenting host, else None."""

    go_left: B8
    unknown: I64
    tokens: I64 | None = None


# -- wire validation ----------------------------------------------------------------------------


def ids_to_wire(ids: npt.NDArray[Any]) -> I64 | list[str]:
    """Integer ids travel as an int64 array, string ids as a list of str."""
    return ids if ids.dtype.kind == "i" else [str(i) for i in ids.tolist()]


def ids_from_wire(ids: npt.NDArray[Any] | list[str], peer: str, max_rows: int) -> npt.NDArray[Any]:
    """The ids of a query (already type-checked by the message rules), within ``max_rows``."""
    arr = ids if isinstance(ids, np.ndarray) else np.array(ids, dtype=str).reshape(-1)
    if arr.size > max_rows:
        raise reject(peer, f"{arr.size} ids in one query (max {max_rows})")
    return arr


# -- host -----------------------------------------------------------------------------------------


async def serve_host(
    node: Node,
    model: HostModel,
    store: FeatureStore,
    *,
    session_prefix: str = DEFAULT_PREFIX,
    sessions: int | None = None,
    max_rows: int = MAX_ROWS,
    executor: AnyExecutor | None = None,
    on_session: Callable[[str], None] | None = None,
    private: bool | None = None,
    explain_features: bool = False,
    on_tokens: Callable[[FeatureTokens], None] | None = None,
) -> None:
    """Answer the guest's inference sessions until ``sessions`` of them ended (None: forever).

    ``private``: None answers the mode each guest session asks for; True only private
    inference (:mod:`~p2pboost.hetero.inference.private_session`), False only decision bits.
    ``explain_features``: this host consents to per-feature explanations: each session sends
    the guest an opaque token per split, drawn anew per session (:class:`FeatureTokens`),
    and ``on_tokens`` receives them, so the host alone can map the guest's ``host:token``
    columns back to its feature names.

    Sessions whose id does not start with ``session_prefix`` or that another party opened are
    refused. One failing session (a guest that breaks the protocol or goes away) is logged and
    the host keeps serving; with a finite ``sessions`` the first such error is raised at the
    end, so a one-shot batch prediction does not report success after a failure.
    """
    if store.n_features != model.n_features:
        raise InputError(
            f"the feature store has {store.n_features} features, the model {model.n_features}"
        )
    splits = HostSplits.of(model)

    def tokens_for() -> FeatureTokens | None:
        if not explain_features:
            return None
        tokens = FeatureTokens.draw(model)
        if on_tokens is not None:
            on_tokens(tokens)
        return tokens

    done = 0
    errors: list[BaseException] = []
    tasks: set[asyncio.Task[None]] = set()
    psi_pool = PsiPool(executor)  # one for every session's PSIs (psi_pool.py says why)
    finished = asyncio.Event()

    def ended(task: asyncio.Task[None]) -> None:
        nonlocal done
        tasks.discard(task)
        done += 1
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            assert exc is not None
            errors.append(exc)
            logger.warning("inference session ended with an error: %s", exc)
        finished.set()

    accept: asyncio.Future[Session] | None = None
    ended_one: asyncio.Future[Any] | None = None
    try:
        while sessions is None or done < sessions:
            if accept is None:
                accept = asyncio.ensure_future(node.accept_session())
            ended_one = asyncio.ensure_future(finished.wait())
            await asyncio.wait([accept, ended_one], return_when=asyncio.FIRST_COMPLETED)
            ended_one.cancel()
            finished.clear()
            if not accept.done():
                continue  # a session ended: check the count again
            session, accept = accept.result(), None
            if not session.id.startswith(session_prefix) or set(session.peers) != {model.guest}:
                await session.abort(f"not an inference session with {model.guest!r}")
                continue
            if sessions is not None and done + len(tasks) >= sessions:
                await session.abort("this host serves no more sessions")
                continue
            if on_session is not None:
                on_session(session.id)
            task = asyncio.create_task(
                _host_session(
                    node,
                    session,
                    model,
                    store,
                    splits,
                    max_rows,
                    executor,
                    psi_pool,
                    private,
                    tokens_for,
                )
            )
            tasks.add(task)
            task.add_done_callback(ended)
    finally:
        waiting = [f for f in (accept, ended_one) if f is not None]
        for fut in [*waiting, *tasks]:
            fut.cancel()
        await asyncio.gather(*waiting, *tasks, return_exceptions=True)
        await psi_pool.close()
    if errors:
        raise errors[0]


async def _host_session(
    node: Node,
    session: Session,
    model: HostModel,
    store: FeatureStore,
    splits: HostSplits,
    max_rows: int,
    executor: AnyExecutor | None,
    psi_pool: PsiPool,
    private: bool | None,
    tokens_for: Callable[[], FeatureTokens | None],
) -> None:
    guest = model.guest
    async with session:
        ch = session.channel(guest, CHANNEL)
        hello = await recv(ch, ServeHello)
        refusal: P2PBoostError | None = None
        if hello.v != PROTOCOL_VERSION:
            refusal = reject(guest, f"protocol version {hello.v!r}")
            reason = f"this host speaks protocol version {PROTOCOL_VERSION} only"
        elif hello.fingerprint != model.fingerprint:
            reason = (
                f"host model fingerprint {model.fingerprint[:12]} differs from the guest's "
                f"{hello.fingerprint[:12]}: the files are from different trainings"
            )
            refusal = ModelError(f"{guest}: {reason}")
        if refusal is not None:
            # Closed, not aborted, so that the guest reads the reason before the end.
            await send(ch, ServeRefuse(reason))
            await session.close()
            raise refusal
        splits = splits.first_trees(hello.trees)  # no bits for trees the guest does not use
        tokens = tokens_for()
        token_arr = None if tokens is None else tokens.of_splits(splits)
        await send(ch, ServeReady(PROTOCOL_VERSION, splits.tree, splits.node, token_arr))
        secret: PrivateHost | None = None
        try:
            while True:
                kinds: Any = (Query, ServePsi, ServeBye, ServePrivate, PrivateQuery)
                msg: Message = await recv(ch, kinds)
                if isinstance(msg, ServeBye):
                    return
                if isinstance(msg, ServePsi):
                    await _host_psi(node, ch, msg, store, guest, psi_pool)
                    continue
                if isinstance(msg, ServePrivate):
                    if private is False or secret is not None:
                        raise reject(guest, "private setup refused (this host answers bits)")
                    secret = host_private_setup(model, msg, hello.trees, executor)
                    await send(ch, ServePrivateReady(secret.seal_key.public))
                    continue
                if (secret is not None) != isinstance(msg, PrivateQuery) or (
                    private and secret is None
                ):
                    raise reject(guest, "a query of the other mode than this session's")
                if isinstance(msg, PrivateQuery):
                    assert secret is not None
                    ids = ids_from_wire(msg.ids, guest, max_rows)
                    await host_private_query(ch, msg, secret, model, ids, store)
                    continue
                assert isinstance(msg, Query)
                await _host_query(ch, msg, model, store, splits, max_rows)
        finally:
            if secret is not None:
                secret.close()


async def _host_query(
    ch: Channel,
    msg: Query,
    model: HostModel,
    store: FeatureStore,
    splits: HostSplits,
    max_rows: int,
) -> None:
    """Answer one query with the decision bits of the batch's rows."""
    guest = model.guest
    seq = msg.seq
    ids = ids_from_wire(msg.ids, guest, max_rows)
    X, found = await store.lookup(ids)
    if X.shape != (ids.size, model.n_features):
        raise InputError(f"feature store returned {X.shape} for {ids.size} ids")
    if ids.size * splits.tree.size > OFFLOAD_CELLS:
        bits = await asyncio.to_thread(host_bits, splits, X)
    else:
        bits = host_bits(splits, X)
    bits[:, ~found] = False
    unknown = np.flatnonzero(~found).astype(np.int64)
    await send(ch, QueryBits(seq, pack_bits(bits), unknown))


async def _host_psi(
    node: Node,
    ch: Channel,
    msg: ServePsi,
    store: FeatureStore,
    guest: str,
    psi_pool: PsiPool,
) -> None:
    """Align one batch by PSI: the host learns only which of the batch's ids it holds."""
    ids = store.ids()
    executor = await psi_pool.ready(len(ids))  # a pool's processes start once, not per PSI
    async with node.session(msg.session, peers=[guest]) as sub:
        await send(ch, ServePsiReady(msg.seq))
        await psi_host(sub, guest, ids, executor=executor)


# -- guest ----------------------------------------------------------------------------------------


class HostClient:
    """The guest's end of the inference session with one host (opened on first use).

    Queries may overlap: each carries a sequence number, a reader task hands every answer to
    the query waiting for it, and the host answers in order. So the guest can prepare and
    finish one batch while the host evaluates the next.

    A session that failed (the host restarted, went away, or timed out) is dropped and the
    next query opens a new one, so serving recovers by itself once the host is back.
    """

    def __init__(
        self,
        node: Node,
        host: str,
        *,
        fingerprint: str,
        expected_tree: I64,
        expected_node: I64,
        trees: int,
        timeout: float,
        session_prefix: str = DEFAULT_PREFIX,
        executor: AnyExecutor | None = None,
        private: ServePrivate | None = None,
        psi_pool: PsiPool | None = None,
    ) -> None:
        self.node = node
        self.host = host
        #: Private inference's setup for this host (None: decision bits), and the host's
        #: seal key for the current session once it is open.
        self.private = private
        self.seal = b""
        self.fingerprint = fingerprint
        self.expected_tree = expected_tree
        self.expected_node = expected_node
        self.trees = trees
        self.timeout = timeout
        self.session_prefix = session_prefix
        self.executor = executor
        #: The executor of this client's PSIs: the predictor's, shared by every host's client.
        self.psi_pool = psi_pool if psi_pool is not None else PsiPool(executor)
        self._own_pool = psi_pool is None
        self.phase = ServePhase.CONNECTING
        self._session: Session | None = None
        self._channel: Channel | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[Message]] = {}
        self._seq = 0
        self._connect_lock = asyncio.Lock()
        #: The open session's feature tokens (a consenting host), else None.
        self.tokens: I64 | None = None

    @property
    def n_splits(self) -> int:
        return int(self.expected_tree.size)

    async def connect(self) -> None:
        """Open the session now (checks the model fingerprint), within ``timeout``."""
        await self._bounded(self._open, "connect")

    async def query(self, ids: npt.NDArray[Any]) -> HostAnswer:
        """One round trip: the host's bits for ``ids``."""
        result: HostAnswer = await self._bounded(lambda: self._query(ids), "answer")
        return result

    async def private_query(
        self, ids: npt.NDArray[Any], batch: int, ct: Any, sealed: bytes, nxt: bytes
    ) -> PrivateAnswer:
        """One private round trip (see :mod:`~p2pboost.hetero.inference.private_session`)."""

        async def ask() -> PrivateAnswer:
            reply = await self._ask(
                lambda seq: PrivateQuery(seq, ids_to_wire(ids), batch, ct, sealed, nxt)
            )
            if not isinstance(reply, PrivateAnswer):
                raise reject(self.host, "expected a private answer")
            return reply

        result: PrivateAnswer = await self._bounded(ask, "answer")
        return result

    async def psi(self, ids: npt.NDArray[Any]) -> I64:
        """Positions of ``ids`` the host holds (PSI: it learns no other id of the batch)."""
        executor = await self.psi_pool.ready(ids.size)  # local start-up: not host_timeout's
        result: I64 = await self._bounded(lambda: self._psi(ids, executor), "run PSI")
        return result

    async def close(self) -> None:
        """Say goodbye and leave the session (best effort: the host may be gone)."""
        async with self._connect_lock:
            session, channel = self._session, self._channel
            if channel is not None and session is not None:
                with contextlib.suppress(P2PBoostError, TimeoutError):
                    async with asyncio.timeout(self.timeout):
                        await send(channel, ServeBye())
            await self._forget(session, "closed")
            if session is not None:
                await session.close()  # closed, not aborted: the host reads the "bye"
            self.phase = ServePhase.CLOSED
        if self._own_pool:
            await self.psi_pool.close()

    async def _bounded(self, work: Callable[[], Awaitable[Any]], what: str) -> Any:
        """Run ``work`` within ``timeout``; a stale session (the host restarted, or ended it)
        is replaced once within the same deadline; a failure drops the session it used."""
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    return await work()
                except (PeerDisconnected, SessionClosed) as exc:
                    if not self.node.is_connected(self.host):
                        raise PeerDisconnected(
                            self.host, f"host {self.host!r} went away: {exc}"
                        ) from exc
                    logger.info("session with %s ended (%s); opening a new one", self.host, exc)
                    return await work()
        except TimeoutError:
            await self._drop(self._session, "timed out")
            raise PeerDisconnected(
                self.host,
                f"host {self.host!r} did not {what} within {self.timeout:g} s (host_timeout); "
                "is it running and reachable?",
            ) from None
        except (ModelError, RemoteProtocolError, InputError):
            await self._drop(self._session, "protocol error")
            raise

    async def _drop(self, session: Session | None, reason: str) -> None:
        """Abandon ``session`` (if still current) after a failure, and abort it."""
        if session is None or session is not self._session:
            return
        await self._forget(session, reason)
        with contextlib.suppress(P2PBoostError):
            await session.abort(reason)

    async def _forget(self, session: Session | None, reason: str) -> None:
        """Stop using ``session`` (if still current): fail its waiting queries, end its reader."""
        if session is None or session is not self._session:
            return
        reader, self._reader = self._reader, None
        self._session = self._channel = None
        self.phase = ServePhase.CONNECTING
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(SessionClosed("inference session dropped", reason=reason))
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _open(self) -> tuple[Session, Channel]:
        async with self._connect_lock:
            if self._session is not None and self._channel is not None:
                return self._session, self._channel
            await self.node.wait_connected(self.host)
            sid = f"{self.session_prefix}-{secrets.token_hex(8)}"
            session = self.node.session(sid, peers=[self.host])
            self._session = session
            try:
                ch = await self._hello(session)
            except BaseException:
                await self._drop(session, "hello failed")
                raise
            self._channel = ch
            self._reader = asyncio.create_task(self._read(session, ch))
            self.phase = ServePhase.SERVING
            return session, ch

    async def _hello(self, session: Session) -> Channel:
        ch = session.channel(self.host, CHANNEL)
        await send(ch, ServeHello(PROTOCOL_VERSION, self.fingerprint, self.trees))
        reply = await recv(ch, (ServeReady, ServeRefuse))
        if isinstance(reply, ServeRefuse):
            raise ModelError(f"host {self.host!r} refused: {reply.reason}")
        tree, node = reply.tree, reply.node
        same = np.array_equal(tree, self.expected_tree) and np.array_equal(node, self.expected_node)
        if not same:
            raise ModelError(
                f"host {self.host!r} answers for other splits than this model's "
                "(a model file of another training?)"
            )
        problem = check_tokens(reply.tokens, tree.size)
        if problem is not None:
            raise reject(self.host, problem)
        self.tokens = reply.tokens
        if self.private is not None:
            await send(ch, self.private)
            ready = await recv(ch, ServePrivateReady)
            self.seal = ready.seal
        return ch

    async def _read(self, session: Session, ch: Channel) -> None:
        """Hand each answer to the query waiting for its sequence number."""
        try:
            while True:
                reply = await recv(ch, (QueryBits, ServePsiReady, PrivateAnswer))
                future = self._waiting.pop(reply.seq, None)
                if future is None:
                    raise reject(self.host, "answered no pending query")
                if not future.done():
                    future.set_result(reply)
        except P2PBoostError as exc:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(exc)
            self._waiting = {}
            if session is self._session:
                self._reader = None  # _drop must not cancel the task it runs in
                await self._drop(session, str(exc))

    async def _ask(self, make: Callable[[int], Message]) -> Message:
        """Send ``make(seq)`` with the next sequence number; wait for its answer."""
        _, ch = await self._open()
        self._seq += 1
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[self._seq] = future  # a cancelled wait leaves it: the reader skips it
        await send(ch, make(self._seq))
        return await future

    async def _query(self, ids: npt.NDArray[Any]) -> HostAnswer:
        reply = await self._ask(lambda seq: Query(seq, ids_to_wire(ids)))
        if not isinstance(reply, QueryBits):
            raise reject(self.host, "expected 'bits'")
        return self._check_answer(reply, ids.size)

    def _check_answer(self, reply: QueryBits, n: int) -> HostAnswer:
        bits, unknown = reply.bits, reply.unknown
        if bits.shape != (self.n_splits * ((n + 7) // 8),):
            raise reject(self.host, "decision bits of the wrong size")
        if not padding_is_clear(bits, self.n_splits, n):
            raise reject(self.host, "decision bits set beyond the rows")
        if unknown.size and (
            unknown.min() < 0 or unknown.max() >= n or np.any(np.diff(unknown) <= 0)
        ):
            raise reject(self.host, "'unknown' must list increasing row positions")
        return HostAnswer(unpack_bits(bits, self.n_splits, n), unknown, self.tokens)

    async def _psi(self, ids: npt.NDArray[Any], executor: AnyExecutor) -> I64:
        sid = f"psi-{secrets.token_hex(8)}"
        reply = await self._ask(lambda seq: ServePsi(seq, sid))
        if not isinstance(reply, ServePsiReady):
            raise reject(self.host, "expected 'psi-ready'")
        async with self.node.session(sid, peers=[self.host]) as sub:
            result = await psi_guest(sub, [self.host], ids.tolist(), executor=executor)
        return result.positions


def check_ids(ids: Any) -> npt.NDArray[Any]:
    """A batch's ids, normalised; unique (a duplicate would make the answer ambiguous)."""
    arr = normalise_ids(ids)
    if np.unique(arr).size != arr.size:
        raise InputError("ids in one batch must be unique")
    if arr.dtype.kind == "U" and arr.size and max(len(i) for i in arr.tolist()) > MAX_ID_CHARS:
        raise InputError(f"string ids longer than {MAX_ID_CHARS} characters")
    return arr
