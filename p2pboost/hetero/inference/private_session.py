"""Private inference in long-lived online sessions (``GuestPredictor(private=True)``).

The session protocol (:mod:`p2pboost.hetero.inference.session`) gains one step after
``ready`` and one kind of query::

    guest                                          host k
    -----                                          ------
    serve: ServePrivate(key, padded trees,
           k's slot ranges, first, last)       ->  checked once per session
                                               <-  ServePrivateReady(seal key)
    serve: PrivateQuery(seq, ids, batch,
           Enc(slots) or sealed, next key)     ->  looks the ids up, keeps its slots
                                               <-  PrivateAnswer(seq, sealed to the next host
                                                   or the totals, unknown positions)

A batch visits the hosts in order, the guest relaying each host's sealed selection to the
next, exactly as in the batch protocol (:mod:`p2pboost.hetero.inference.private_batch`); the
key, the padded layout and the seal keys are set up once per session, not per request. A host
learns the ids it is asked for, as in default serving, and ciphertexts; the guest learns each
row's score and which ids a host does not hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey
from p2pboost.exceptions import CodecError, InputError, KeyMismatchError
from p2pboost.hetero._messages import PrivateAnswer, PrivateQuery, ServePrivate
from p2pboost.hetero.inference.feature_store import FeatureStore
from p2pboost.hetero.inference.private import PrivateForest
from p2pboost.hetero.inference.private_batch import CHUNK_CIPHERTEXTS
from p2pboost.hetero.inference.private_host import PrivateHost, context, plain_executor
from p2pboost.hetero.model import HostModel
from p2pboost.net.node import Channel
from p2pboost.protocols._messages import reject, send
from p2pboost.workers import AnyExecutor

__all__ = ["PrivateScorer", "host_private_query", "host_private_setup", "setup_message"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def setup_message(forest: PrivateForest, public: AnyPublicKey, host: int) -> ServePrivate:
    """What the guest tells host ``host`` (1-based) when its session opens."""
    r = forest.host_ranges(host)
    return ServePrivate(
        public, forest.slots, forest.n_outputs, forest.widths, forest.outputs,
        r.tree, r.node, r.lo, r.mid, r.hi, first=host == 1, last=host == forest.n_hosts,
    )  # fmt: skip


def host_private_setup(
    model: HostModel, msg: ServePrivate, trees: int, executor: AnyExecutor | None
) -> PrivateHost:
    """The host's state for a private session (checked against its model)."""
    if msg.widths.size != trees:
        raise reject(model.guest, "private setup for another number of trees than the hello's")
    return PrivateHost.from_setup(model, msg, executor)


async def host_private_query(
    ch: Channel,
    msg: PrivateQuery,
    host: PrivateHost,
    model: HostModel,
    ids: npt.NDArray[np.generic],
    store: FeatureStore,
) -> None:
    """Answer one private query: look the ids up, keep this host's slots, pass them on."""
    X, found = await store.lookup(ids)
    if X.shape != (ids.size, model.n_features):
        raise InputError(f"feature store returned {X.shape} for {ids.size} ids")
    ctx = context(model.fingerprint, msg.batch, 0, int(ids.size))
    cts = host.incoming(msg.ct, msg.sealed, msg.next, int(ids.size), ctx)
    keep = host.selection(X)
    unknown = np.flatnonzero(~found).astype(np.int64)
    if host.last:
        await send(ch, PrivateAnswer(msg.seq, b"", await host.totals(cts, keep), unknown))
    else:
        sealed = await host.relay(cts, keep, msg.next, ctx)
        await send(ch, PrivateAnswer(msg.seq, sealed, None, unknown))


class PrivateScorer:
    """The guest's side: encrypts the slot values, walks the chain of hosts, decrypts.

    ``clients`` are the sessions' :class:`~p2pboost.hetero.inference.session.HostClient`
    objects in host order; each exposes ``seal`` (the host's key, after connecting),
    ``connect()`` and ``private_query(...)``.
    """

    def __init__(
        self,
        forest: PrivateForest,
        keys: tuple[AnyPublicKey, AnyPrivateKey],
        executor: AnyExecutor | None,
    ) -> None:
        self.forest = forest
        self.public, private = keys
        self.engine = CryptoEngine(self.public, private, executor=plain_executor(executor))
        self._batches = 0

    def close(self) -> None:
        self.engine.close()

    async def score(
        self, clients: list[Any], ids: npt.NDArray[Any], rows: F64
    ) -> tuple[F64, dict[str, I64]]:
        """Margins ``(n, K)`` for ``ids`` with the guest's ``rows``, and per host the
        positions of the ids it does not hold."""
        forest = self.forest
        plain = forest.slot_values(rows)
        n = ids.size
        step = max(1, CHUNK_CIPHERTEXTS // max(forest.positions, 1))
        totals: list[int] = []
        unknown: dict[str, list[I64]] = {}
        for start in range(0, n, step):
            part = ids[start : start + step]
            values = plain[start : start + part.size].reshape(-1).tolist()
            encrypted = await self.engine.encrypt_batch(values)
            ct: CiphertextBatch | None = CiphertextBatch.from_ciphertexts(self.public, encrypted)
            for c in clients:
                await c.connect()
            seals = [c.seal for c in clients]
            self._batches += 1
            sealed = b""
            for k, c in enumerate(clients):
                last = k == len(clients) - 1
                nxt = b"" if last else seals[k + 1]
                answer = await c.private_query(part, self._batches, ct, sealed, nxt)
                if answer.unknown.size:
                    if answer.unknown.min() < 0 or answer.unknown.max() >= part.size:
                        raise reject(c.host, "unknown positions outside the batch")
                    unknown.setdefault(c.host, []).append(answer.unknown + start)
                ct = None
                if (answer.ct is None) != (not last):
                    raise reject(c.host, "a relay where totals were expected, or the reverse")
                if not last:
                    sealed = answer.sealed
                    continue
                assert answer.ct is not None
                try:
                    cts = answer.ct.ciphertexts(self.public)
                except (CodecError, KeyMismatchError) as exc:
                    raise reject(c.host, f"bad score ciphertexts: {exc}") from exc
                if len(cts) != part.size * forest.n_outputs:
                    raise reject(c.host, "a score per row and output column is expected")
                totals.extend(int(m) for m in await self.engine.decrypt_batch(cts))
        try:
            margin = forest.decode(totals, n)
        except InputError as exc:
            raise reject(clients[-1].host, str(exc)) from exc
        return margin, {h: np.concatenate(p) for h, p in unknown.items()}
