"""A client's side of horizontal SecureBoost: a state machine that answers the server.

:class:`Client` is sans-I/O: :meth:`Client.handle` takes one message as it arrived (a decoded
wire map), validates it, and returns the reply to send (or ``None``); it never awaits, so
tests drive it with raw messages. :func:`client_train` is the thin coroutine that moves
messages between it and the node.

What the client holds grows with the run, one object per stage, each existing from the
message that creates it on (instead of fields that are ``None`` until then):

- :class:`~p2pboost.homo._client_keys.ClientKeys`, always: its key epochs, the masking of its
  vectors, and what it signed and revealed after a dropout;
- :class:`~p2pboost.homo._model.LocalModel`, from ``model``: bin edges, binned rows, margins,
  the trees so far, and per tree its gradient columns (from ``grid``) and its grids,
  quantized gradients and each row's node (from ``root``).

An honest client enforces the rules that keep its vectors secret whatever the server asks
(see ``docs/explanation/secagg.md`` and :mod:`~p2pboost.homo._client_keys`): before it reveals
anything about a round it signs that round's survivor set and checks that at least ``t``
survivors signed the same (Bonawitz's consistency check); it reveals round keys only for a
round it sent in, only if some member is missing and at least ``min_clients`` remain, answers
one recovery per epoch, and never gives both shares of one client.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ModelError, P2PBoostError, RemoteProtocolError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.booster import Booster, check_private_run, privacy_from, rng_state_from
from p2pboost.gbdt.constraints import resolve_constraints
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.objectives import get_objective
from p2pboost.gbdt.params import MultiStrategy
from p2pboost.gbdt.rounds import check_weights
from p2pboost.homo._binning import Query, child_counts, float_keys
from p2pboost.homo._client_keys import ClientKeys
from p2pboost.homo._messages import (
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
    Recover,
    Reply,
    Shares,
    Survivors,
    Unmask,
    decode_command,
)
from p2pboost.homo._model import LocalModel
from p2pboost.homo._quantile import GroupedKeys, RankQuery
from p2pboost.homo._vectors import eval_vector, stats_vector
from p2pboost.homo.config import (
    CHANNEL,
    VERSION,
    ClientIdentity,
    HomoConfig,
    HomoPhase,
    warn_two_clients,
)
from p2pboost.net.node import Session
from p2pboost.protocols._messages import reject, send

__all__ = ["BeforeSend", "Client", "OnVector", "client_train"]

logger = logging.getLogger("p2pboost.homo.client")

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
#: ``on_vector(round, tag, vector)``: sees each plaintext vector before it is masked (tests).
OnVector = Callable[[int, str, I64], None]
#: ``before_send(reply, phase)``: returns the reply to send instead (tests simulate crashes and
#: misbehaving clients with it).
BeforeSend = Callable[[Reply, HomoPhase], Reply]


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
        self.config = config
        self.params = config.params
        self.objective = get_objective(config.params)
        vector_leaves = MultiStrategy(self.params.multi_strategy) is MultiStrategy.MULTI_OUTPUT_TREE
        self.per_round = 1 if vector_leaves else self.objective.n_outputs
        self.eval_set = eval_set
        self.on_vector = on_vector
        self.phase = HomoPhase.HELLO
        self.keys_cols = [float_keys(col) for col in X.T]
        self.secagg = ClientKeys(me, config, identity, self.bad)
        self.model: LocalModel | None = None
        self.best_iteration: int | None = None  # told at done
        self.history: dict[str, dict[str, list[float]]] = {}  # told at done
        self.rng_state: dict[str, Any] | None = None  # told at done
        self.privacy: dict[str, Any] | None = None  # told at done (a private model's record)
        #: The last step of a median search we answered (what it ran over, the query).
        self.median_step: tuple[str, RankQuery] | None = None
        self.told_members = False  # the first epoch's members were checked for two clients

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
        secagg = self.secagg
        if isinstance(msg, Epoch):
            advert = secagg.on_epoch(msg)
            if not self.told_members:  # the run's first members: what its aggregation hides
                self.told_members = True
                warn_two_clients(self.config, len(msg.members), logger)
            return advert
        if isinstance(msg, Adverts):
            return secagg.on_adverts(msg)
        if isinstance(msg, Shares):
            return secagg.on_shares(msg)
        if isinstance(msg, Collect):
            return self._collect(msg)
        if isinstance(msg, Survivors):
            return secagg.on_survivors(msg)
        if isinstance(msg, Unmask):
            return secagg.on_unmask(msg)
        if isinstance(msg, Recover):
            return secagg.on_recover(msg)
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
        self.secagg.run = msg.run
        self.phase = HomoPhase.STATS
        return Joined(int(self.X.shape[1]))

    # -- rounds -------------------------------------------------------------------------------

    def _collect(self, msg: Collect) -> Masked:
        r = msg.round
        self.secagg.check_round(r)
        try:
            vector = self._vector(msg)
        except (ValueError, IndexError, OverflowError) as exc:
            if isinstance(exc, P2PBoostError):
                raise
            raise self.bad(f"bad arguments for {msg.TAG}: {exc}") from None
        if self.on_vector is not None:
            self.on_vector(r, msg.TAG, vector)
        return self.secagg.mask(r, vector)

    def prepare_next(self) -> None:
        """Compute the next round's masks ahead of time (see :meth:`ClientKeys.prepare_next`)."""
        self.secagg.prepare_next()

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
    X_arr = Features.from_user(X).dense()  # checked once, here; below it a float64 matrix
    objective = get_objective(config.params)
    y_arr = objective.check_labels(y)
    if X_arr.shape[0] != y_arr.size:
        raise InputError(f"X has {X_arr.shape[0]} rows but y has {y_arr.size} labels")
    if config.params.dp is not None:  # our labels and weights, checked before we join
        check_private_run(config.params, y_arr, False, sample_weight is not None)
    p = config.params  # constraints that do not fit our columns: refused before we join
    resolve_constraints(p.monotone_constraints, p.interaction_constraints, X_arr.shape[1])
    ev: tuple[F64, F64] | None = None
    if eval_set is not None:
        Xv = Features.from_user(eval_set[0], name="eval X", n_features=X_arr.shape[1]).dense()
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
