"""A client's side of horizontal SecureBoost: a state machine that answers the server.

:class:`Client` is sans-I/O: :meth:`Client.handle` takes one message as it arrived (a decoded
wire map), validates it, and returns the reply to send (or ``None``); it never awaits, so
tests drive it with raw messages. :func:`client_train` is the thin coroutine that moves
messages between it and the node.

What the client holds grows with the run, one object per stage, each existing from the
message that creates it on (instead of fields that are ``None`` until then):

- :class:`_EpochState`, from ``epoch``: this epoch's keys, pair keys (from ``adverts``) and the
  Shamir shares it holds (from ``shares``); a new epoch replaces it;
- :class:`_Rounds`, always: which rounds it sent and revealed, masks computed ahead;
- :class:`~p2pboost.homo._model.LocalModel`, from ``model``: bin edges, binned rows, margins,
  the trees so far, and per tree its gradient columns (from ``grid``) and its grids,
  quantized gradients and each row's node (from ``root``).

An honest client enforces the rules that keep its vectors secret whatever the server asks
(see ``docs/explanation/secagg.md``): it reveals round keys only for a round it sent in, only
if some member is missing and at least ``min_clients`` remain, answers one recovery per epoch,
and never gives both shares of one client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
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
    mask,
    mask_streams,
    round_key,
    shamir_split,
    sign_advert,
    to_unsigned,
    verify_advert,
)
from p2pboost.exceptions import (
    CryptoError,
    InputError,
    ModelError,
    P2PBoostError,
    RemoteProtocolError,
)
from p2pboost.gbdt.binning import BinMapper, check_matrix
from p2pboost.gbdt.booster import Booster, check_private_run, privacy_from, rng_state_from
from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import MultiStrategy
from p2pboost.gbdt.rounds import check_weights
from p2pboost.homo._binning import Query, child_counts, float_keys
from p2pboost.homo._messages import (
    Advert,
    Adverts,
    Collect,
    CollectBins,
    CollectChildren,
    CollectEval,
    CollectGrid,
    CollectMedian,
    CollectRoot,
    CollectStats,
    Done,
    Epoch,
    FinishedTree,
    Hello,
    Joined,
    Masked,
    ModelHeader,
    Ready,
    Recover,
    Recovered,
    Reply,
    Reveal,
    Sealed,
    Shares,
    Unmask,
    decode_command,
)
from p2pboost.homo._model import LocalModel
from p2pboost.homo._quantile import GroupedKeys, RankQuery
from p2pboost.homo._vectors import GRID_LENGTH, eval_vector, stats_vector
from p2pboost.homo.config import CHANNEL, VERSION, ClientIdentity, HomoConfig, HomoPhase
from p2pboost.net.node import Session
from p2pboost.protocols._messages import reject, send

__all__ = ["BeforeSend", "Client", "OnVector", "client_train"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
#: ``on_vector(round, tag, vector)``: sees each plaintext vector before it is masked (tests).
OnVector = Callable[[int, str, I64], None]
#: ``before_send(reply, phase)``: returns the reply to send instead (tests simulate crashes and
#: misbehaving clients with it).
BeforeSend = Callable[[Reply, HomoPhase], Reply]


# -- the state, one object per stage ------------------------------------------------------------


@dataclass
class _EpochState:
    """One key epoch, from its ``epoch`` message on."""

    number: int
    members: list[str]
    threshold: int
    keys: EpochKeys
    context: bytes  # binds derived keys and sealed shares to the run and epoch
    #: Pair keys with every other member (from ``adverts`` on).
    pairs: dict[str, PairKeys] = field(default_factory=dict)
    #: Shares (of the self seed, of the mask key) per member (ours from ``adverts`` on).
    held: dict[str, tuple[Share, Share]] = field(default_factory=dict)
    #: Masks may be made with these keys: shares are held and no round key was revealed.
    usable: bool = False
    #: This epoch's one recovery was answered.
    recovered: bool = False

    @property
    def public(self) -> bytes:
        """What this client advertises: its mask and channel public keys."""
        return self.keys.mask_public + self.keys.channel_public


@dataclass(frozen=True, slots=True)
class _Ahead:
    """Masks of round ``round`` in epoch ``epoch``, computed before the request came."""

    epoch: int
    round: int
    y: U64
    z: U64


@dataclass
class _Rounds:
    """Aggregation rounds: the last one answered, those sent and those revealed."""

    last: int = 0
    sent: set[int] = field(default_factory=set)
    last_length: int = 0
    ahead: _Ahead | None = None
    #: Round -> (survivors, dropped) the server told when unmasking it.
    revealed: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict)


# -- the state machine --------------------------------------------------------------------------


class Client:
    """A client's state machine: validates each command, answers with its vector or keys.

    ``X``, ``y`` (and ``eval_set``) are already checked (:func:`client_train` does it).
    """

    def __init__(
        self,
        me: str,
        server: str,
        X: F64,
        y: F64,
        config: HomoConfig,
        *,
        identity: ClientIdentity | None,
        eval_set: tuple[F64, F64] | None = None,
        on_vector: OnVector | None = None,
        weight: F64 | None = None,
    ) -> None:
        self.me, self.server = me, server
        self.X, self.y = X, y
        self.weight = weight
        self.identity = identity
        self.config = config
        self.params = config.params
        self.objective = get_objective(config.params)
        vector_leaves = MultiStrategy(self.params.multi_strategy) is MultiStrategy.MULTI_OUTPUT_TREE
        self.per_round = 1 if vector_leaves else self.objective.n_outputs
        self.eval_set = eval_set
        self.on_vector = on_vector
        self.phase = HomoPhase.HELLO
        self.keys_cols = [float_keys(col) for col in X.T]
        self.run = ""  # the run id, from hello on
        self.rounds = _Rounds()
        self.epoch: _EpochState | None = None
        self.model: LocalModel | None = None
        self.best_iteration: int | None = None  # told at done
        self.history: dict[str, dict[str, list[float]]] = {}  # told at done
        self.rng_state: dict[str, Any] | None = None  # told at done
        self.privacy: dict[str, Any] | None = None  # told at done (a private model's record)
        #: The last step of a median search we answered (what it ran over, the query).
        self.median_step: tuple[str, RankQuery] | None = None

    def bad(self, what: str) -> RemoteProtocolError:
        return reject(self.server, f"{what} (phase {self.phase.value})")

    # -- dispatch -----------------------------------------------------------------------------

    def handle(self, obj: object) -> Reply | None:
        """Validate ``obj`` (a message as it arrived) and return the reply to send, if any."""
        msg = decode_command(obj, self.server)
        if self.phase is HomoPhase.HELLO and not isinstance(msg, Hello):
            raise self.bad(f"{msg.TAG!r} before hello")
        if isinstance(msg, Hello):
            return self._hello(msg)
        if isinstance(msg, Epoch):
            return self._epoch(msg)
        if isinstance(msg, Adverts):
            return self._adverts(msg)
        if isinstance(msg, Shares):
            return self._shares(msg)
        if isinstance(msg, Collect):
            return self._collect(msg)
        if isinstance(msg, Unmask):
            return self._unmask(msg)
        if isinstance(msg, Recover):
            return self._recover(msg)
        if isinstance(msg, ModelHeader):
            self._model(msg)
        elif isinstance(msg, FinishedTree):
            self._tree(msg)
        elif isinstance(msg, Done):
            self._done(msg)
        else:
            raise self.bad(f"unknown command {msg.TAG!r}")
        return None

    def _hello(self, msg: Hello) -> Joined:
        if self.phase is not HomoPhase.HELLO or msg.version != VERSION:
            raise self.bad("unexpected hello")
        if msg.digest != self.config.digest():
            differences = "; ".join(self.config.differences(msg.settings)) or "digest only"
            raise self.bad(f"the server's training settings differ from ours: {differences}")
        self.run = msg.run
        self.phase = HomoPhase.STATS
        return Joined(int(self.X.shape[1]))

    # -- keys ---------------------------------------------------------------------------------

    def _epoch(self, msg: Epoch) -> Advert:
        if not self.config.masking:
            raise self.bad("key setup in an unmasked run")
        if msg.epoch <= (self.epoch.number if self.epoch is not None else 0):
            raise self.bad(f"epoch {msg.epoch!r} is not new")
        members = msg.members
        if members != sorted(set(members)) or self.me not in members:
            raise self.bad("bad member list")
        n, t = len(members), msg.threshold
        if n < self.config.min_clients or not self.config.shamir_threshold(n) <= t <= n:
            raise self.bad(f"threshold {t!r} for {n} members is not acceptable")
        if self.identity is None:
            raise InputError("masked training needs the client's identity (certificate key)")
        ep = _EpochState(msg.epoch, members, t, EpochKeys(), epoch_context(self.run, msg.epoch))
        self.epoch = ep
        sig = sign_advert(self.identity.signing_key, self.run, ep.number, self.me, ep.public)
        return Advert(ep.public, sig, self.identity.cert_pem)

    def _adverts(self, msg: Adverts) -> Sealed:
        ep = self.epoch
        if ep is None or msg.epoch != ep.number or ep.pairs:
            raise self.bad("adverts out of order")
        if sorted(msg.public) != ep.members:
            raise self.bad("adverts must cover exactly the epoch's members")
        assert self.identity is not None  # an epoch exists only with one
        if msg.public[self.me] != ep.public:
            raise self.bad("our own key advert was altered")
        publics: set[bytes] = {ep.keys.mask_public, ep.keys.channel_public}
        for c in ep.members:
            if c == self.me:
                continue
            pub = msg.public[c]
            try:
                verify_advert(
                    self.identity.ca, msg.cert[c], msg.signature[c], self.run, ep.number, c, pub
                )
            except TypeError as exc:
                raise self.bad(f"malformed advert of {c}: {exc}") from None
            except CryptoError as exc:
                raise RemoteProtocolError(f"key advert rejected: {exc}", peer=c) from None
            m_pub, c_pub = pub[:KEY_BYTES], pub[KEY_BYTES:]
            if m_pub in publics or c_pub in publics:
                raise RemoteProtocolError("key advert repeats another client's key", peer=c)
            publics |= {m_pub, c_pub}
            try:
                ep.pairs[c] = ep.keys.pair_keys(self.me, c, m_pub, c_pub, ep.context)
            except CryptoError as exc:
                raise RemoteProtocolError(f"key advert rejected: {exc}", peer=c) from None
        n = len(ep.members)
        seed_shares = shamir_split(ep.keys.self_seed, n, ep.threshold)
        key_shares = shamir_split(ep.keys.mask_private, n, ep.threshold)
        sealed = {}
        for i, c in enumerate(ep.members):
            pair = (seed_shares[i], key_shares[i])
            if c == self.me:
                ep.held[self.me] = pair
            else:
                sealed[c] = encrypt_shares(ep.pairs[c].share_key, pair, self.me, c, ep.context)
        return Sealed(sealed)

    def _shares(self, msg: Shares) -> Ready:
        ep = self.epoch
        if ep is None or not ep.pairs or msg.epoch != ep.number or len(ep.held) != 1:
            raise self.bad("shares out of order")
        if sorted(msg.shares) != [m for m in ep.members if m != self.me]:
            raise self.bad("a share from every other member is expected")
        x = ep.members.index(self.me) + 1
        for sender, blob in msg.shares.items():
            try:
                seed_share, key_share = decrypt_shares(
                    ep.pairs[sender].share_key, blob, sender, self.me, ep.context, 2
                )
            except CryptoError as exc:
                raise RemoteProtocolError(f"sealed shares rejected: {exc}", peer=sender) from None
            if seed_share.x != x or key_share.x != x:
                raise RemoteProtocolError("sealed shares are for another holder", peer=sender)
            ep.held[sender] = (seed_share, key_share)
        ep.usable = True
        return Ready()

    # -- rounds -------------------------------------------------------------------------------

    def _collect(self, msg: Collect) -> Masked:
        rounds, r = self.rounds, msg.round
        if r <= rounds.last:
            raise self.bad(f"round {r!r} is not after round {rounds.last} (replay?)")
        try:
            vector = self._vector(msg)
        except (ValueError, IndexError, OverflowError) as exc:
            if isinstance(exc, P2PBoostError):
                raise
            raise self.bad(f"bad arguments for {msg.TAG}: {exc}") from None
        rounds.last = r
        if self.on_vector is not None:
            self.on_vector(r, msg.TAG, vector)
        plain = to_unsigned(vector)
        if not self.config.masking:
            rounds.sent.add(r)
            return Masked(r, None, plain.copy())
        ep = self.epoch
        if ep is None or not ep.usable:
            raise self.bad("masked input requested before keys were set up")
        ahead, rounds.ahead = rounds.ahead, None
        if (
            ahead is not None
            and (ahead.epoch, ahead.round) == (ep.number, r)
            and ahead.y.size >= plain.size
        ):
            y, z = plain + ahead.y[: plain.size], plain + ahead.z[: plain.size]
        else:
            y, z = mask(plain, self.me, ep.keys.self_seed, ep.pairs, r)
        rounds.last_length = plain.size
        rounds.sent.add(r)
        return Masked(r, y, z)

    def prepare_next(self) -> None:
        """Compute the next round's masks ahead of time (rounds are numbered in sequence),
        long enough for a vector twice the last one or a gradient-grid vector."""
        ep = self.epoch
        if not self.config.masking or ep is None or not ep.usable:
            return
        length = max(2 * self.rounds.last_length, GRID_LENGTH)
        nxt = self.rounds.last + 1
        y_mask, z_mask = mask_streams(self.me, ep.keys.self_seed, ep.pairs, nxt, length)
        self.rounds.ahead = _Ahead(ep.number, nxt, y_mask, z_mask)

    def _unmask(self, msg: Unmask) -> Reveal:
        r, survivors, dropped = msg.round, msg.survivors, msg.dropped
        ep = self.epoch
        if r not in self.rounds.sent or r in self.rounds.revealed or ep is None:
            raise self.bad(f"unmasking round {r!r}, for which we sent nothing or revealed")
        if sorted(survivors + dropped) != ep.members or self.me not in survivors:
            raise self.bad("survivors and dropped must split the epoch's members")
        if len(survivors) < self.config.min_clients or not dropped:
            raise self.bad(f"refusing to unmask round {r}: {len(survivors)} survivors, no dropout")
        self.rounds.revealed[r] = (survivors, dropped)
        ep.usable = False  # round keys with the dropped are revealed: renew keys after this
        return Reveal(
            r,
            round_key(ep.keys.self_seed, r, "self"),
            {d: round_key(ep.pairs[d].mask_seed, r, "pair") for d in dropped},
        )

    def _recover(self, msg: Recover) -> Recovered:
        told = self.rounds.revealed.get(msg.round)
        ep = self.epoch
        if told is None or ep is None or ep.recovered:
            raise self.bad("recovery for a round we did not unmask, or a second one")
        if not msg.self_of:
            raise self.bad("recovery needs the clients to recover")
        survivors, dropped = told
        # Bonawitz's rule: self seeds only of that round's survivors, mask keys only of its
        # dropped clients; never both for one client.
        if (
            any(u not in survivors or u == self.me for u in msg.self_of)
            or sorted(msg.key_of) != dropped
        ):
            raise self.bad("recovery asks for shares we must not give")
        if not set(msg.self_of) | set(msg.key_of) <= set(ep.held):
            raise self.bad("recovery asks for shares we do not hold")
        ep.recovered = True
        return Recovered(
            {u: ep.held[u][0].to_bytes() for u in msg.self_of},
            {d: ep.held[d][1].to_bytes() for d in msg.key_of},
        )

    # -- model --------------------------------------------------------------------------------

    def _model(self, msg: ModelHeader) -> None:
        if self.model is not None:
            raise self.bad("a second model header")
        try:
            mapper = BinMapper.from_dict({"max_bin": self.params.max_bin, "edges": msg.edges})
        except ModelError as exc:
            raise self.bad(f"bad model header: {exc}") from None
        base = np.asarray(msg.base, dtype=np.float64)
        if mapper.n_features != self.X.shape[1] or base.shape != (self.objective.n_outputs,):
            raise self.bad("model header does not fit our data")
        self.model = LocalModel.start(
            self.params,
            self.objective,
            self.per_round,
            mapper,
            base,
            self.X,
            self.y,
            self.eval_set,
            self.weight,
            self.me,
        )
        self.phase = HomoPhase.TREES

    def _tree(self, msg: FinishedTree) -> None:
        model = self.model
        if model is None:
            raise self.bad("tree before the model header")
        try:
            tree = model.received_tree(msg.tree, msg.output)
        except ValueError as exc:
            raise self.bad(str(exc)) from None
        model.add_tree(tree, msg.output)

    def _done(self, msg: Done) -> None:
        if self.model is None:
            raise self.bad("training ended before the model header")
        self.best_iteration = msg.best_iteration
        rounds = len(self.model.trees) // self.per_round
        if any(len(v) > rounds for per_set in msg.history.values() for v in per_set.values()):
            raise self.bad("a training history longer than the rounds trained")
        self.history = msg.history
        try:
            self.rng_state = rng_state_from(json.loads(msg.rng_state)) if msg.rng_state else None
        except (ValueError, ModelError) as exc:
            raise self.bad(f"bad random generator state: {exc}") from None
        try:
            record = json.loads(msg.privacy) if msg.privacy else None
            self.privacy = privacy_from(record, self.params)
        except (ValueError, ModelError) as exc:
            raise self.bad(f"bad privacy record: {exc}") from None
        self.phase = HomoPhase.DONE

    def booster(self) -> Booster:
        """The federation's model (after ``done``)."""
        model = self.model
        if model is None:
            raise self.bad("training ended before the model header")
        n_rounds = len(model.trees) // self.per_round
        best = self.best_iteration
        if best is not None and not 0 <= best < max(1, n_rounds):
            raise self.bad("best_iteration out of range")
        return model.booster(best, self.history, self.rng_state, self.privacy)

    # -- the vectors (layouts in p2pboost.homo._vectors) --------------------------------------

    def _vector(self, msg: Collect) -> I64:
        """This client's vector for ``msg``; ``ValueError`` for a request that does not fit
        our state or data."""
        if isinstance(msg, CollectStats):
            return stats_vector(self.y, self.objective)
        if isinstance(msg, CollectBins):
            f = msg.feature
            if f.size and (f.min() < 0 or f.max() >= self.X.shape[1]):
                raise ValueError("feature out of range")
            return child_counts(self.keys_cols, Query(msg.level, f, msg.prefix))
        if isinstance(msg, CollectMedian):
            return self._median_counts(msg)
        model = self.model
        if isinstance(msg, CollectEval):
            metric = self.config.metric
            return eval_vector(metric, None) if model is None else model.evaluation(metric)
        if model is None:
            raise ValueError("gradients or histograms before the model header")
        if isinstance(msg, CollectGrid):
            return model.grid(msg.it, msg.output, msg.sample_seed)
        if isinstance(msg, CollectRoot):
            return model.root(msg)
        if isinstance(msg, CollectChildren):
            return model.children(msg)
        raise ValueError(f"unknown aggregate {msg.TAG!r}")

    def _median_counts(self, msg: CollectMedian) -> I64:
        """Our counts for one step of a median search: over our labels (only before the model
        header: the base margin) or the current tree's residuals by leaf, and only for a
        search that narrows (:meth:`~p2pboost.homo._quantile.RankQuery.follows`)."""
        query, last = msg.query(), self.median_step
        why = query.follows(last[1] if last is not None and last[0] == msg.of else None)
        if why is not None:
            raise ValueError(why)
        if msg.of == "residuals":
            if self.model is None:
                raise ValueError("residuals before the model header")
            counts = self.model.residual_counts(query, msg.tree)
        elif self.model is None and not query.group.any():
            counts = GroupedKeys(self.y, np.zeros(self.y.size, dtype=np.int64)).counts(query)
        else:
            raise ValueError("the labels' median is one group's, before the model header")
        self.median_step = (msg.of, query)
        return counts


# -- the coroutine ------------------------------------------------------------------------------


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
    on_vector: OnVector | None = None,
    before_send: BeforeSend | None = None,
    sample_weight: Any = None,
) -> Booster:
    """Train as a client with ``server``; returns the federation's model (same at every client).

    ``sample_weight`` (one value >= 0 per row of ``X``) stays with this client: it scales its
    rows' gradients and hessians before they are aggregated, as the core does.

    ``identity`` signs this client's key adverts (required unless ``config.masking`` is off).
    ``on_vector(round, tag, vector)`` sees each plaintext vector before it is masked (tests);
    ``before_send(reply, phase)`` returns the reply to send (tests use it to simulate a crash
    or a misbehaving client).
    """
    config = config.validate()
    X_arr = check_matrix(X)
    objective = get_objective(config.params)
    y_arr = objective.check_labels(y)
    if X_arr.shape[0] != y_arr.size:
        raise InputError(f"X has {X_arr.shape[0]} rows but y has {y_arr.size} labels")
    if config.params.dp is not None:  # our labels and weights, checked before we join
        check_private_run(config.params, y_arr, False, sample_weight is not None)
    ev: tuple[F64, F64] | None = None
    if eval_set is not None:
        Xv = check_matrix(eval_set[0], "eval X", n_features=X_arr.shape[1])
        yv = objective.check_labels(eval_set[1])
        if Xv.shape[0] != yv.size:
            raise InputError("eval set: rows and labels differ in number")
        ev = (Xv, yv)
    client = Client(
        me,
        server,
        X_arr,
        y_arr,
        config,
        identity=identity,
        eval_set=ev,
        on_vector=on_vector,
        weight=check_weights(sample_weight, y_arr.size),
    )
    ch = session.channel(server, CHANNEL)
    while client.phase is not HomoPhase.DONE:
        reply = client.handle(await ch.recv())
        if reply is None:
            continue
        if before_send is not None:
            reply = before_send(reply, client.phase)
        await send(ch, reply)
        if isinstance(reply, Masked):
            await asyncio.sleep(0)  # let the link write the reply out first
            client.prepare_next()
    return client.booster()
