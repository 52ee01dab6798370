"""Horizontal SecureBoost: clients hold rows (features and labels), a server holds no data.

One coroutine per role. The server drives; every client answers its commands::

    server                                           client (each)
    ------                                           ------
    hello {params digest, masking, threshold}  ->    checks it agrees
    epoch {members, t}                         ->    X25519 key, signed with its certificate
    adverts {every member's signed key}        ->    verifies them, Shamir-shares its self seed
    shares {the shares sealed to this client}  ->    keeps them
    collect {round, what, args}                ->    its vector for "what", masked twice (y, z)
    (all sent: the sum of the z is exact; otherwise)
    [unmask {round, survivors, dropped}        ->    round keys (self; pairs with the dropped)]
    [recover {round, self_of, key_of}          ->    Shamir shares for clients that died]
    edges / tree / done                        ->    builds the same model as everyone else

Every aggregate the server needs is a *sum* over the clients, computed by secure aggregation
(:mod:`p2pboost.crypto.secagg`) on fixed-point integers mod 2**64:

1. ``stats``: rows and label counts (the base margin), rows per feature; ``bins``: counts per
   key range for federated binning (:mod:`p2pboost.homo._binning`);
2. per tree, ``grid``: a one-hot of each client's largest ``|g|``/``|h|`` binary exponent (the
   union's fixed-point grid is the core's, so sums are exact); ``hist``: gradient histograms
   of the root, then of the smaller child of every split (siblings by subtraction);
3. per boosting round, ``eval``: summed validation losses for early stopping.

The server finds splits exactly as :class:`~p2pboost.gbdt.grower.TreeGrower` does and sends
the finished tree; so, on the same edges, the model equals the core's on the union of the rows.

Dropout: a client that does not answer a round in ``round_timeout`` (or whose session fails)
is dropped. The round is still completed (the survivors reveal that round's keys; a client
that died after sending is recovered from ``t`` Shamir shares; see
:mod:`p2pboost.crypto.secagg`); then keys are renewed among the survivors (a new epoch) and the
current stage (binning or the current tree) restarts with them. A client that sends something
invalid ends the run with a :class:`~p2pboost.exceptions.RemoteProtocolError` naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.secagg import (
    KEY_BYTES,
    EpochKeys,
    PairKeys,
    Share,
    decrypt_shares,
    encrypt_shares,
    epoch_context,
    from_signed,
    mask,
    mask_seed,
    mask_streams,
    round_key,
    shamir_combine,
    shamir_split,
    sign_advert,
    to_unsigned,
    unmask,
    verify_advert,
)
from p2pboost.exceptions import (
    CryptoError,
    InputError,
    ModelError,
    P2PBoostError,
    ProtocolError,
    RemoteProtocolError,
)
from p2pboost.gbdt.binning import BinMapper, BinnedData, check_matrix
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.callbacks import EarlyStopping
from p2pboost.gbdt.fixedpoint import Grid, quantize
from p2pboost.gbdt.grower import (
    ChooseSplits,
    GrowStep,
    HistogramGrower,
    Partition,
    drive_async,
    partition_rows,
)
from p2pboost.gbdt.histogram import HistogramBuilder, make_builder
from p2pboost.gbdt.objectives import Objective, get_objective
from p2pboost.gbdt.params import BoostParams, MultiStrategy
from p2pboost.gbdt.rounds import RoundLoop, add_tree
from p2pboost.gbdt.split import candidate_mask
from p2pboost.gbdt.tree import Tree
from p2pboost.homo._binning import EdgeSearch, Query, child_counts, float_keys
from p2pboost.homo._vectors import (
    EVAL_LENGTH,
    GRID_LENGTH,
    HistLayout,
    Stats,
    announced_grid,
    eval_vector,
    grid_vector,
    read_eval,
    read_grid,
    read_stats,
    stats_length,
    stats_vector,
)
from p2pboost.homo.config import (
    CHANNEL,
    VERSION,
    ClientIdentity,
    HomoConfig,
    HomoPhase,
    HomoResult,
    Tap,
)
from p2pboost.net.node import Channel, Session

__all__ = [
    "CHANNEL",
    "ClientIdentity",
    "HomoConfig",
    "HomoPhase",
    "HomoResult",
    "client_train",
    "server_train",
]

logger = logging.getLogger("p2pboost.homo.estimators")

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


# ============================================================================== the server side


class _Restart(Exception):
    """Membership changed: the current stage starts again with the survivors."""


class _Dropped(Exception):
    """A client did not answer in time or its session ended."""


class _Federation:
    """The server's view of the clients: channels, membership, epochs and aggregation."""

    def __init__(self, sessions: Mapping[str, Session], config: HomoConfig, tap: Tap | None):
        self.channels: dict[str, Channel] = {c: s.channel(c, CHANNEL) for c, s in sessions.items()}
        self.sessions = dict(sessions)
        self.config = config
        self.tap = tap
        self.active = sorted(sessions)
        self.members: list[str] | None = None  # the current epoch's (None: must renew keys)
        self.epoch = 0
        self.round = 0
        self.threshold = 0
        self.phase = HomoPhase.HELLO
        self.run_id = ""
        self.mask_publics: dict[str, bytes] = {}

    def _tap(self, kind: str, who: str, obj: object) -> None:
        if self.tap is not None:
            self.tap(kind, who, obj)

    async def _ask(self, client: str, msg: dict[str, Any], expect: str) -> dict[str, Any]:
        ch = self.channels[client]
        try:
            async with asyncio.timeout(self.config.round_timeout):
                await ch.send(msg)
                reply = await ch.recv()
        except TimeoutError:
            raise _Dropped(client) from None
        except RemoteProtocolError:
            raise
        except (P2PBoostError, ConnectionError) as exc:
            logger.warning("client %s dropped (%s): %s", client, self.phase.value, exc)
            raise _Dropped(client) from None
        self._tap("recv", client, reply)
        if not isinstance(reply, dict) or reply.get("op") != expect:
            raise RemoteProtocolError(
                f"expected {expect!r} in phase {self.phase.value}", peer=client
            )
        return reply

    async def ask_all(
        self, clients: Sequence[str], msgs: Mapping[str, dict[str, Any]], expect: str
    ) -> dict[str, dict[str, Any]]:
        """Send each client its message and collect replies; silent clients are dropped."""

        async def one(c: str) -> tuple[str, dict[str, Any] | None]:
            try:
                return c, await self._ask(c, msgs[c], expect)
            except _Dropped:
                return c, None

        results = await asyncio.gather(*(one(c) for c in clients))
        replies = {c: r for c, r in results if r is not None}
        for c, r in results:
            if r is None:
                await self.drop(c)
        return replies

    async def ask_same(
        self, clients: Sequence[str], msg: dict[str, Any], expect: str
    ) -> dict[str, dict[str, Any]]:
        """:meth:`ask_all` with one message for everyone."""
        return await self.ask_all(clients, dict.fromkeys(clients, msg), expect)

    async def drop(self, client: str) -> None:
        if client in self.active:
            self.active.remove(client)
            logger.warning("client %s dropped out; %d remain", client, len(self.active))
            with contextlib.suppress(Exception):
                await self.sessions[client].abort("dropped from the federation")
        if len(self.active) < self.config.min_clients:
            raise ProtocolError(
                f"only {len(self.active)} clients remain, fewer than min_clients "
                f"{self.config.min_clients}"
            )

    async def broadcast(self, msg: dict[str, Any]) -> None:
        async def one(c: str) -> None:
            try:
                async with asyncio.timeout(self.config.round_timeout):
                    await self.channels[c].send(msg)
            except (TimeoutError, P2PBoostError, ConnectionError):
                await self.drop(c)

        await asyncio.gather(*(one(c) for c in list(self.active)))

    # -- keys ---------------------------------------------------------------------------------

    async def renew_keys(self) -> None:
        """AdvertiseKeys and ShareKeys among the active clients (a new epoch)."""
        self.phase = HomoPhase.KEYS
        while True:
            self.epoch += 1
            members = list(self.active)
            n = len(members)
            t = self.config.shamir_threshold(n)
            head = {"epoch": self.epoch, "members": members, "t": t}
            adverts = await self.ask_same(members, {"op": "epoch", **head}, "advert")
            if len(adverts) < n:
                continue
            relay = {}
            for c, a in adverts.items():
                pub, sig, cert = a.get("public"), a.get("signature"), a.get("cert")
                if not (
                    isinstance(pub, bytes)
                    and len(pub) == 2 * KEY_BYTES
                    and isinstance(sig, bytes)
                    and len(sig) <= 160
                    and isinstance(cert, bytes)
                    and len(cert) <= 16384
                ):
                    raise RemoteProtocolError("malformed key advert", peer=c)
                relay[c] = {"public": pub, "signature": sig, "cert": cert}
                self.mask_publics[c] = pub[:KEY_BYTES]
            msg = {"op": "adverts", "epoch": self.epoch, "adverts": relay}
            sealed = await self.ask_same(members, msg, "shares")
            if len(sealed) < n:
                continue
            inbox: dict[str, dict[str, bytes]] = {c: {} for c in members}
            for sender, reply in sealed.items():
                shares = reply.get("shares")
                if not isinstance(shares, dict) or sorted(shares) != sorted(
                    m for m in members if m != sender
                ):
                    raise RemoteProtocolError("shares must address every other member", peer=sender)
                for holder, blob in shares.items():
                    if not isinstance(blob, bytes) or len(blob) > 512:
                        raise RemoteProtocolError("malformed sealed share", peer=sender)
                    inbox[holder][sender] = blob
            msgs = {c: {"op": "shares", "epoch": self.epoch, "shares": inbox[c]} for c in members}
            ready = await self.ask_all(members, msgs, "ready")
            if len(ready) < n:
                continue
            self.members, self.threshold = members, t
            return

    # -- one aggregation ----------------------------------------------------------------------

    async def aggregate(self, what: str, args: dict[str, Any], length: int) -> I64:
        """The sum over the active clients of their ``what`` vectors (int64, exact).

        Raises :class:`_Restart` after completing the round if membership changed.
        """
        if self.config.masking and self.members != self.active:
            await self.renew_keys()
        self.round += 1
        r = self.round
        members = list(self.active)
        msg = {"op": "collect", "round": r, "what": what, "args": args}
        replies = await self.ask_same(members, msg, "masked")
        y_vecs: dict[str, U64] = {}
        z_vecs: dict[str, U64] = {}
        for c, reply in replies.items():
            if reply.get("round") != r:
                raise RemoteProtocolError(
                    f"masked vector for round {reply.get('round')!r}, expected round {r}"
                    " (a replayed or stale message)",
                    peer=c,
                )
            names = ("y", "z") if self.config.masking else ("z",)
            for name in names:
                vec = reply.get(name)
                if (
                    not isinstance(vec, np.ndarray)
                    or vec.dtype != np.uint64
                    or vec.shape != (length,)
                ):
                    raise RemoteProtocolError(
                        f"round {r} ({what}): expected uint64 vectors of length {length}", peer=c
                    )
            z_vecs[c] = reply["z"]
            if self.config.masking:
                y_vecs[c] = reply["y"]
        survivors = sorted(z_vecs)
        if len(survivors) < self.config.min_clients:
            raise ProtocolError(f"round {r}: only {len(survivors)} clients sent a vector")
        changed = len(survivors) < len(members)
        total = np.zeros(length, dtype=np.uint64)
        if not changed or not self.config.masking:
            for v in z_vecs.values():  # everyone sent: the pairwise masks cancel
                total += v
        else:
            for v in y_vecs.values():
                total += v
            total = await self._unmask(r, total, members, survivors)
        result = from_signed(total).copy()
        self._tap("aggregate", what, {"round": r, "contributors": survivors, "total": result})
        if changed:
            self.members = None
            raise _Restart(what)
        return result

    async def _unmask(self, r: int, total: U64, members: list[str], survivors: list[str]) -> U64:
        """Bonawitz's unmasking round: some members sent nothing in round ``r``."""
        dropped = sorted(set(members) - set(survivors))
        msg = {"op": "unmask", "round": r, "survivors": survivors, "dropped": dropped}
        reveals = await self.ask_same(survivors, msg, "reveal")
        self_keys: list[bytes] = []
        pair_keys: list[tuple[str, str, bytes]] = []
        for c, rep in reveals.items():
            own, pairs = rep.get("self"), rep.get("pairs")
            if (
                rep.get("round") != r
                or not isinstance(own, bytes)
                or len(own) != KEY_BYTES
                or not isinstance(pairs, dict)
                or sorted(pairs) != dropped
                or not all(isinstance(k, bytes) and len(k) == KEY_BYTES for k in pairs.values())
            ):
                raise RemoteProtocolError(f"round {r}: malformed unmasking keys", peer=c)
            self_keys.append(own)
            pair_keys += [(c, d, k) for d, k in pairs.items()]
        missing = sorted(set(survivors) - set(reveals))
        if missing:
            # They sent, then died: rebuild their self seeds and the dropped clients' mask keys
            # from t Shamir shares (never both for one client).
            holders = sorted(reveals)
            if len(holders) < self.threshold:
                raise ProtocolError(
                    f"round {r}: {missing} died after sending and only {len(holders)} clients"
                    f" answered; {self.threshold} shares are needed"
                )
            rmsg = {"op": "recover", "round": r, "self_of": missing, "key_of": dropped}
            recs = await self.ask_same(holders, rmsg, "recovered")
            if len(recs) < self.threshold:
                raise ProtocolError(f"round {r}: too few clients answered the recovery")
            seeds = {u: self._combine(recs, "self", u, r) for u in missing}
            keys = {d: self._combine(recs, "key", d, r) for d in dropped}
            ctx = epoch_context(self.run_id, self.epoch)
            for u in missing:
                self_keys.append(round_key(seeds[u], r, "self"))
                for d in dropped:
                    seed = mask_seed(keys[d], d, u, self.mask_publics[u], ctx)
                    pair_keys.append((u, d, round_key(seed, r, "pair")))
        return unmask(total, r, self_keys, pair_keys)

    def _combine(self, recs: dict[str, dict[str, Any]], kind: str, of: str, r: int) -> bytes:
        shares = []
        for c, rep in recs.items():
            blobs = rep.get(kind)
            blob = blobs.get(of) if isinstance(blobs, dict) else None
            if not isinstance(blob, bytes):
                raise RemoteProtocolError(f"round {r}: no {kind} share of {of}", peer=c)
            try:
                shares.append(Share.from_bytes(blob))
            except CryptoError as exc:
                raise RemoteProtocolError(f"round {r}: {exc}", peer=c) from None
        try:
            return shamir_combine(shares, self.threshold)
        except CryptoError as exc:
            raise ProtocolError(f"round {r}: cannot recover {of}: {exc}") from None


async def server_train(
    sessions: Mapping[str, Session],
    config: HomoConfig,
    *,
    n_features: int | None = None,
    run_id: str | None = None,
    tap: Tap | None = None,
) -> HomoResult:
    """Coordinate training among the clients of ``sessions`` (one session per client).

    ``n_features``, if given, is checked against every client's. ``run_id`` (default:
    random) names this run in every signature and key derivation, so nothing from another
    run can be replayed. ``tap`` (for audits and tests) is called with ``("recv", client,
    message)`` for every message received and ``("aggregate", what, {...})`` for every
    aggregate: everything the server ever learns.
    """
    config = config.validate()
    if len(sessions) < config.min_clients:
        raise InputError(f"need at least {config.min_clients} clients, got {len(sessions)}")
    loop = asyncio.get_running_loop()
    start = loop.time()
    fed = _Federation(sessions, config, tap)
    params = config.params
    objective = get_objective(params)
    k_out = objective.n_outputs

    fed.run_id = run_id or secrets.token_hex(16)
    hello = {"op": "hello", "v": VERSION, "digest": config.digest(), "run": fed.run_id}
    replies = await fed.ask_same(list(fed.active), hello, "hello")
    for c, rep in replies.items():
        f = rep.get("n_features")
        if not isinstance(f, int) or f < 1 or (n_features is not None and f != n_features):
            raise RemoteProtocolError(f"has {f!r} features, expected {n_features}", peer=c)
        n_features = f
    if n_features is None:
        raise ProtocolError("no client answered hello")

    # -- statistics and binning (restarted whenever a client drops) ---------------------------
    while True:
        try:
            fed.phase = HomoPhase.STATS
            stats = read_stats(await fed.aggregate("stats", {}, stats_length(k_out)))
            fed.phase = HomoPhase.BINNING
            search = EdgeSearch(n_features, params.max_bin)
            while not search.done:
                q = search.query()
                args = {"level": q.level, "feature": q.feature, "prefix": q.prefix}
                search.feed(await fed.aggregate("bins", args, q.length))
            break
        except _Restart:
            continue
    if stats.n_rows < 1:
        raise ProtocolError("the clients hold no rows")
    base = _base_margin(objective, params, stats)
    mapper = BinMapper.from_dict(
        {"max_bin": params.max_bin, "edges": [e.tolist() for e in search.edges()]}
    )
    await fed.broadcast({"op": "model", "edges": mapper.to_dict()["edges"], "base": base})
    setup_done = loop.time()

    # -- trees --------------------------------------------------------------------------------
    stopper = (
        [EarlyStopping(config.early_stopping_rounds)]
        if config.early_stopping_rounds is not None
        else []
    )
    # The core's round loop: the same column draws, trees per round and early stop.
    rounds = RoundLoop(params, n_features, k_out, stopper)
    all_candidates = candidate_mask(mapper.n_bins, params.max_bin)
    evaluation: list[float] = []
    for it in rounds:
        fed.phase = HomoPhase.TREES
        candidates = all_candidates & rounds.sample_columns()[:, None, None]
        for out in rounds.outputs:
            while True:
                try:
                    tree = await _grow(fed, params, mapper, candidates, it, out, k_out)
                    break
                except _Restart:
                    continue  # a client dropped: grow this tree again with the survivors
            rounds.add_tree(tree, out)
            await fed.broadcast({"op": "tree", "it": it, "output": out, "tree": tree.to_dict()})
        if not config.evaluating:
            continue
        fed.phase = HomoPhase.EVAL
        score = await _evaluate(fed, config, it)
        if score is not None:
            evaluation.append(score)
            rounds.end_round({"valid": {config.metric: score}})
    booster = Booster(
        params,
        mapper,
        np.asarray(base),
        rounds.trees,
        rounds.tree_output,
        rounds.trees_per_round,
        rounds.best_iteration,
    )
    fed.phase = HomoPhase.DONE
    await fed.broadcast({"op": "done", "best_iteration": booster.best_iteration})
    end = loop.time()
    return HomoResult(
        booster=booster,
        clients=list(fed.active),
        rounds=fed.round,
        epochs=fed.epoch,
        seconds_setup=setup_done - start,
        seconds_trees=end - setup_done,
        n_trees=len(booster.trees),
        evaluation=evaluation,
    )


def _base_margin(objective: Objective, params: BoostParams, stats: Stats) -> list[float]:
    """The core's ``init_margin`` from summed label statistics."""
    if params.base_score is not None:
        return [float(v) for v in objective.margin_from_score(params.base_score)]
    k, n = objective.n_outputs, stats.n_rows
    if objective.name == "binary:logistic":
        y = np.zeros(n)
        y[: int(stats.label_counts[0])] = 1.0  # only the count of ones matters to the mean
        return [float(v) for v in objective.init_margin(y)]
    if objective.name == "multi:softmax":
        y = np.repeat(np.arange(k, dtype=np.float64), stats.label_counts[:k])
        if y.size != n:
            raise ProtocolError("class counts do not add up to the rows")
        return [float(v) for v in objective.init_margin(y)]
    return [stats.label_sum / n]


async def _grow(
    fed: _Federation,
    params: BoostParams,
    mapper: BinMapper,
    candidates: npt.NDArray[np.bool_],
    it: int,
    out: int,
    k_obj: int,
) -> Tree:
    """One tree by the core's schedule, its histograms securely aggregated from the clients."""
    layout = HistLayout(mapper.n_features, mapper.n_slots, k_obj if out < 0 else 1)
    n_slots = mapper.n_slots
    grid_g, grid_h = read_grid(await fed.aggregate("grid", {"it": it, "output": out}, GRID_LENGTH))
    n_rows = grid_g.max_rows
    bits = {
        "g_bits": grid_g.bits,
        "g_mag": grid_g.magnitude_bits,
        "h_bits": grid_h.bits,
        "h_mag": grid_h.magnitude_bits,
        "n_rows": n_rows,
    }
    grower = HistogramGrower(params, layout.n_outputs, candidates, mapper.thresholds)
    total = await fed.aggregate("hist", {**bits, "root": True}, layout.length(1))
    hist = layout.read(total, 1, grid_g, grid_h)
    assert hist.count is not None
    root = grower.start(
        hist,
        hist.grad[:, 0].sum(axis=1),
        hist.hess[:, 0].sum(axis=1),
        hist.count.sum(axis=2)[:, 0],
    )

    async def answer(step: GrowStep) -> Any:
        if isinstance(step, ChooseSplits):
            return grower.find_splits(step.frontier)
        if isinstance(step, Partition):
            return None  # the clients move their rows when told the plan (below)
        frontier, plan = step.frontier, step.plan
        assert frontier.hist.count is not None
        cnt = frontier.hist.count[plan.parent_index, plan.feature]  # (m, B)
        b = np.arange(n_slots)[None, :]
        in_left = (b <= plan.threshold_bin[:, None]) & (b < n_slots - 1)
        in_left |= (b == n_slots - 1) & plan.default_left[:, None]
        n_left = (cnt * in_left).sum(axis=1)
        n_right = frontier.count[plan.parent_index] - n_left
        small = np.where(n_left <= n_right, plan.left, plan.right)
        args = {
            **bits,
            "root": False,
            "nodes": plan.nodes,
            "feature": plan.feature,
            "threshold_bin": plan.threshold_bin,
            "default_left": plan.default_left,
            "left": plan.left,
            "right": plan.right,
            "n_nodes": grower.tree.n_nodes,
            "build": small,
        }
        total = await fed.aggregate("hist", args, layout.length(small.size))
        small_hist = layout.read(total, small.size, grid_g, grid_h)
        return grower.next_frontier(frontier, plan, small_hist, n_left, n_right)

    return await drive_async(grower.schedule(root), answer)


async def _evaluate(fed: _Federation, config: HomoConfig, it: int) -> float | None:
    while True:
        try:
            total = await fed.aggregate("eval", {"it": it}, EVAL_LENGTH)
            break
        except _Restart:
            continue
    return read_eval(total, config.metric)


# ============================================================================== the client side


class _Client:
    """A client's state machine: validates each command, answers with its vector or keys."""

    def __init__(
        self,
        me: str,
        server: str,
        session_id: str,
        X: F64,
        y: F64,
        identity: ClientIdentity | None,
        config: HomoConfig,
        eval_set: tuple[F64, F64] | None,
        on_vector: Callable[[int, str, I64], None] | None,
    ) -> None:
        self.me, self.server, self.session_id = me, server, session_id
        self.X, self.y = X, y
        self.identity = identity
        self.config = config
        self.params = config.params
        self.objective = get_objective(config.params)
        self.eval_set = eval_set
        self.on_vector = on_vector
        self.phase = HomoPhase.HELLO
        self.keys_cols = [float_keys(col) for col in X.T]
        # Key material of the current epoch.
        self.epoch = 0
        self.members: list[str] = []
        self.t = 0
        self.keys: EpochKeys | None = None
        self.pairs: dict[str, PairKeys] = {}
        self.held: dict[str, tuple[Share, Share]] = {}  # (self seed, mask key) shares
        self.recovered = False  # this epoch's one recovery was answered
        self.usable = False  # masks may be made with the current epoch's keys
        # Rounds.
        self.round = 0
        self.sent: set[int] = set()
        self.last_length = 0
        self.ahead: tuple[int, int, U64, U64] | None = None  # masks computed ahead
        self.revealed: dict[int, tuple[list[str], list[str]]] = {}
        # Model.
        self.mapper: BinMapper | None = None
        self.data: BinnedData | None = None
        self.builder: HistogramBuilder | None = None
        self.base: F64 | None = None
        self.margin: F64 | None = None
        self.eval_data: BinnedData | None = None
        self.eval_margin: F64 | None = None
        self.trees: list[Tree] = []
        self.outputs: list[int] = []
        self.grad_it = -1
        self.grad: F64 | None = None
        self.hess: F64 | None = None
        self.gq: F64 | None = None
        self.hq: F64 | None = None
        self.positions: I64 | None = None
        self.tree_args: dict[str, Any] = {}
        self.grids: tuple[Grid, Grid] | None = None
        self.best_iteration: int | None = None

    def bad(self, what: str) -> RemoteProtocolError:
        return RemoteProtocolError(f"{what} (phase {self.phase.value})", peer=self.server)

    # -- dispatch -----------------------------------------------------------------------------

    def handle(self, msg: object) -> dict[str, Any] | None:
        if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
            raise self.bad("expected a command")
        op = msg["op"]
        handler = getattr(self, f"on_{op}", None)
        if handler is None:
            raise self.bad(f"unknown command {op!r}")
        result: dict[str, Any] | None = handler(msg)
        return result

    def on_hello(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.phase is not HomoPhase.HELLO or msg.get("v") != VERSION:
            raise self.bad("unexpected hello")
        if msg.get("digest") != self.config.digest():
            raise self.bad("the server's training settings differ from ours")
        run = msg.get("run")
        if not isinstance(run, str) or not 8 <= len(run) <= 128:
            raise self.bad("hello without a valid run id")
        self.session_id = run
        self.phase = HomoPhase.STATS
        return {"op": "hello", "n_features": int(self.X.shape[1])}

    # -- keys ---------------------------------------------------------------------------------

    def on_epoch(self, msg: dict[str, Any]) -> dict[str, Any]:
        epoch, members, t = msg.get("epoch"), msg.get("members"), msg.get("t")
        if not self.config.masking:
            raise self.bad("key setup in an unmasked run")
        if not isinstance(epoch, int) or epoch <= self.epoch:
            raise self.bad(f"epoch {epoch!r} is not new")
        if (
            not isinstance(members, list)
            or not all(isinstance(m, str) for m in members)
            or members != sorted(set(members))
            or self.me not in members
        ):
            raise self.bad("bad member list")
        n = len(members)
        want_t = self.config.shamir_threshold(n)
        if n < self.config.min_clients or not isinstance(t, int) or not want_t <= t <= n:
            raise self.bad(f"threshold {t!r} for {n} members is not acceptable")
        if self.identity is None:
            raise InputError("masked training needs the client's identity (certificate key)")
        self.epoch, self.members, self.t = epoch, members, t
        self.keys = EpochKeys()
        self.pairs, self.held, self.usable, self.recovered = {}, {}, False, False
        public = self.keys.mask_public + self.keys.channel_public
        sig = sign_advert(self.identity.signing_key, self.session_id, epoch, self.me, public)
        return {
            "op": "advert",
            "public": public,
            "signature": sig,
            "cert": self.identity.cert_pem,
        }

    def _share_ctx(self) -> bytes:
        return epoch_context(self.session_id, self.epoch)

    def on_adverts(self, msg: dict[str, Any]) -> dict[str, Any]:
        adverts = msg.get("adverts")
        if self.keys is None or msg.get("epoch") != self.epoch or self.pairs:
            raise self.bad("adverts out of order")
        if not isinstance(adverts, dict) or sorted(adverts) != self.members:
            raise self.bad("adverts must cover exactly the epoch's members")
        assert self.identity is not None
        mine = self.keys.mask_public + self.keys.channel_public
        if not isinstance(adverts[self.me], dict) or adverts[self.me].get("public") != mine:
            raise self.bad("our own key advert was altered")
        publics: set[bytes] = {self.keys.mask_public, self.keys.channel_public}
        ctx = self._share_ctx()
        for c in self.members:
            if c == self.me:
                continue
            a = adverts[c]
            try:
                pub, sig, cert = a["public"], a["signature"], a["cert"]
                if not isinstance(pub, bytes) or len(pub) != 2 * KEY_BYTES:
                    raise TypeError("public keys must be 64 bytes")
                verify_advert(self.identity.ca, cert, sig, self.session_id, self.epoch, c, pub)
            except (KeyError, TypeError) as exc:
                raise self.bad(f"malformed advert of {c}: {exc}") from None
            except CryptoError as exc:
                raise RemoteProtocolError(f"key advert rejected: {exc}", peer=c) from None
            m_pub, c_pub = pub[:KEY_BYTES], pub[KEY_BYTES:]
            if m_pub in publics or c_pub in publics:
                raise RemoteProtocolError("key advert repeats another client's key", peer=c)
            publics |= {m_pub, c_pub}
            try:
                self.pairs[c] = self.keys.pair_keys(self.me, c, m_pub, c_pub, ctx)
            except CryptoError as exc:
                raise RemoteProtocolError(f"key advert rejected: {exc}", peer=c) from None
        n = len(self.members)
        seed_shares = shamir_split(self.keys.self_seed, n, self.t)
        key_shares = shamir_split(self.keys.mask_private, n, self.t)
        sealed = {}
        for i, c in enumerate(self.members):
            pair = (seed_shares[i], key_shares[i])
            if c == self.me:
                self.held[self.me] = pair
            else:
                sealed[c] = encrypt_shares(self.pairs[c].share_key, pair, self.me, c, ctx)
        return {"op": "shares", "shares": sealed}

    def on_shares(self, msg: dict[str, Any]) -> dict[str, Any]:
        shares = msg.get("shares")
        if not self.pairs or msg.get("epoch") != self.epoch or len(self.held) != 1:
            raise self.bad("shares out of order")
        others = [m for m in self.members if m != self.me]
        if not isinstance(shares, dict) or sorted(shares) != others:
            raise self.bad("a share from every other member is expected")
        x = self.members.index(self.me) + 1
        for sender, blob in shares.items():
            if not isinstance(blob, bytes):
                raise self.bad(f"share of {sender} is not bytes")
            try:
                seed_share, key_share = decrypt_shares(
                    self.pairs[sender].share_key, blob, sender, self.me, self._share_ctx(), 2
                )
            except CryptoError as exc:
                raise RemoteProtocolError(f"sealed shares rejected: {exc}", peer=sender) from None
            if seed_share.x != x or key_share.x != x:
                raise RemoteProtocolError("sealed shares are for another holder", peer=sender)
            self.held[sender] = (seed_share, key_share)
        self.usable = True
        return {"op": "ready"}

    # -- rounds -------------------------------------------------------------------------------

    def on_collect(self, msg: dict[str, Any]) -> dict[str, Any]:
        r, what, args = msg.get("round"), msg.get("what"), msg.get("args")
        if not isinstance(r, int) or r <= self.round:
            raise self.bad(f"round {r!r} is not after round {self.round} (replay?)")
        if not isinstance(args, dict):
            raise self.bad("collect without arguments")
        compute = {
            "stats": self._stats,
            "bins": self._bins,
            "grid": self._grid,
            "hist": self._hist,
            "eval": self._eval,
        }.get(what if isinstance(what, str) else "")
        if compute is None:
            raise self.bad(f"unknown aggregate {what!r}")
        try:
            vector = compute(args)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            if isinstance(exc, P2PBoostError):
                raise
            raise self.bad(f"bad arguments for {what}: {exc}") from None
        self.round = r
        if self.on_vector is not None:
            self.on_vector(r, str(what), vector)
        plain = to_unsigned(vector)
        if self.config.masking:
            if not self.usable or self.keys is None:
                raise self.bad("masked input requested before keys were set up")
            ahead = self.ahead
            self.ahead = None
            if ahead is not None and ahead[:2] == (self.epoch, r) and ahead[2].size >= plain.size:
                y, z = plain + ahead[2][: plain.size], plain + ahead[3][: plain.size]
            else:
                y, z = mask(plain, self.me, self.keys.self_seed, self.pairs, r)
            self.last_length = plain.size
            self.sent.add(r)
            return {"op": "masked", "round": r, "y": y, "z": z}
        self.sent.add(r)
        return {"op": "masked", "round": r, "z": plain.copy()}

    def prepare_next(self) -> None:
        """Compute the next round's masks ahead of time (rounds are numbered in sequence),
        long enough for a vector twice the last one or a gradient-grid vector."""
        if not self.config.masking or not self.usable or self.keys is None:
            return
        length = max(2 * self.last_length, GRID_LENGTH)
        nxt = self.round + 1
        y_mask, z_mask = mask_streams(self.me, self.keys.self_seed, self.pairs, nxt, length)
        self.ahead = (self.epoch, nxt, y_mask, z_mask)

    def on_unmask(self, msg: dict[str, Any]) -> dict[str, Any]:
        r, survivors, dropped = msg.get("round"), msg.get("survivors"), msg.get("dropped")
        if r not in self.sent or r in self.revealed or self.keys is None:
            raise self.bad(f"unmasking round {r!r}, for which we sent nothing or revealed")
        if (
            not isinstance(survivors, list)
            or not isinstance(dropped, list)
            or sorted(survivors + dropped) != self.members
            or self.me not in survivors
        ):
            raise self.bad("survivors and dropped must split the epoch's members")
        if len(survivors) < self.config.min_clients or not dropped:
            raise self.bad(f"refusing to unmask round {r}: {len(survivors)} survivors, no dropout")
        self.revealed[r] = (survivors, dropped)
        self.usable = False  # round keys with the dropped are revealed: renew keys after this
        return {
            "op": "reveal",
            "round": r,
            "self": round_key(self.keys.self_seed, r, "self"),
            "pairs": {d: round_key(self.pairs[d].mask_seed, r, "pair") for d in dropped},
        }

    def on_recover(self, msg: dict[str, Any]) -> dict[str, Any]:
        r, self_of, key_of = msg.get("round"), msg.get("self_of"), msg.get("key_of")
        told = self.revealed.get(r) if isinstance(r, int) else None
        if told is None or self.recovered:
            raise self.bad("recovery for a round we did not unmask, or a second one")
        if not isinstance(self_of, list) or not isinstance(key_of, list) or not self_of:
            raise self.bad("recovery needs the clients to recover")
        survivors, dropped = told
        # Bonawitz's rule: self seeds only of that round's survivors, mask keys only of its
        # dropped clients; never both for one client.
        if any(u not in survivors or u == self.me for u in self_of) or sorted(key_of) != dropped:
            raise self.bad("recovery asks for shares we must not give")
        self.recovered = True
        return {
            "op": "recovered",
            "self": {u: self.held[u][0].to_bytes() for u in self_of},
            "key": {d: self.held[d][1].to_bytes() for d in key_of},
        }

    # -- model --------------------------------------------------------------------------------

    def on_model(self, msg: dict[str, Any]) -> None:
        try:
            mapper = BinMapper.from_dict({"max_bin": self.params.max_bin, "edges": msg["edges"]})
            base = np.asarray(msg["base"], dtype=np.float64)
        except (KeyError, TypeError, ValueError, ModelError) as exc:
            raise self.bad(f"bad model header: {exc}") from None
        if mapper.n_features != self.X.shape[1] or base.shape != (self.objective.n_outputs,):
            raise self.bad("model header does not fit our data")
        self.mapper, self.base = mapper, base
        self.data = mapper.transform(self.X)
        self.builder = make_builder(self.data, self.params.sparse_aware, with_counts=True)
        self.margin = np.tile(base, (self.X.shape[0], 1))
        if self.eval_set is not None:
            self.eval_data = mapper.transform(self.eval_set[0])
            self.eval_margin = np.tile(base, (self.eval_set[0].shape[0], 1))
        self.phase = HomoPhase.TREES

    def on_tree(self, msg: dict[str, Any]) -> None:
        if self.data is None or self.margin is None:
            raise self.bad("tree before the model header")
        try:
            tree = Tree.from_dict(msg["tree"])
            out = int(msg["output"])
        except (KeyError, TypeError, ValueError, ModelError) as exc:
            raise self.bad(f"bad tree: {exc}") from None
        k = self.objective.n_outputs
        if not -1 <= out < k or tree.n_outputs != (k if out < 0 else 1):
            raise self.bad("tree output does not fit the objective")
        if np.any(tree.feature >= self.data.n_features):
            raise self.bad("tree splits on an unknown feature")
        self.trees.append(tree)
        self.outputs.append(out)
        add_tree(self.margin, tree.predict_binned(self.data), out)
        if self.eval_data is not None and self.eval_margin is not None:
            add_tree(self.eval_margin, tree.predict_binned(self.eval_data), out)

    def on_done(self, msg: dict[str, Any]) -> None:
        best = msg.get("best_iteration")
        if best is not None and not isinstance(best, int):
            raise self.bad("bad best_iteration")
        self.best_iteration = best
        self.phase = HomoPhase.DONE

    def booster(self) -> Booster:
        if self.mapper is None or self.base is None:
            raise self.bad("training ended before the model header")
        vector_leaves = MultiStrategy(self.params.multi_strategy) is MultiStrategy.MULTI_OUTPUT_TREE
        per_round = 1 if vector_leaves else self.objective.n_outputs
        n_rounds = len(self.trees) // per_round
        best = self.best_iteration
        if best is not None and not 0 <= best < max(1, n_rounds):
            raise self.bad("best_iteration out of range")
        return Booster(
            self.params, self.mapper, self.base, self.trees, self.outputs, per_round, best
        )

    # -- the vectors --------------------------------------------------------------------------

    def _stats(self, args: dict[str, Any]) -> I64:
        return stats_vector(self.y, self.objective)

    def _bins(self, args: dict[str, Any]) -> I64:
        feature = np.asarray(args["feature"], dtype=np.int64)
        prefix = np.asarray(args["prefix"], dtype=np.uint64)
        level = int(args["level"])
        if feature.size and (feature.min() < 0 or feature.max() >= self.X.shape[1]):
            raise ValueError("feature out of range")
        if feature.size > 1_000_000:
            raise ValueError("too many binning queries")
        return child_counts(self.keys_cols, Query(level, feature, prefix))

    def _gradients(self, it: int) -> tuple[F64, F64]:
        if self.margin is None:
            raise ValueError("gradients before the model header")
        if it != self.grad_it or self.grad is None or self.hess is None:
            if it < len(self.trees) // max(1, self._per_round()):
                raise ValueError(f"boosting round {it} is over")
            self.grad, self.hess = self.objective.grad_hess(self.y, self.margin)
            self.grad_it = it
        return self.grad, self.hess

    def _per_round(self) -> int:
        vector = MultiStrategy(self.params.multi_strategy) is MultiStrategy.MULTI_OUTPUT_TREE
        return 1 if vector else self.objective.n_outputs

    def _columns(self, args: dict[str, Any]) -> tuple[F64, F64]:
        g, h = self._gradients(int(args["it"]))
        out = int(args["output"])
        if not -1 <= out < g.shape[1]:
            raise ValueError("output out of range")
        if out < 0:
            return g, h
        return g[:, out : out + 1], h[:, out : out + 1]

    def _grid(self, args: dict[str, Any]) -> I64:
        g, h = self._columns(args)
        self.tree_args = dict(args)
        return grid_vector(g, h)

    def _hist(self, args: dict[str, Any]) -> I64:
        if self.data is None or self.builder is None or self.mapper is None:
            raise ValueError("histograms before the model header")
        g, h = self._columns(self.tree_args)
        if args["root"]:
            n = int(args["n_rows"])
            # The grid must be the core's for that magnitude, and our values must fit it.
            grid_g = announced_grid(int(args["g_bits"]), int(args["g_mag"]), n, g)
            grid_h = announced_grid(int(args["h_bits"]), int(args["h_mag"]), n, h)
            self.grids = (grid_g, grid_h)
            self.gq, self.hq = quantize(g, grid_g), quantize(h, grid_h)
            self.positions = np.zeros(self.data.n_rows, dtype=np.int64)
            hist = self.builder.build(None, None, 1, self.gq, self.hq)
        else:
            if self.positions is None or self.gq is None or self.hq is None:
                raise ValueError("child histograms before the root")
            n_nodes = int(args["n_nodes"])
            if not 1 <= n_nodes < 2 ** (self.params.max_depth + 1):
                raise ValueError(f"a tree of depth {self.params.max_depth} has no {n_nodes} nodes")
            arrays = {
                k: np.asarray(args[k], dtype=np.int64)
                for k in ("nodes", "feature", "threshold_bin", "left", "right", "build")
            }
            dleft = np.asarray(args["default_left"], dtype=np.bool_)
            m = arrays["nodes"].size
            if any(a.shape != (m,) for k, a in arrays.items() if k != "build") or dleft.shape != (
                m,
            ):
                raise ValueError("split plan arrays differ in length")
            for k in ("nodes", "left", "right", "build"):
                a = arrays[k]
                if a.size and (a.min() < 0 or a.max() >= n_nodes):
                    raise ValueError(f"{k} out of range")
            f = arrays["feature"]
            if m and (f.min() < 0 or f.max() >= self.data.n_features):
                raise ValueError("feature out of range")
            self.positions = partition_rows(
                self.data,
                self.positions,
                arrays["nodes"],
                f,
                arrays["threshold_bin"],
                dleft,
                arrays["left"],
                arrays["right"],
                n_nodes,
            )
            build = arrays["build"]
            slot_of = np.full(n_nodes, -1, dtype=np.int64)
            slot_of[build] = np.arange(build.size)
            slots = slot_of[self.positions]
            rows = np.flatnonzero(slots >= 0)
            hist = self.builder.build(rows, slots[rows], build.size, self.gq, self.hq)
        if self.grids is None:
            raise ValueError("histograms before the grid")
        grid_g, grid_h = self.grids
        layout = HistLayout(self.data.n_features, self.mapper.n_slots, g.shape[1])
        return layout.write(hist, grid_g, grid_h)

    def _eval(self, args: dict[str, Any]) -> I64:
        if self.eval_set is None or self.eval_margin is None:
            return eval_vector(self.config.metric, None)
        pred = self.objective.transform(self.eval_margin)
        pred = pred[:, 0] if pred.shape[1] == 1 else pred
        return eval_vector(self.config.metric, (self.eval_set[1], pred))


async def client_train(
    session: Session,
    server: str,
    X: Any,
    y: Any,
    config: HomoConfig,
    *,
    identity: ClientIdentity | None,
    me: str,
    eval_set: tuple[Any, Any] | None = None,
    on_vector: Callable[[int, str, I64], None] | None = None,
    before_send: Callable[[dict[str, Any], HomoPhase], dict[str, Any]] | None = None,
) -> Booster:
    """Train as a client with ``server``; returns the federation's model (same at every client).

    ``identity`` signs this client's key adverts (required unless ``config.masking`` is off).
    ``on_vector(round, what, vector)`` sees each plaintext vector before it is masked (tests);
    ``before_send(reply, phase)`` returns the reply to send (tests use it to simulate a crash
    or a misbehaving client).
    """
    config = config.validate()
    X_arr = check_matrix(X)
    objective = get_objective(config.params)
    y_arr = objective.check_labels(y)
    if X_arr.shape[0] != y_arr.size:
        raise InputError(f"X has {X_arr.shape[0]} rows but y has {y_arr.size} labels")
    ev: tuple[F64, F64] | None = None
    if eval_set is not None:
        Xv = check_matrix(eval_set[0], "eval X", n_features=X_arr.shape[1])
        yv = objective.check_labels(eval_set[1])
        if Xv.shape[0] != yv.size:
            raise InputError("eval set: rows and labels differ in number")
        ev = (Xv, yv)
    state = _Client(me, server, session.id, X_arr, y_arr, identity, config, ev, on_vector)
    ch = session.channel(server, CHANNEL)
    while state.phase is not HomoPhase.DONE:
        msg = await ch.recv()
        reply = state.handle(msg)
        if reply is not None:
            if before_send is not None:
                reply = before_send(reply, state.phase)
            await ch.send(reply)
            if reply["op"] == "masked":
                await asyncio.sleep(0)  # let the link write the reply out first
                state.prepare_next()
    return state.booster()
