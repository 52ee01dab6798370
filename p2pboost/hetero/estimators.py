"""The facade users call for hetero (vertical) SecureBoost: one object per role.

In code that already runs an event loop::

    async with Node("guest", ...) as node:
        guest = await HeteroGuest(BoostParams(n_estimators=50)).afit(node, ["bank"], X, y)
        proba = await guest.apredict(node, X_new)

    async with Node("bank", ...) as node:                     # on the host's machine
        host = await HeteroHost().afit(node, "guest", X_host)
        await host.aserve_predict(node, X_host_new)

and in plain scripts, ``fit``/``predict``/``serve_predict`` take a node that is not started
yet, run it for the call and close it.

Alignment: pass ``ids`` (one unique id per row) to ``afit`` on **every** party and the parties
first run private set intersection (:mod:`p2pboost.protocols.psi`) and train on the common
rows only, in the guest's order; ``aligned_ids_`` holds those ids (each party learns the
intersection and the other parties' set sizes, nothing else). Without ``ids`` the rows must
already be aligned: the same samples in the same order at every party. ``eval_set`` rows and
prediction batches must be aligned by the caller.

Conventions as scikit-learn's: ``__init__`` only stores arguments, ``afit`` returns ``self``,
fitted attributes end in ``_`` (``model_``, ``feature_importances_``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, NotFittedError
from p2pboost.gbdt.callbacks import Callback, EarlyStopping
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import check_weights
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.inference.batch import guest_explain, guest_predict, host_predict
from p2pboost.hetero.inference.feature_store import FeatureStore
from p2pboost.hetero.inference.predictor import GuestPredictor, serve_host
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.hetero.training.common import Progress
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.net._blocking import run_with_node
from p2pboost.net.node import Node
from p2pboost.protocols.psi import psi_guest, psi_host
from p2pboost.workers import AnyExecutor

__all__ = ["HeteroGuest", "HeteroHost"]

F64 = npt.NDArray[np.float64]
DEFAULT_SESSION = "p2pboost-hetero"


def _check_ids(ids: Any, n_rows: int) -> None:
    if ids is None:
        return
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        raise InputError(f"ids must be one per row ({n_rows}), got shape {arr.shape}")
    if np.unique(arr).size != arr.size:
        raise InputError("ids must be unique")


async def _aligned_positions(
    node: Node,
    session_id: str,
    role: str,
    peers: Sequence[str],
    ids: Any,
    executor: AnyExecutor | None,
) -> npt.NDArray[np.int64]:
    """Positions of this party's rows that every party holds, in the guest's order (PSI)."""
    async with node.session(f"{session_id}-psi", peers=list(peers)) as session:
        if role == "guest":
            result = await psi_guest(session, list(peers), ids, executor=executor)
        else:
            result = await psi_host(session, peers[0], ids, executor=executor)
    if result.size == 0:
        raise InputError("the parties have no sample id in common: nothing to train on")
    return result.positions


class HeteroGuest:
    """The label holder. ``params`` are the core's (:class:`BoostParams`).

    ``scheme`` picks the gradients' encryption (``"paillier"``, the default, or ``"ou"``); it
    is a shortcut for ``config=HeteroConfig(scheme=...)`` and, with a ``config``, overrides
    its scheme. ``checkpoint_dir``: write a checkpoint there after every round, from which
    ``afit(..., resume=True)`` continues (:mod:`p2pboost.hetero.training.checkpoint`).
    ``eval_metric`` is evaluated on every ``eval_set`` (default: the objective's metric);
    ``early_stopping_rounds`` watches it on the last set.
    """

    def __init__(
        self,
        params: BoostParams | None = None,
        *,
        config: HeteroConfig | None = None,
        scheme: str | None = None,
        early_stopping_rounds: int | None = None,
        session_id: str = DEFAULT_SESSION,
        executor: AnyExecutor | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        eval_metric: str | None = None,
    ) -> None:
        self.params = params
        if scheme is not None:
            config = replace(config or HeteroConfig(), scheme=scheme)
        self.config = config
        self.early_stopping_rounds = early_stopping_rounds
        self.eval_metric = eval_metric
        self.session_id = session_id
        self.executor = executor
        self.checkpoint_dir = checkpoint_dir

    @property
    def model_(self) -> GuestModel:
        model: GuestModel | None = getattr(self, "_model", None)
        if model is None:
            raise NotFittedError("HeteroGuest is not fitted (call afit/fit or load)")
        return model

    @property
    def feature_importances_(self) -> F64:
        """Gain importance of the guest's own features (normalised to sum 1)."""
        imp = self.model_.feature_importance("gain")
        total = imp.sum()
        return imp / total if total > 0 else imp

    async def afit(
        self,
        node: Node,
        hosts: Sequence[str],
        X: Any,
        y: Any,
        *,
        eval_set: Sequence[tuple[Any, Any]] = (),
        eval_names: Sequence[str] | None = None,
        ids: Any = None,
        callbacks: Sequence[Callback] = (),
        resume: bool = False,
        feature_names: Sequence[str] | None = None,
        init_model: GuestModel | str | os.PathLike[str] | None = None,
        sample_weight: Any = None,
    ) -> HeteroGuest:
        """Train with ``hosts`` over ``node`` (running); returns ``self``. ``eval_names`` name
        the ``eval_set`` entries in the history (default ``valid_0``, ``valid_1``, ...);
        ``resume``: continue from ``checkpoint_dir`` where every party's checkpoint is;
        ``feature_names`` (default: a DataFrame's columns) go into the model; ``init_model``
        (a model or its file) is continued with more rounds (every host passes its part);
        ``sample_weight`` (per row of ``X``) stays with the guest."""
        if init_model is not None and not isinstance(init_model, GuestModel):
            init_model = GuestModel.load(init_model)
        # Checked once, here; guest_train takes the value as it is.
        X_arr = Features.from_user(X, feature_names=feature_names, allow_no_features=True)
        names = None if X_arr.names is None else list(X_arr.names)
        y_arr = np.asarray(y)
        _check_ids(ids, X_arr.n_rows)
        if ids is not None:
            if y_arr.shape[:1] != (X_arr.n_rows,):
                raise InputError(f"X has {X_arr.n_rows} rows but y has {y_arr.shape[0]}")
            keep = await _aligned_positions(
                node, self.session_id, "guest", hosts, ids, self.executor
            )
            weight = check_weights(sample_weight, X_arr.n_rows)  # one per row given
            if weight is not None:
                sample_weight = weight[keep]  # the rows kept
            X_arr, y_arr = X_arr.rows(keep), y_arr[keep]
            self.aligned_ids_ = np.asarray(ids)[keep]
        cbs = list(callbacks)
        if self.early_stopping_rounds is not None:
            if not eval_set:
                raise InputError("early_stopping_rounds needs an eval_set")
            cbs.append(EarlyStopping(self.early_stopping_rounds))
        async with node.session(self.session_id, peers=list(hosts)) as session:
            self._model = await guest_train(
                session,
                list(hosts),
                X_arr,
                y_arr,
                self.params or BoostParams(),
                eval_sets=eval_set,
                eval_names=eval_names,
                eval_metrics=[self.eval_metric] if self.eval_metric else None,
                callbacks=cbs,
                config=self.config,
                executor=self.executor,
                checkpoint=self.checkpoint_dir,
                resume=resume,
                feature_names=names,
                init_model=init_model,
                sample_weight=sample_weight,
            )
        return self

    def fit(self, node: Node, hosts: Sequence[str], X: Any, y: Any, **kwargs: Any) -> HeteroGuest:
        """Blocking :meth:`afit`: starts ``node``, trains, closes it."""
        return run_with_node(node, self.afit(node, hosts, X, y, **kwargs))

    async def apredict_margin(
        self, node: Node, X: Any, *, session_id: str | None = None, private: bool = False
    ) -> F64:
        """Raw scores ``(n, K)``; each host serves its part of the rows (``aserve_predict``).
        ``private``: private inference (this guest learns the scores and no host decision;
        see ``docs/explanation/private-inference.md``)."""
        model = self.model_
        sid = session_id or f"{self.session_id}-predict"
        async with node.session(sid, peers=list(model.hosts)) as session:
            return await guest_predict(
                session, model, X, private=private, executor=self.executor if private else None
            )

    async def apredict(
        self,
        node: Node,
        X: Any,
        *,
        session_id: str | None = None,
        private: bool = False,
        pred_contribs: bool = False,
    ) -> F64:
        """Probabilities (classification) or values (regression), as the core's ``predict``.

        ``private``: private inference (see :meth:`apredict_margin`). ``pred_contribs``: exact
        TreeSHAP contributions instead, in XGBoost's layout (one column per guest feature, then
        one per host, or one per feature token of a host that consents, then the base value);
        every row sums to its margin. The columns' names are left in ``contribution_names_``
        (see :mod:`p2pboost.hetero.inference.explain`). Explanations need the decision bits, so
        they cannot be private.
        """
        if pred_contribs:
            if private:
                raise InputError(
                    "pred_contribs needs the hosts' decision bits, which private inference "
                    "withholds: explain with private=False"
                )
            model = self.model_
            sid = session_id or f"{self.session_id}-predict"
            async with node.session(sid, peers=list(model.hosts)) as session:
                contributions = await guest_explain(session, model, X)
            self.contribution_names_ = contributions.names
            return contributions.values
        margin = await self.apredict_margin(node, X, session_id=session_id, private=private)
        return self.model_.transform(margin)

    def predict(self, node: Node, X: Any, **kwargs: Any) -> F64:
        """Blocking :meth:`apredict`."""
        return run_with_node(node, self.apredict(node, X, **kwargs))

    def predictor(self, node: Node, **kwargs: Any) -> GuestPredictor:
        """An online/batch inference service over ``node`` (running): hosts find rows by id.

        ``async with guest.predictor(node) as p: await p.predict(id, x)``; keyword arguments
        go to :class:`~p2pboost.hetero.inference.predictor.GuestPredictor` (``max_batch``,
        ``host_timeout``, ...).
        """
        return GuestPredictor(node, self.model_, **kwargs)

    def save(self, path: str | os.PathLike[str]) -> None:
        self.model_.save(path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **kwargs: Any) -> HeteroGuest:
        guest = cls(**kwargs)
        guest._model = GuestModel.load(path)
        return guest


class HeteroHost:
    """A feature holder: learns nothing about labels, keeps its thresholds to itself.

    ``executor``: a :class:`~p2pboost.workers.PinnedPool` (``p2pboost.workers.pinned_pool``),
    a ``distributed.Client`` or a :class:`~p2pboost.workers.ClusterPool` (the shards then live
    on the cluster's workers) is used as it is; with any other executor each training starts
    ``workers`` pinned
    processes of its own for the ciphertexts (see :func:`p2pboost.hetero.training.host.host_train`).
    ``sparse``: how the host treats features that are mostly one value (``"auto"``, True,
    False; see ``host_train``); it changes the host's work, never the trees.
    ``checkpoint_dir``: write a checkpoint there after every tree, offered to the guest by
    ``afit(..., resume=True)``. ``memory_budget_mb``: the most the encrypted histograms kept
    between layers may take (None: no bound; see ``host_train``); it changes the host's work,
    never the trees. ``monotone_constraints``: the directions (-1/0/1) of this host's own
    features by name; ``interaction_constraints``: the run's groups of feature names, the same
    as the guest's (see ``host_train``; the guest learns directions and memberships of
    anonymous feature tokens, never names). ``explain_features``: consent to per-feature
    explanations of predictions (the guest then learns an opaque token of the feature of each
    split, not its name; the tokens of the last request are left in ``feature_tokens_``, this
    host's record of which is which).
    """

    def __init__(
        self,
        *,
        session_id: str = DEFAULT_SESSION,
        executor: AnyExecutor | None = None,
        workers: int | None = None,
        sparse: bool | str = "auto",
        checkpoint_dir: str | os.PathLike[str] | None = None,
        memory_budget_mb: float | None = None,
        monotone_constraints: Any = None,
        interaction_constraints: Any = None,
        explain_features: bool = False,
    ) -> None:
        self.session_id = session_id
        self.executor = executor
        self.workers = workers
        self.sparse = sparse
        self.checkpoint_dir = checkpoint_dir
        self.memory_budget_mb = memory_budget_mb
        self.monotone_constraints = monotone_constraints
        self.interaction_constraints = interaction_constraints
        self.explain_features = explain_features

    @property
    def model_(self) -> HostModel:
        model: HostModel | None = getattr(self, "_model", None)
        if model is None:
            raise NotFittedError("HeteroHost is not fitted (call afit/fit or load)")
        return model

    @property
    def feature_importances_(self) -> F64:
        """Split-count importance of this host's features (gains stay with the guest)."""
        imp = self.model_.feature_importance()
        total = imp.sum()
        return imp / total if total > 0 else imp

    async def afit(
        self,
        node: Node,
        guest: str,
        X: Any,
        *,
        eval_set: Sequence[Any] = (),
        ids: Any = None,
        resume: bool = False,
        feature_names: Sequence[str] | None = None,
        init_model: HostModel | str | os.PathLike[str] | None = None,
        progress: Progress | None = None,
    ) -> HeteroHost:
        """Train with ``guest`` over ``node`` (running); ``eval_set``: this host's features;
        ``resume``: offer the checkpoint in ``checkpoint_dir`` to the guest;
        ``feature_names`` (default: a DataFrame's columns) stay in this host's model part;
        ``init_model``: this host's part (or file) of the model the guest continues;
        ``progress``: where the host keeps its phase and tree (read it to monitor)."""
        if init_model is not None and not isinstance(init_model, HostModel):
            init_model = HostModel.load(init_model)
        # Checked once, here; a scipy.sparse matrix stays sparse (host_train bins it column
        # by column) and host_train takes the value as it is.
        X_arr = Features.from_user(X, feature_names=feature_names, sparse=True)
        names = None if X_arr.names is None else list(X_arr.names)
        _check_ids(ids, X_arr.n_rows)
        if ids is not None:
            keep = await _aligned_positions(
                node, self.session_id, "host", [guest], ids, self.executor
            )
            X_arr = X_arr.rows(keep)
            self.aligned_ids_ = np.asarray(ids)[keep]
        async with node.session(self.session_id, peers=[guest]) as session:
            self._model = await host_train(
                session,
                guest,
                X_arr,
                eval_sets=eval_set,
                executor=self.executor,
                workers=self.workers,
                sparse=self.sparse,
                checkpoint=self.checkpoint_dir,
                resume=resume,
                feature_names=names,
                init_model=init_model,
                memory_budget_mb=self.memory_budget_mb,
                monotone_constraints=self.monotone_constraints,
                interaction_constraints=self.interaction_constraints,
                progress=progress,
            )
        return self

    def fit(self, node: Node, guest: str, X: Any, **kwargs: Any) -> HeteroHost:
        """Blocking :meth:`afit`."""
        return run_with_node(node, self.afit(node, guest, X, **kwargs))

    async def aserve_predict(
        self,
        node: Node,
        X: Any,
        *,
        session_id: str | None = None,
        private: bool | None = None,
    ) -> None:
        """Answer one prediction request of the guest for this host's rows ``X``.
        ``private``: None answers the mode the guest asks for; True only private inference,
        False only the decision bits."""
        model = self.model_
        sid = session_id or f"{self.session_id}-predict"
        async with node.session(sid, peers=[model.guest]) as session:
            tokens = await host_predict(
                session,
                model,
                X,
                private=private,
                executor=self.executor,
                explain_features=self.explain_features,
            )
        if tokens is not None:
            self.feature_tokens_ = tokens.names(node.party_id)

    def serve_predict(self, node: Node, X: Any, **kwargs: Any) -> None:
        """Blocking :meth:`aserve_predict`."""
        run_with_node(node, self.aserve_predict(node, X, **kwargs))

    async def aserve(
        self, node: Node, store: FeatureStore, *, sessions: int | None = None, **kwargs: Any
    ) -> None:
        """Answer the guest's inference sessions (a
        :class:`~p2pboost.hetero.inference.predictor.GuestPredictor`) with rows looked up by id in
        ``store``; returns after ``sessions`` ended (None: never).
        """
        kwargs.setdefault("explain_features", self.explain_features)
        await serve_host(node, self.model_, store, sessions=sessions, **kwargs)

    def save(self, path: str | os.PathLike[str]) -> None:
        self.model_.save(path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **kwargs: Any) -> HeteroHost:
        host = cls(**kwargs)
        host._model = HostModel.load(path)
        return host
