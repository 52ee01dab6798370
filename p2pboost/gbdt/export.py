"""A plaintext or horizontal model as an XGBoost JSON model file.

Teams deploy gradient-boosted trees with the tools they already run; XGBoost's JSON format is
read by XGBoost itself and by the converters and serving stacks built around it. A booster of
the core, and every horizontal (homo) model, which each party holds whole, can be written in
it: the trees are the same, node for node. Two things are translated:

* **splits**: ours send ``x <= threshold`` left, XGBoost's ``x < condition``, comparing
  float32 values (it reads features as float32). The condition is the next float32 above the
  threshold rounded to float32, so every value that goes left here goes left there; the two
  differ only for a value and a threshold that are distinct in float64 but equal in float32
  (none on data with fewer than 7 significant digits). Missing values follow the same learned
  direction (``default_left``).
* **the base margin** becomes ``base_score`` (a probability for ``binary:logistic``).

**Statistics only when asked.** A node's cover (XGBoost's ``sum_hessian``) and gain
(``loss_changes``) are not needed to predict, and with the split values they let a reader
reconstruct training records (TimberStrike, arXiv 2506.07605, recovers most of a client's
rows from shared trees' ``sum_hessian``). An export is what leaves the owner's hands, so
:func:`to_xgboost` writes zeros in their place (XGBoost's format requires the arrays) and says
so in ``learner.attributes[STATISTICS_ATTRIBUTE]``, unless the owner asks for them
(``with_statistics=True``, the command line's ``--with-statistics``). What needs them: TreeSHAP
on the exported model (XGBoost's ``pred_contribs``, SHAP's ``TreeExplainer``) weighs each path
by the covers, and gives wrong contributions without them; predictions are the same either
way. The owner's own model file keeps them. An ONNX export (:mod:`~p2pboost.gbdt.export_onnx`)
carries no statistics at all.

Binary logistic and squared-error models are exported (the objectives XGBoost and p2pboost
compute alike); others are refused naming the objective. A vertical model is spread over the
parties' files: merging it (:func:`p2pboost.hetero.model.merged_model`) needs every host's
consent, its model file.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.objectives import canonical_objective
from p2pboost.gbdt.tree import Tree

__all__ = ["EXPORTABLE", "STATISTICS_ATTRIBUTE", "STATISTICS_OMITTED", "to_xgboost"]

#: Objectives whose predictions XGBoost computes from the same margins as the core.
EXPORTABLE = ("binary:logistic", "reg:squarederror")
_NO_PARENT = 2147483647
#: The XGBoost release whose JSON layout this writes (read by 2.x and 3.x).
_XGBOOST_VERSION = [2, 1, 0]
#: The learner attribute that says whether the per-node statistics are in the file.
STATISTICS_ATTRIBUTE = "p2pboost_statistics"
#: Its value (and the command line's note) when they are not.
STATISTICS_OMITTED = (
    "left out: covers (sum_hessian) and gains (loss_changes) are written as zeros; predictions "
    "do not use them, TreeSHAP on this file (pred_contribs) does: export with "
    "--with-statistics (with_statistics=True) for that"
)


def to_xgboost(booster: Booster, *, with_statistics: bool = False) -> dict[str, Any]:
    """The XGBoost JSON model (a dict for ``json.dump``) of ``booster`` (see the module);
    covers and gains only ``with_statistics``."""
    objective = canonical_objective(booster.params.objective)
    if objective not in EXPORTABLE:
        raise InputError(f"XGBoost export takes {', '.join(EXPORTABLE)} models, not {objective!r}")
    n_features = booster.n_features
    margin = float(booster.base_margin[0])
    base = 1.0 / (1.0 + np.exp(-margin)) if objective == "binary:logistic" else margin
    used = booster.n_rounds if booster.best_iteration is None else booster.best_iteration + 1
    trees = [_tree(t, i, n_features, with_statistics) for i, t in enumerate(booster.trees[:used])]
    names = list(booster.feature_names) if booster.feature_names is not None else []
    return {
        "learner": {
            "attributes": {
                STATISTICS_ATTRIBUTE: "included" if with_statistics else STATISTICS_OMITTED
            },
            "feature_names": names,
            "feature_types": ["float"] * len(names),
            "gradient_booster": {
                "model": {
                    "gbtree_model_param": {
                        "num_parallel_tree": "1",
                        "num_trees": str(len(trees)),
                    },
                    "iteration_indptr": list(range(len(trees) + 1)),
                    "tree_info": [0] * len(trees),
                    "trees": trees,
                },
                "name": "gbtree",
            },
            "learner_model_param": {
                "base_score": f"{base:.9E}",
                "boost_from_average": "1",
                "num_class": "0",
                "num_feature": str(n_features),
                "num_target": "1",
            },
            "objective": {"name": objective, "reg_loss_param": {"scale_pos_weight": "1"}},
        },
        "version": _XGBOOST_VERSION,
    }


def _tree(tree: Tree, index: int, n_features: int, with_statistics: bool) -> dict[str, Any]:
    n = tree.n_nodes
    gain = tree.gain if with_statistics else np.zeros(n)
    cover = tree.cover if with_statistics else np.zeros(n)
    leaf = tree.is_leaf
    value = tree.value[:, 0].astype(np.float32)
    above = np.nextafter(tree.threshold.astype(np.float32), np.float32(np.inf))
    conditions = np.where(leaf, value, above).astype(np.float32)
    parents = np.full(n, _NO_PARENT, dtype=np.int64)
    for node in np.flatnonzero(~leaf).tolist():
        parents[tree.left[node]] = parents[tree.right[node]] = node
    return {
        "base_weights": np.where(leaf, value, 0.0).astype(np.float32).tolist(),
        "categories": [],
        "categories_nodes": [],
        "categories_segments": [],
        "categories_sizes": [],
        "default_left": tree.default_left.astype(np.int64).tolist(),
        "id": index,
        "left_children": np.where(leaf, -1, tree.left).tolist(),
        "loss_changes": np.where(leaf, 0.0, gain).astype(np.float32).tolist(),
        "parents": parents.tolist(),
        "right_children": np.where(leaf, -1, tree.right).tolist(),
        "split_conditions": conditions.tolist(),
        "split_indices": np.where(leaf, 0, tree.feature).tolist(),
        "split_type": [0] * n,
        "sum_hessian": cover.astype(np.float32).tolist(),
        "tree_param": {
            "num_deleted": "0",
            "num_feature": str(n_features),
            "num_nodes": str(n),
            "size_leaf_vector": "1",
        },
    }
