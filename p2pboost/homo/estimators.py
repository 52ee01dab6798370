"""The facade for horizontal (homo) SecureBoost: a server and any number of clients.

Clients hold rows with the same features and their own labels; the server holds nothing and
learns only securely aggregated sums (the protocol: :mod:`p2pboost.homo`). Every client ends
with the same model and predicts locally::

    async with Node("server", listen="wss://0.0.0.0:8443", peers={"bank1": None, ...},
                    tls="certs/server") as node:
        server = await HomoServer(BoostParams(n_estimators=50)).afit(node, ["bank1", "bank2"])

    async with Node("bank1", peers={"server": "wss://server:8443"}, tls="certs/bank1") as node:
        client = await HomoClient(BoostParams(n_estimators=50), identity="certs/bank1").afit(
            node, "server", X, y)
        proba = client.predict_proba(X_new)           # local: no network

``fit`` takes a node that is not started yet, runs it for the call and closes it. Every party
must pass the same parameters (a digest is compared at the start). ``masking=False`` is an
insecure mode (the server sees every client's histograms) kept for measuring the cost of
masking; it needs an explicit opt-in at every party.

Conventions as scikit-learn's: ``__init__`` only stores arguments, ``afit`` returns ``self``,
fitted attributes end in ``_``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import NotFittedError
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.shap import booster_contributions
from p2pboost.homo.client import client_train
from p2pboost.homo.config import ClientIdentity, HomoConfig, HomoResult, Tap
from p2pboost.homo.server import server_train
from p2pboost.net._blocking import run_with_node
from p2pboost.net.node import Node, Session

__all__ = ["DEFAULT_SESSION", "HomoClient", "HomoServer"]

F64 = npt.NDArray[np.float64]
DEFAULT_SESSION = "p2pboost-homo"


def _session_id(session: str, client: str) -> str:
    """One session per client, so one client's failure never ends the others' sessions."""
    return f"{session}/{client}"


class _Settings:
    """What the server and every client must agree on (a digest is compared at hello), and
    where their one session per client is named. ``allow_two_clients`` is each party's own:
    it accepts what a federation of two clients cannot hide and silences the
    :class:`~p2pboost.exceptions.TwoClientWarning` (:class:`~p2pboost.homo.config.HomoConfig`)."""

    def __init__(
        self,
        params: BoostParams | None,
        *,
        threshold: int | None,
        min_clients: int,
        masking: bool,
        round_timeout: float,
        eval_metric: str | None,
        early_stopping_rounds: int | None,
        session: str,
        allow_two_clients: bool = False,
    ) -> None:
        self.params = params
        self.threshold = threshold
        self.min_clients = min_clients
        self.masking = masking
        self.round_timeout = round_timeout
        self.eval_metric = eval_metric
        self.early_stopping_rounds = early_stopping_rounds
        self.allow_two_clients = allow_two_clients
        self.session = session

    def _make_config(self) -> HomoConfig:
        return HomoConfig(
            params=self.params or BoostParams(),
            threshold=self.threshold,
            min_clients=self.min_clients,
            masking=self.masking,
            round_timeout=self.round_timeout,
            eval_metric=self.eval_metric,
            early_stopping_rounds=self.early_stopping_rounds,
            allow_two_clients=self.allow_two_clients,
        ).validate()


class HomoServer(_Settings):
    """The coordinator: holds no data; ends with the model (``model_``) and run statistics.

    ``checkpoint_dir``: write a checkpoint there after every round, from which
    ``afit(..., resume=True)`` continues (:mod:`p2pboost.homo.checkpoint`).
    A client whose process restarts during the run is taken back (its session reopened)
    rather than dropped. ``share_statistics``: send the clients the trees' covers and gains
    too (by default they receive zeros in their place:
    :attr:`~p2pboost.homo.config.HomoConfig.share_statistics`).
    """

    def __init__(
        self,
        params: BoostParams | None = None,
        *,
        threshold: int | None = None,
        min_clients: int = 2,
        masking: bool = True,
        round_timeout: float = 120.0,
        eval_metric: str | None = None,
        early_stopping_rounds: int | None = None,
        session: str = DEFAULT_SESSION,
        allow_two_clients: bool = False,
        tap: Tap | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        share_statistics: bool = False,
    ) -> None:
        super().__init__(
            params,
            threshold=threshold,
            min_clients=min_clients,
            masking=masking,
            round_timeout=round_timeout,
            eval_metric=eval_metric,
            early_stopping_rounds=early_stopping_rounds,
            session=session,
            allow_two_clients=allow_two_clients,
        )
        self.tap = tap
        self.checkpoint_dir = checkpoint_dir
        self.share_statistics = share_statistics

    async def afit(
        self,
        node: Node,
        clients: Sequence[str],
        *,
        init_model: Booster | str | os.PathLike[str] | None = None,
        resume: bool = False,
        before_rejoin: Callable[[str], Awaitable[None]] | None = None,
    ) -> HomoServer:
        """Coordinate one training run with ``clients`` (their party ids); ``init_model`` (a
        model or its file) is continued with more rounds (warm start); ``resume``: continue
        from ``checkpoint_dir``. ``before_rejoin(client)`` runs before a restarted client's
        session is reopened (the command line agrees on the settings with it again)."""
        config = replace(self._make_config(), share_statistics=self.share_statistics)
        if init_model is not None and not isinstance(init_model, Booster):
            init_model = Booster.load(os.fspath(init_model))
        async with contextlib.AsyncExitStack() as stack:

            async def rejoin(client: str) -> Session:
                if before_rejoin is not None:
                    await before_rejoin(client)
                session = node.session(_session_id(self.session, client), peers=[client])
                return await stack.enter_async_context(session)

            sessions = {
                c: await stack.enter_async_context(
                    node.session(_session_id(self.session, c), peers=[c])
                )
                for c in clients
            }
            result = await server_train(
                sessions,
                config,
                tap=self.tap,
                init_model=init_model,
                checkpoint=self.checkpoint_dir,
                resume=resume,
                rejoin=rejoin,
            )
        self.result_: HomoResult = result
        self.model_: Booster = result.booster
        return self

    def fit(self, node: Node, clients: Sequence[str]) -> HomoServer:
        return run_with_node(node, self.afit(node, clients))


class HomoClient(_Settings):
    """A data holder: trains with the others through the server, then predicts locally.

    ``identity`` is this party's certificate directory (``key.pem``, ``cert.pem``, ``ca.pem``)
    or a :class:`ClientIdentity`: its key signs this client's key adverts and the CA checks
    the other clients'.
    """

    def __init__(
        self,
        params: BoostParams | None = None,
        *,
        identity: ClientIdentity | str | os.PathLike[str] | None = None,
        threshold: int | None = None,
        min_clients: int = 2,
        masking: bool = True,
        round_timeout: float = 120.0,
        eval_metric: str | None = None,
        early_stopping_rounds: int | None = None,
        session: str = DEFAULT_SESSION,
        allow_two_clients: bool = False,
    ) -> None:
        super().__init__(
            params,
            threshold=threshold,
            min_clients=min_clients,
            masking=masking,
            round_timeout=round_timeout,
            eval_metric=eval_metric,
            early_stopping_rounds=early_stopping_rounds,
            session=session,
            allow_two_clients=allow_two_clients,
        )
        self.identity = identity

    async def afit(
        self,
        node: Node,
        server: str,
        X: Any,
        y: Any,
        eval_set: tuple[Any, Any] | None = None,
        sample_weight: Any = None,
    ) -> HomoClient:
        """Train on local rows ``X``, ``y`` (optionally validated on local ``eval_set``;
        ``sample_weight`` per local row stays here)."""
        config = self._make_config()
        identity = self.identity
        if identity is not None and not isinstance(identity, ClientIdentity):
            identity = ClientIdentity.from_dir(identity)
        async with node.session(_session_id(self.session, node.party_id), peers=[server]) as s:
            self.model_: Booster = await client_train(
                s,
                server,
                X,
                y,
                config,
                identity=identity,
                me=node.party_id,
                eval_set=eval_set,
                sample_weight=sample_weight,
            )
        return self

    def fit(
        self, node: Node, server: str, X: Any, y: Any, eval_set: tuple[Any, Any] | None = None
    ) -> HomoClient:
        return run_with_node(node, self.afit(node, server, X, y, eval_set))

    def _model(self) -> Booster:
        model = getattr(self, "model_", None)
        if not isinstance(model, Booster):
            raise NotFittedError("call fit or afit before predicting")
        return model

    def predict_proba(self, X: Any) -> F64:
        """Class probabilities (binary: ``(n,)`` of class 1) or values; local only."""
        return self._model().predict(X)

    def predict(self, X: Any, *, pred_contribs: bool = False) -> F64:
        """Labels for classification (argmax / ``p >= 0.5``), values for regression;
        ``pred_contribs=True``: exact per-feature TreeSHAP contributions to the margin
        (:func:`~p2pboost.gbdt.shap.booster_contributions`; every client holds the whole
        model, so this is local too)."""
        model = self._model()
        if pred_contribs:
            return booster_contributions(model, X)
        out = model.predict(X)
        name = model.objective.name
        if name == "multi:softmax":
            return np.asarray(out.argmax(axis=1), dtype=np.float64)
        if name == "binary:logistic":
            return (out >= 0.5).astype(np.float64)
        return out
