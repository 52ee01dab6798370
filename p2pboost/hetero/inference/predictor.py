"""Online and batch inference for a trained hetero model: requests in, scores out.

The guest runs a :class:`GuestPredictor` on its node; every host runs :func:`serve_host`
(or ``HeteroHost.aserve``) with a :class:`~p2pboost.hetero.inference.feature_store.FeatureStore` of
its features. A batch costs exactly one message to each host and one answer back, whatever the
number of trees and their depth (:mod:`p2pboost.hetero.inference.session`).

Online requests arrive one at a time (``predict``, ``stream``). They are *micro-batched*: a
dispatcher takes whatever requests are waiting (up to ``max_batch``), optionally waits up to
``max_wait`` seconds for more (default 0: batching comes from the load itself), and sends
them as one batch; up to ``max_inflight`` batches are out at once, and requests that arrive
while every slot is busy form the next one. Under heavy load batches grow and the cost per
request falls, so latency stays flat. The queue and its dispatcher are a
:class:`~p2pboost.hetero.inference.batcher.MicroBatcher` the predictor owns (started with it,
failing its unanswered requests when it closes); the predictor keeps the scoring itself.

Failures are per request where they can be: an id a host does not hold fails that request
with :class:`~p2pboost.exceptions.UnknownIdError` and its batch-mates get their scores; a host
that does not answer within ``host_timeout`` fails the batch with
:class:`~p2pboost.exceptions.PeerDisconnected` (fast, rather than queueing behind a re-dial),
and the next batch tries again, so serving recovers by itself when the host is back.

::

    async with Node("guest", ...) as node:
        async with GuestPredictor(node, GuestModel.load("guest.json")) as predictor:
            p = await predictor.predict("customer-17", x)                # one request
            async for pred in predictor.stream(requests):                 # in request order
                ...
            scores = await predictor.predict_batch(ids, X)                # a batch job

Explanations ride on the same round trip (:mod:`p2pboost.hetero.inference.explain`):
``explain_batch`` gives every row's TreeSHAP contributions, and with ``reasons=k`` the online
``predict_reasons`` (and every streamed :class:`Prediction`) carries the ``k`` players that
raised the score most, for an adverse-action notice. A ``window``
(:class:`~p2pboost.gbdt.stability_window.StabilityWindow` on the training scores, in the
scale of ``output``) is fed every batch's scores; :meth:`GuestPredictor.stability` reads its
PSI, which the endpoint publishes on ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, make_keypair
from p2pboost.exceptions import (
    InputError,
    LocalProtocolError,
    P2PBoostError,
    SessionClosed,
    UnknownIdError,
)
from p2pboost.gbdt.stability_window import StabilityWindow
from p2pboost.hetero._messages import ServePrivate
from p2pboost.hetero.inference.batcher import MicroBatcher
from p2pboost.hetero.inference.explain import Contributions, guest_contributions
from p2pboost.hetero.inference.feature_store import FeatureStore
from p2pboost.hetero.inference.forest import FlatForest
from p2pboost.hetero.inference.private import PrivateForest
from p2pboost.hetero.inference.private_session import PrivateScorer, setup_message
from p2pboost.hetero.inference.psi_pool import PsiPool
from p2pboost.hetero.inference.session import (
    DEFAULT_PREFIX,
    MAX_ROWS,
    OFFLOAD_CELLS,
    HostClient,
    check_ids,
    serve_host,
)
from p2pboost.hetero.model import GuestModel
from p2pboost.net.node import Node
from p2pboost.protocols._tasks import gather_or_cancel
from p2pboost.workers import AnyExecutor

__all__ = ["GuestPredictor", "Prediction", "ServingStats", "serve_host"]

logger = logging.getLogger("p2pboost.hetero.serving")

F64 = npt.NDArray[np.float64]
Score = float | F64
Output = Literal["proba", "margin"]
#: A request's reasons: the top players' names and contributions, strongest first.
Reasons = list[tuple[str, float]]


@dataclass(frozen=True, slots=True)
class Prediction:
    """The outcome of one streamed request: ``score`` or the ``error`` that request met;
    ``reasons`` with a predictor made with ``reasons=k``."""

    id: Any
    score: Score | None
    error: P2PBoostError | None = None
    reasons: Reasons | None = None


@dataclass(frozen=True, slots=True)
class ServingStats:
    """Counters since start: batches sent, rows scored, requests failed, messages per host."""

    batches: int
    rows: int
    failed: int
    messages_to_hosts: dict[str, int]


class GuestPredictor:
    """The guest's inference service (see the module docstring).

    ``output``: ``"proba"`` (probabilities, or values for regression, as ``predict``) or
    ``"margin"`` (raw scores). ``guest_store`` lets requests carry only an id: the guest's own
    features are then looked up there. ``n_rounds`` defaults to the best iteration.
    ``private``: private inference (the guest learns each row's score and no host decision;
    :mod:`~p2pboost.hetero.inference.private_session`) under ``keys`` (default: a fresh
    2048-bit Okamoto-Uchiyama pair, made once for the predictor's life).
    ``reasons``: how many reason codes :meth:`predict_reasons` and :meth:`stream` give per
    request (0: none; single-output models). ``window``: a stability monitor fed with every
    batch's scores (see the module docstring).
    """

    def __init__(
        self,
        node: Node,
        model: GuestModel,
        *,
        guest_store: FeatureStore | None = None,
        max_batch: int = 512,
        max_wait: float = 0.0,
        max_inflight: int = 2,
        host_timeout: float = 5.0,
        output: Output = "proba",
        n_rounds: int | None = None,
        max_queue: int = 100_000,
        session_prefix: str = DEFAULT_PREFIX,
        executor: AnyExecutor | None = None,
        private: bool = False,
        keys: tuple[AnyPublicKey, AnyPrivateKey] | None = None,
        reasons: int = 0,
        window: StabilityWindow | None = None,
    ) -> None:
        if isinstance(reasons, bool) or not isinstance(reasons, int) or reasons < 0:
            raise InputError(f"reasons must be an integer >= 0, got {reasons!r}")
        if reasons and model.base_margin.size != 1:
            raise InputError("reason codes need a single-output model")
        if max_batch < 1 or max_batch > MAX_ROWS:
            raise InputError(f"max_batch must be in [1, {MAX_ROWS}], got {max_batch}")
        if max_wait < 0 or not host_timeout > 0 or max_inflight < 1:
            raise InputError("max_wait must be >= 0, host_timeout > 0 and max_inflight >= 1")
        if output not in ("proba", "margin"):
            raise InputError(f"output must be 'proba' or 'margin', got {output!r}")
        if guest_store is not None and guest_store.n_features != model.n_features:
            raise InputError(
                f"guest_store has {guest_store.n_features} features, the model {model.n_features}"
            )
        self.node = node
        self.model = model
        self.guest_store = guest_store
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.max_inflight = max_inflight
        self.host_timeout = host_timeout
        self.output = output
        self.forest = FlatForest(model, n_rounds)
        self._private: PrivateScorer | None = None
        setups: list[ServePrivate | None] = [None] * len(model.hosts)
        if private:
            padded = PrivateForest(model, n_rounds)
            pair = keys if keys is not None else make_keypair("ou", 2048)
            self._private = PrivateScorer(padded, pair, executor)
            setups = [setup_message(padded, pair[0], k) for k in range(1, len(model.hosts) + 1)]
        self.n_rounds = n_rounds
        self.reasons = reasons
        self.window = window
        self._psi_pool = PsiPool(executor)  # every host's PSIs, one pool (psi_pool.py)
        self._clients = [
            HostClient(
                node,
                host,
                fingerprint=model.fingerprint,
                expected_tree=self.forest.host_tree[k - 1],
                expected_node=self.forest.host_node[k - 1],
                trees=self.forest.n_trees,
                timeout=host_timeout,
                session_prefix=session_prefix,
                executor=executor,
                private=setups[k - 1],
                psi_pool=self._psi_pool,
            )
            for k, host in enumerate(model.hosts, start=1)
        ]
        self.max_queue = max_queue
        #: The online queue and its dispatcher (batcher.py), scoring with ``_score``.
        self._batcher = MicroBatcher(
            self._score,
            n_features=model.n_features,
            lookup=None if guest_store is None else guest_store.lookup,
            party=node.party_id,
            max_batch=max_batch,
            max_wait=max_wait,
            max_inflight=max_inflight,
            max_queue=max_queue,
            reasons=reasons,
        )
        self._closed = False
        self._batches = self._rows = 0
        #: Called with each batch's rows and seconds (the endpoint's metrics).
        self.on_batch: Callable[[int, float], None] | None = None
        self._messages_at_start: dict[str, int] = {}

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, *, connect: bool = True) -> None:
        """Start the dispatcher; with ``connect`` open every host session now, so a host with
        another model (fingerprint) or one that is unreachable is reported at start."""
        if self._batcher.started:
            raise LocalProtocolError("predictor already started")
        if connect:
            await gather_or_cancel(*(c.connect() for c in self._clients))
        stats = self.node.stats().peers  # after the hellos: stats() counts batches only
        self._messages_at_start = {
            c.host: stats[c.host].messages_sent if c.host in stats else 0 for c in self._clients
        }
        self._batcher.start()

    async def close(self) -> None:
        """Fail queued requests, stop the dispatcher and say goodbye to the hosts."""
        if self._closed:
            return
        self._closed = True
        await self._batcher.close()
        await asyncio.gather(*(c.close() for c in self._clients))
        await self._psi_pool.close()
        if self._private is not None:
            self._private.close()

    async def __aenter__(self) -> GuestPredictor:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def stats(self) -> ServingStats:
        peers = self.node.stats().peers
        sent = {
            c.host: (peers[c.host].messages_sent if c.host in peers else 0)
            - self._messages_at_start.get(c.host, 0)
            for c in self._clients
        }
        return ServingStats(self._batches, self._rows, self._batcher.failed, sent)

    def stability(self) -> dict[str, Any] | None:
        """The window's ``{"rows", "psi", "band"}`` now, or None without a window."""
        return None if self.window is None else self.window.snapshot()

    # -- batch ------------------------------------------------------------------------------

    async def explain_batch(self, ids: Any, X: Any = None) -> Contributions:
        """TreeSHAP contributions of a batch whose ids every host holds (one round trip per
        host per ``MAX_ROWS`` rows): per guest feature, per host (or per feature token of a
        host that consents), then the base value."""
        self._check_open()
        keys = check_ids(ids)
        rows = await self._guest_rows(keys, X)
        parts: list[Contributions] = []
        for start in range(0, max(keys.size, 1), MAX_ROWS):
            stop = start + MAX_ROWS
            _, unknown, contributions = await self._score(keys[start:stop], rows[start:stop], True)
            if unknown:
                host, positions = next(iter(unknown.items()))
                raise UnknownIdError(host, keys[start:stop][positions].tolist())
            assert contributions is not None
            parts.append(contributions)
        names = parts[0].names
        if any(p.names != names for p in parts):  # a host reconnected with new tokens
            raise LocalProtocolError("a host's feature tokens changed during the batch")
        return Contributions(np.concatenate([p.values for p in parts]), names)

    async def predict_batch(
        self, ids: Any, X: Any = None, *, align: Literal["ids", "psi"] = "ids"
    ) -> F64:
        """Scores for a batch: one round trip per host (per ``MAX_ROWS`` rows).

        ``X`` holds the guest's features of those ids (or ``None`` with a ``guest_store``).
        ``align="ids"``: every host must hold every id, else :class:`UnknownIdError` names
        the host and the ids. ``align="psi"``: the hosts learn only which of the batch's ids
        they hold (private set intersection first); rows not held by every host are NaN.
        """
        self._check_open()
        keys = check_ids(ids)
        rows = await self._guest_rows(keys, X)
        if align == "ids":
            scores, unknown = await self._score_chunked(keys, rows)
            if unknown:
                host, positions = next(iter(unknown.items()))
                raise UnknownIdError(host, keys[positions].tolist())
            return scores
        if align != "psi":
            raise InputError(f"align must be 'ids' or 'psi', got {align!r}")
        keep = np.arange(keys.size)
        for client in self._clients:
            held = await client.psi(keys[keep])
            keep = keep[np.sort(held)]
        out = np.full(self._score_shape(keys.size), np.nan)
        if keep.size:
            scores, unknown = await self._score_chunked(keys[keep], rows[keep])
            if unknown:  # the store changed between PSI and the query
                host, positions = next(iter(unknown.items()))
                raise UnknownIdError(host, keys[keep][positions].tolist())
            out[keep] = scores
        return out

    async def _score_chunked(
        self, keys: npt.NDArray[Any], rows: F64
    ) -> tuple[F64, dict[str, npt.NDArray[np.int64]]]:
        parts: list[F64] = []
        unknown: dict[str, list[npt.NDArray[np.int64]]] = {}
        for start in range(0, max(keys.size, 1), MAX_ROWS):
            stop = start + MAX_ROWS
            scores, missing, _ = await self._score(keys[start:stop], rows[start:stop])
            parts.append(scores)
            for host, pos in missing.items():
                unknown.setdefault(host, []).append(pos + start)
        merged = {h: np.concatenate(p) for h, p in unknown.items()}
        return np.concatenate(parts), merged

    async def _score(
        self, keys: npt.NDArray[Any], rows: F64, explain: bool = False
    ) -> tuple[F64, dict[str, npt.NDArray[np.int64]], Contributions | None]:
        """One batch, one round trip per host: scores, per host the rows it lacks, and with
        ``explain`` the rows' contributions.

        ``keys`` may repeat (two online requests for one customer with different guest
        features): hosts are asked for each id once and their bits fanned out to the rows.
        """
        t0 = time.perf_counter()
        if self._private is not None:
            if explain:
                raise InputError(
                    "explanations need the hosts' decision bits, which private inference "
                    "withholds: use a predictor with private=False"
                )
            margin, unknown = await self._private.score(self._clients, keys, rows)
            scores, unknown = self._scored(keys, margin, unknown, t0)
            return scores, unknown, None
        unique, inverse = np.unique(keys, return_inverse=True)
        answers = await gather_or_cancel(*(c.query(unique) for c in self._clients))
        bits = [a.go_left[:, inverse] for a in answers]
        if keys.size * self.forest.n_nodes > OFFLOAD_CELLS:
            margin = await asyncio.to_thread(self.forest.margin, rows, bits)
        else:
            margin = self.forest.margin(rows, bits)
        unknown = {
            c.host: np.flatnonzero(np.isin(inverse, a.unknown))
            for c, a in zip(self._clients, answers, strict=True)
            if a.unknown.size
        }
        scores, unknown = self._scored(keys, margin, unknown, t0)
        contributions = None
        if explain:
            tokens = [a.tokens for a in answers]
            contributions = await asyncio.to_thread(
                guest_contributions, self.model, rows, bits, tokens, n_rounds=self.n_rounds
            )
        return scores, unknown, contributions

    def _scored(
        self,
        keys: npt.NDArray[Any],
        margin: F64,
        unknown: dict[str, npt.NDArray[np.int64]],
        t0: float,
    ) -> tuple[F64, dict[str, npt.NDArray[np.int64]]]:
        """Count the batch, turn its margins into the predictor's output, and feed the
        stability window with the scores of the rows every host held."""
        self._batches += 1
        self._rows += int(keys.size)
        if self.on_batch is not None:
            self.on_batch(int(keys.size), time.perf_counter() - t0)
        scores = margin if self.output == "margin" else self.model.transform(margin)
        if self.window is not None and scores.ndim == 1:
            known = np.ones(keys.size, dtype=np.bool_)
            for positions in unknown.values():
                known[positions] = False
            self.window.add(scores[known])
        return scores, unknown

    def _score_shape(self, n: int) -> tuple[int, ...]:
        k = self.forest.n_outputs
        return (n, k) if self.output == "margin" or k > 1 else (n,)

    async def _guest_rows(self, keys: npt.NDArray[Any], X: Any) -> F64:
        if X is None:
            if self.guest_store is None:
                raise InputError("give the guest's features X, or a guest_store to look them up")
            rows, found = await self.guest_store.lookup(keys)
            if not found.all():
                raise UnknownIdError(self.node.party_id, keys[~found].tolist())
            return rows
        rows = np.asarray(X, dtype=np.float64)
        if rows.shape != (keys.size, self.model.n_features):
            raise InputError(
                f"X must be ({keys.size}, {self.model.n_features}) (one row of guest features "
                f"per id), got {rows.shape}"
            )
        return rows

    # -- online -----------------------------------------------------------------------------

    async def predict(self, id: Any, x: Any = None) -> Score:
        """Score of one request (micro-batched with concurrent ones)."""
        score: Score = await self.submit(id, x)
        return score

    async def predict_reasons(self, id: Any, x: Any = None) -> tuple[Score, Reasons]:
        """Score and the top ``reasons`` players of one request (micro-batched)."""
        if not self.reasons:
            raise InputError("make the predictor with reasons=k to ask for reason codes")
        result: tuple[Score, Reasons] = await self.submit(id, x, reasons=True)
        return result

    def submit(self, id: Any, x: Any = None, *, reasons: bool = False) -> asyncio.Future[Any]:
        """Queue one request now; the future resolves to its score (with ``reasons``:
        ``(score, reasons)``) or its error."""
        self._check_open()
        return self._batcher.submit(id, x, reasons=reasons)

    def submit_many(self, ids: Sequence[Any], X: Any = None) -> asyncio.Future[list[Any]]:
        """Queue several requests now, as :meth:`submit` would one by one, with one future
        for all: it resolves to a list in the order of ``ids`` holding each request's score
        or the :class:`~p2pboost.exceptions.P2PBoostError` it met (as a value: one request's
        error never fails the others). ``X``: their guest features, ``(len(ids),
        n_features)``, or ``None`` with a ``guest_store``; a bad ``X`` fails every request.

        For callers that receive requests in groups (the endpoint's list messages): the
        group is one entry of the queue (split where a micro-batch is full, so its requests
        may ride several) and costs one future and one wake-up of its waiter rather than
        one per request. ``max_queue`` counts its requests, as it counts single ones.
        """
        self._check_open()
        return self._batcher.submit_many(ids, X)

    async def stream(
        self, requests: AsyncIterable[tuple[Any, Any]] | AsyncIterable[Any]
    ) -> AsyncIterator[Prediction]:
        """Scores for a stream of ``(id, x)`` requests (or bare ids with a guest_store), in
        request order. A failed request yields a :class:`Prediction` with its ``error``; the
        stream goes on. At most ``max_batch * 4`` requests are in flight (back-pressure)."""
        window: asyncio.Queue[tuple[Any, asyncio.Future[Any]] | None] = asyncio.Queue(
            maxsize=self.max_batch * 4
        )
        with_reasons = self.reasons > 0

        async def feed() -> None:
            try:
                async for request in requests:
                    rid, x = request if isinstance(request, tuple) else (request, None)
                    await window.put((rid, self.submit(rid, x, reasons=with_reasons)))
            finally:
                await window.put(None)

        feeder = asyncio.create_task(feed())
        try:
            while (item := await window.get()) is not None:
                rid, future = item
                try:
                    result = await future
                except P2PBoostError as exc:
                    yield Prediction(rid, None, exc)
                    continue
                if with_reasons:
                    yield Prediction(rid, result[0], reasons=result[1])
                else:
                    yield Prediction(rid, result)
            await feeder  # re-raise what the request iterator raised
        finally:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed("predictor closed")
