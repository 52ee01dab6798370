"""Boosting: :func:`train` grows trees round by round; a :class:`Booster` predicts and persists.

Every round, before a tree is grown, the gradients and hessians of the rows it uses are put on
a :mod:`~p2pboost.gbdt.fixedpoint` grid chosen from those rows, so all histogram sums are exact
and a federated run (integer sums under encryption) reproduces the same trees.

Models are saved as versioned JSON (:meth:`Booster.to_dict` / :meth:`Booster.save`); never
pickle, so a model file cannot run code when loaded. A model trained with evaluation sets keeps
their per-round results (``history``, optional in the file) for learning curves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ModelError
from p2pboost.files import atomic_write
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.callbacks import Callback
from p2pboost.gbdt.categories import Categories, fit_categories, model_categories
from p2pboost.gbdt.constraints import resolve_constraints
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.grower import DepthMask, NodeColumns, TreeGrower
from p2pboost.gbdt.histogram import make_builder
from p2pboost.gbdt.history import History, history_from_json, history_to_json
from p2pboost.gbdt.metrics import get_metric
from p2pboost.gbdt.names import check_names, model_names
from p2pboost.gbdt.objectives import Objective, canonical_objective, get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.privacy import RowKeys, check_private_labels
from p2pboost.gbdt.rounds import (
    EvalData,
    GossSample,
    Margins,
    RoundLoop,
    RoundStart,
    RowSample,
    add_tree,
    check_weights,
    refit_leaves,
)
from p2pboost.gbdt.split import candidate_mask
from p2pboost.gbdt.tree import Tree

__all__ = [
    "ESTIMATOR_FORMAT",
    "FORMAT",
    "FORMAT_VERSION",
    "Booster",
    "EvalData",
    "bin_eval_sets",
    "check_eval_sets",
    "check_warm_start",
    "initial_margin",
    "node_columns",
    "refit_leaves",
    "rng_state_from",
    "train",
]

F64 = npt.NDArray[np.float64]
EvalSet = tuple[Any, Any]
FORMAT = "p2pboost.gbdt.booster"
#: The ``format`` of an estimator's file (``GBDTClassifier.save_model``): a booster inside.
ESTIMATOR_FORMAT = "p2pboost.gbdt.estimator"
FORMAT_VERSION = 1


class Booster:
    """A trained ensemble: bin mapper, base margin and trees.

    ``tree_output[i]`` is the output (class) tree ``i`` adds to, or -1 when the tree has vector
    leaves covering every output. ``trees_per_round`` trees make one boosting round.
    ``history[set name][metric]`` holds the evaluation after every round (empty if none ran).
    """

    def __init__(
        self,
        params: BoostParams,
        mapper: BinMapper,
        base_margin: F64,
        trees: list[Tree],
        tree_output: list[int],
        trees_per_round: int,
        best_iteration: int | None = None,
        history: History | None = None,
        rng_state: dict[str, Any] | None = None,
        feature_names: Sequence[str] | None = None,
        categories: dict[str, list[Any]] | None = None,
        privacy: dict[str, Any] | None = None,
        *,
        filtered_rows: int | None = None,
    ) -> None:
        self.params = params
        self.mapper = mapper
        self.base_margin = np.asarray(base_margin, dtype=np.float64)
        self.trees = trees
        self.tree_output = tree_output
        self.trees_per_round = trees_per_round
        self.best_iteration = best_iteration
        self.history: History = {} if history is None else history
        #: The random generator's state after the last round (a warm start continues it).
        self.rng_state = rng_state
        #: The features' names (None: taken by position only; see :mod:`p2pboost.gbdt.names`).
        self.feature_names = check_names(feature_names, mapper.n_features)
        #: Category lists of the categorical columns (see :mod:`p2pboost.gbdt.categories`).
        self.categories = categories
        #: What a private model spent (:func:`~p2pboost.gbdt.privacy.privacy_record`), or None.
        self.privacy = privacy
        #: A private model's training only: the row-trees the trainer's gradient filter left
        #: out (:attr:`~p2pboost.gbdt.privacy.PrivateRounds.filtered_rows`). A noiseless
        #: count of the training rows, outside the guarantee: never written to the model
        #: file (a loaded model has None), so it stays with the party that trained.
        self.filtered_rows = filtered_rows
        self.objective: Objective = get_objective(params)

    @property
    def n_features(self) -> int:
        return self.mapper.n_features

    @property
    def n_outputs(self) -> int:
        return int(self.base_margin.size)

    @property
    def n_rounds(self) -> int:
        return len(self.trees) // self.trees_per_round

    @classmethod
    def train(
        cls,
        params: BoostParams,
        X: Any,
        y: Any,
        eval_sets: Sequence[EvalSet] = (),
        eval_names: Sequence[str] | None = None,
        eval_metrics: Sequence[str] | None = None,
        callbacks: Sequence[Callback] = (),
        init_model: Booster | None = None,
        feature_names: Sequence[str] | None = None,
        sample_weight: Any = None,
    ) -> Booster:
        """Same as :func:`train`."""
        return train(
            params,
            X,
            y,
            eval_sets,
            eval_names,
            eval_metrics,
            callbacks,
            init_model,
            feature_names,
            sample_weight,
        )

    # -- prediction ----------------------------------------------------------------------------

    def predict_margin(self, X: Any, n_rounds: int | None = None) -> F64:
        """Raw scores ``(n, K)`` of the first ``n_rounds`` rounds (default: best or all); a
        DataFrame's columns are matched to the model's by name."""
        arr = Features.from_user(
            X, categories=self.categories, order=self.feature_names, n_features=self.n_features
        ).dense()
        margin = np.tile(self.base_margin, (arr.shape[0], 1))
        for tree, out in self._used_trees(n_rounds):
            add_tree(margin, tree.predict_raw(arr), out)
        return margin

    def predict_margin_binned(self, data: BinnedData, n_rounds: int | None = None) -> F64:
        """As :meth:`predict_margin` for data already binned by this model's mapper."""
        margin = np.tile(self.base_margin, (data.n_rows, 1))
        for tree, out in self._used_trees(n_rounds):
            add_tree(margin, tree.predict_binned(data), out)
        return margin

    def predict(self, X: Any, n_rounds: int | None = None, output_margin: bool = False) -> F64:
        """Predictions: probabilities (binary ``(n,)``, multi-class ``(n, K)``) or values."""
        margin = self.predict_margin(X, n_rounds)
        if output_margin:
            return margin[:, 0] if margin.shape[1] == 1 else margin
        return self.objective.prediction(margin)

    def feature_importance(self, kind: str = "gain") -> F64:
        """Per-feature total split gain (``"gain"``) or number of splits (``"split"``)."""
        if kind not in {"gain", "split"}:
            raise InputError(f"importance kind must be 'gain' or 'split', got {kind!r}")
        imp = np.zeros(self.n_features)
        for tree, _ in self._used_trees(None):
            internal = tree.feature >= 0
            weights = tree.gain[internal] if kind == "gain" else None
            imp += np.bincount(tree.feature[internal], weights=weights, minlength=self.n_features)
        return imp

    def _used_trees(self, n_rounds: int | None) -> list[tuple[Tree, int]]:
        if n_rounds is None:
            n_rounds = self.n_rounds if self.best_iteration is None else self.best_iteration + 1
        if not 0 <= n_rounds <= self.n_rounds:
            raise InputError(f"n_rounds must be in [0, {self.n_rounds}], got {n_rounds}")
        used = n_rounds * self.trees_per_round
        return list(zip(self.trees[:used], self.tree_output[:used], strict=True))

    # -- persistence ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description of the model (versioned)."""
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "params": self.params.to_dict(),
            "bin_mapper": self.mapper.to_dict(),
            "base_margin": self.base_margin.tolist(),
            "trees_per_round": self.trees_per_round,
            "best_iteration": self.best_iteration,
            "tree_output": list(self.tree_output),
            "trees": [t.to_dict() for t in self.trees],
        }
        if self.history:  # optional: files without it stay as they were
            out["history"] = history_to_json(self.history)
        if self.rng_state is not None:
            out["rng_state"] = self.rng_state
        if self.feature_names is not None:
            out["feature_names"] = list(self.feature_names)
        if self.categories:
            out["categories"] = {k: list(v) for k, v in self.categories.items()}
        if self.privacy is not None:
            out["privacy"] = dict(self.privacy)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Booster:
        """Rebuild a model from :meth:`to_dict`; :class:`ModelError` if it is not one."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ModelError("not a p2pboost gbdt model")
        if data.get("version") != FORMAT_VERSION:
            raise ModelError(f"unsupported model version {data.get('version')!r}")
        try:
            params = BoostParams.from_dict(data["params"])
            trees = [Tree.from_dict(t) for t in data["trees"]]
            per_round = int(data["trees_per_round"])
            booster = cls(
                params=params,
                mapper=BinMapper.from_dict(data["bin_mapper"]),
                base_margin=np.asarray(data["base_margin"], dtype=np.float64),
                trees=trees,
                tree_output=[int(o) for o in data["tree_output"]],
                trees_per_round=per_round,
                best_iteration=(
                    None if data["best_iteration"] is None else int(data["best_iteration"])
                ),
                history=history_from_json(
                    data.get("history"), len(trees) // per_round if per_round > 0 else 0
                ),
                rng_state=rng_state_from(data.get("rng_state")),
            )
            booster.feature_names = model_names(data.get("feature_names"), booster.n_features)
            booster.categories = model_categories(data.get("categories"))
            booster.privacy = privacy_from(data.get("privacy"), params)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"invalid model: {exc}") from None
        k = booster.n_outputs
        best = booster.best_iteration
        if k != booster.objective.n_outputs or not np.all(np.isfinite(booster.base_margin)):
            raise ModelError("invalid model: base margin does not match the objective")
        if best is not None and not 0 <= best < max(1, booster.n_rounds):
            raise ModelError("invalid model: best_iteration out of range")
        if (
            len(booster.trees) != len(booster.tree_output)
            or booster.trees_per_round < 1
            or len(booster.trees) % booster.trees_per_round
            or any(not -1 <= o < k for o in booster.tree_output)
        ):
            raise ModelError("invalid model: inconsistent trees")
        for tree, out in zip(booster.trees, booster.tree_output, strict=True):
            if tree.n_outputs != (k if out < 0 else 1):
                raise ModelError("invalid model: leaf size does not match the outputs")
            if np.any(tree.feature >= booster.n_features):
                raise ModelError("invalid model: split on an unknown feature")
        return booster

    def save(self, path: str | Path) -> None:
        """Write the model as JSON to ``path`` (atomically: the old file or the new one)."""
        atomic_write(path, json.dumps(self.to_dict()).encode("utf-8"))

    @classmethod
    def load(cls, path: str | Path) -> Booster:
        """Read a model written by :meth:`save`."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(f"cannot read model {path}: {exc}") from None
        return cls.from_dict(data)


def train(
    params: BoostParams,
    X: Any,
    y: Any,
    eval_sets: Sequence[EvalSet] = (),
    eval_names: Sequence[str] | None = None,
    eval_metrics: Sequence[str] | None = None,
    callbacks: Sequence[Callback] = (),
    init_model: Booster | None = None,
    feature_names: Sequence[str] | None = None,
    sample_weight: Any = None,
    features_by_round: Callable[[int], npt.NDArray[np.bool_] | None] | None = None,
    *,
    row_keys: RowKeys | None = None,
    row_sample: RowSample | None = None,
    goss_sample: GossSample | None = None,
    features_by_depth: DepthMask | None = None,
) -> Booster:
    """Train a booster on features ``X`` (NaN = missing) and labels ``y``.

    ``features_by_round(round)``: a mask of the features that round's trees may split on (on
    top of column sampling), or None for all; the core's reference for vertical modes that
    keep some trees to the guest's features (``HeteroConfig.complete_secure``).

    ``params.dp`` trains a differentially private model (:mod:`p2pboost.gbdt.privacy`);
    ``row_keys(ensemble, n_rows)`` then replaces its draw of the rows' ensemble keys (the
    core's reference for a horizontal federation, whose clients key their own rows).
    ``row_sample(round, n_rows)`` likewise replaces the draw of ``subsample``'s rows, and
    ``goss_sample(round, grad)`` GOSS's draw of rows and gradient multipliers (the core's
    reference for a horizontal federation, whose clients sample their own rows:
    :func:`p2pboost.homo._sampling.union_draws`).
    ``features_by_depth(depth)``: a mask of the features nodes at that depth may split on (the
    core's reference for vertical training's layered mode).

    ``sample_weight`` (one value >= 0 per row) multiplies each row's gradient and hessian, so
    ``min_child_weight`` counts weighted hessians (as XGBoost); the base margin is still
    estimated from the unweighted labels (give ``base_score`` to set it), and L1's leaf
    refit and the evaluation metrics ignore the weights.

    ``feature_names`` (default: a DataFrame's column names) are kept in the model, which then
    matches prediction input by name (:mod:`p2pboost.gbdt.names`).

    ``eval_sets`` are ``(X, y)`` pairs evaluated after every round with ``eval_metrics``
    (default: the objective's metric); ``callbacks`` see the results and may stop training
    (e.g. :class:`~p2pboost.gbdt.callbacks.EarlyStopping`). The rounds run through
    :class:`~p2pboost.gbdt.rounds.RoundLoop`, which the federated boosters drive too.

    ``init_model`` (warm start) continues that model with ``params.n_estimators`` more rounds:
    its bins, base margin, trees, history and random generator state carry on, so training
    3 rounds and then 3 more on the same rows gives exactly the trees of 6 in one go (row and
    column sampling included). The objective, number of outputs, tree strategy, bins and
    features must be the model's; the learning rate and the other knobs may change.
    """
    params = params.validate()
    objective = get_objective(params)
    y_arr = objective.check_labels(y)
    if params.dp is not None:
        check_private_run(params, y_arr, init_model is not None, sample_weight is not None)
    categories = (
        init_model.categories
        if init_model is not None
        else X.categories
        if isinstance(X, Features)
        else fit_categories(X)
    )
    features = Features.from_user(  # categorical columns as their codes; a warm start on
        X,  # the model's columns, in its order
        feature_names=feature_names,
        categories=categories,
        order=None if init_model is None else init_model.feature_names,
    )
    names = None if features.names is None else list(features.names)
    if features.n_rows != y_arr.size:
        raise InputError(f"X has {features.n_rows} rows but y has {y_arr.size} labels")
    metrics = [get_metric(m) for m in (eval_metrics or [objective.default_metric])]

    start = None
    if init_model is None:
        mapper = BinMapper(params.max_bin).fit(features)
        base = initial_margin(objective, params, y_arr)
    else:
        check_warm_start(init_model.params, params, init_model.n_features, features.n_features)
        mapper, base = init_model.mapper, init_model.base_margin
        start = RoundStart(
            init_model.trees, init_model.tree_output, init_model.history, init_model.rng_state
        )
    data = mapper.transform(features)
    # Evaluation frames get the training columns' encoding and order.
    evals = bin_eval_sets(objective, mapper, eval_sets, eval_names, categories, names)
    loop = RoundLoop(
        params,
        data.n_features,
        objective.n_outputs,
        callbacks,
        start=start,
        features_by_round=features_by_round,
        row_keys=row_keys,
        row_sample=row_sample,
        goss_sample=goss_sample,
    )
    weight = check_weights(sample_weight, y_arr.size)
    margins = Margins(objective, y_arr, base, evals, metrics, params.learning_rate, weight)
    if init_model is not None:  # the same sums, in the same order, as training them here
        margins.margin = init_model.predict_margin_binned(data)
        for ev in evals:
            ev.margin = init_model.predict_margin_binned(ev.data)
    builder = make_builder(data, params.sparse_aware, with_counts=params.min_samples_leaf > 1)
    candidates = candidate_mask(mapper.n_bins, params.max_bin)
    constraints = resolve_constraints(
        params.monotone_constraints,
        params.interaction_constraints,
        features.n_features,
        names,
        list(categories or ()),
    )
    for _ in loop:
        for task in loop.tasks(margins):
            grower = TreeGrower(
                data,
                builder,
                params,
                task.grad,
                task.hess,
                task.sample,
                candidates & task.features[:, None, None],
                mapper.thresholds,
                task.privacy,
                features_by_depth,
                node_columns(params, loop.rng, task.features),
                constraints,
            )
            tree = grower.grow()
            eval_leaves = [tree.leaves_binned(ev.data) for ev in evals]
            loop.add_tree(margins.update(task, tree, grower.positions, eval_leaves), task.out)
        loop.end_round(margins.evaluation())
    return Booster(
        params,
        mapper,
        base,
        loop.trees,
        loop.tree_output,
        loop.trees_per_round,
        loop.best_iteration,
        loop.history,
        loop.rng_state,
        check_names(names, features.n_features),
        categories,
        None if loop.privacy is None else loop.privacy.record(),
        filtered_rows=None if loop.privacy is None else loop.privacy.filtered_rows,
    )


def check_warm_start(
    old: BoostParams, params: BoostParams, model_features: int, n_features: int
) -> None:
    """A warm start continues a model trained with ``old`` on ``model_features`` features:
    what shapes its trees must not change (InputError naming it)."""
    for key in ("num_class", "multi_strategy", "max_bin"):
        if getattr(old, key) != getattr(params, key):
            raise InputError(
                f"init_model was trained with {key}={getattr(old, key)!r}, "
                f"not {getattr(params, key)!r}: a warm start must keep it"
            )
    if canonical_objective(old.objective) != canonical_objective(params.objective):
        raise InputError(
            f"init_model was trained with objective {old.objective!r}, not {params.objective!r}"
        )
    if model_features != n_features:
        raise InputError(f"init_model has {model_features} features, X has {n_features}")


def rng_state_from(value: object) -> dict[str, Any] | None:
    """A stored random generator state (a JSON map), or None; checked when the model is read."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ModelError("invalid model: rng_state is not a map")
    try:
        np.random.default_rng().bit_generator.state = value  # validates it
    except (TypeError, ValueError, KeyError) as exc:
        raise ModelError(f"invalid model: rng_state: {exc}") from None
    return value


def initial_margin(objective: Objective, params: BoostParams, y: F64) -> F64:
    """The base margin ``(K,)``: from ``params.base_score`` if set, else from the labels
    (a differentially private model starts at margin 0: the labels' mean is not public)."""
    if params.base_score is not None:
        return objective.margin_from_score(params.base_score)
    if params.dp is not None:
        return np.zeros(objective.n_outputs)
    return objective.init_margin(y)


def node_columns(
    params: BoostParams, rng: np.random.Generator, tree: npt.NDArray[np.bool_]
) -> NodeColumns | None:
    """The per-depth and per-node column draws of a tree, if the parameters ask for any."""
    if params.colsample_bylevel >= 1.0 and params.colsample_bynode >= 1.0:
        return None
    return NodeColumns(rng, tree, params.colsample_bylevel, params.colsample_bynode)


def check_private_run(params: BoostParams, y: F64, warm: bool, weighted: bool) -> None:
    """What a differentially private run refuses (InputError naming why)."""
    if warm:
        raise InputError(
            "differential privacy cannot continue a model (init_model): its budget and row "
            "assignment were spent by the run that made it"
        )
    if weighted:
        raise InputError(
            "differential privacy does not take sample_weight: weights scale gradients past "
            "the bound its sensitivities assume"
        )
    check_private_labels(params, y)


#: Keys that privacy records of older releases held but that are no part of the accountant's
#: statement: ``filtered_rows``, the gradient filter's count, a noiseless statistic of the
#: training rows. Loading drops them, so that a model loaded and saved again, or sent to
#: horizontal clients, no longer carries them; ``p2pboost inspect`` warns about a file that
#: still holds one (:func:`unnoised_counts`).
UNNOISED_RECORD_KEYS = ("filtered_rows",)


def privacy_from(value: object, params: BoostParams) -> dict[str, Any] | None:
    """A model file's privacy record, checked: present exactly when the model is private;
    without the counts older files held (:data:`UNNOISED_RECORD_KEYS`)."""
    if value is None and params.dp is None:
        return None
    if not isinstance(value, dict) or params.dp is None:
        raise ModelError("invalid model: privacy record and dp settings disagree")
    eps = value.get("epsilon")
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps > 0:
        raise ModelError("invalid model: privacy record without a positive epsilon")
    return {k: v for k, v in value.items() if k not in UNNOISED_RECORD_KEYS}


def unnoised_counts(value: object) -> list[str]:
    """The keys of a stored privacy record that hold a count of the training rows (files of
    older releases; :data:`UNNOISED_RECORD_KEYS`: None there meant not counted)."""
    if not isinstance(value, dict):
        return []
    return [k for k in UNNOISED_RECORD_KEYS if value.get(k) is not None]


def bin_eval_sets(
    objective: Objective,
    mapper: BinMapper,
    eval_sets: Sequence[EvalSet],
    eval_names: Sequence[str] | None,
    categories: Categories | None = None,
    order: Sequence[str] | None = None,
) -> list[EvalData]:
    """Check and bin the evaluation sets once (their margins are set by
    :class:`~p2pboost.gbdt.rounds.Margins`)."""
    checked = check_eval_sets(
        objective, mapper.n_features, eval_sets, eval_names, categories, order
    )
    return [
        EvalData(name, mapper.transform(features), y, np.empty((0, 0)))
        for name, features, y in checked
    ]


def check_eval_sets(
    objective: Objective,
    n_features: int,
    eval_sets: Sequence[EvalSet],
    eval_names: Sequence[str] | None,
    categories: Categories | None = None,
    order: Sequence[str] | None = None,
) -> list[tuple[str, Features, F64]]:
    """The evaluation sets checked once: each one's name, its features as a
    :class:`Features` (with the training columns' ``categories`` and ``order``) and its
    labels."""
    names = list(eval_names) if eval_names is not None else []
    if eval_names is None:
        names = [f"valid_{i}" for i in range(len(eval_sets))]
    if len(names) != len(eval_sets) or len(set(names)) != len(names):
        raise InputError("eval_names must name each evaluation set once")
    out = []
    for name, (Xv, yv) in zip(names, eval_sets, strict=True):
        yv_arr = objective.check_labels(yv)
        features = Features.from_user(
            Xv,
            name=f"eval set {name!r}",
            categories=categories,
            order=order,
            n_features=n_features,
            allow_no_features=n_features == 0,  # a vertical guest with labels only
        )
        if features.n_rows != yv_arr.size:
            raise InputError(f"eval set {name!r}: rows and labels differ in number")
        out.append((name, features, yv_arr))
    return out
