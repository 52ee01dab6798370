"""A plaintext or horizontal model as an ONNX graph (an ``ai.onnx.ml`` ``TreeEnsemble``).

ONNX is what serving stacks outside Python load (ONNX Runtime in C++, C#, Java, JavaScript; the
model registries of the clouds). A booster of the core, and every horizontal model, can be
written as one graph:

* input ``X``: ``double``, shape ``(rows, features)`` in the model's feature order (its names
  are in the graph's documentation); NaN is a missing value;
* one ``TreeEnsemble`` node (``ai.onnx.ml`` opset 5) sums the trees' leaves, one target per
  output, in double precision (its output has the input's type, and thresholds and leaf
  weights are double tensors: nothing is rounded to float32); an ``Add`` adds the base margin.
  Splits are ``BRANCH_LEQ``: ``x <= threshold`` goes to the true (left) branch, as in the
  core; missing values follow each split's learned direction
  (``nodes_missing_value_tracks_true``);
* the objective's link: ``Sigmoid`` (binary logistic), ``Softmax`` (multi-class), ``Exp``
  (Tweedie) or none (regression), giving output ``prediction`` ``(rows, outputs)``, what
  :meth:`~p2pboost.gbdt.booster.Booster.predict` returns (a column for one output).

Only the rounds prediction uses are written (up to ``best_iteration``). Models with
categorical columns are refused (their input would be category codes); a vertical model is
exported once merged with every host's consent (:func:`p2pboost.hetero.model.merged_model`).
No per-node statistics (covers, gains) are written: the graph has no place for them, so an
ONNX export never shares them (:mod:`p2pboost.gbdt.export` on why that matters).
Needs the ``onnx`` package
(``pip install 'p2pboost[onnx]'``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from p2pboost.exceptions import InputError
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.objectives import canonical_objective

__all__ = ["ONNX_LINKS", "to_onnx"]

#: The ONNX operator applied to the margins for each objective (absent: the identity).
ONNX_LINKS = {"binary:logistic": "Sigmoid", "multi:softmax": "Softmax", "reg:tweedie": "Exp"}
#: Opsets written: the default domain's, and ``ai.onnx.ml`` 5 (``TreeEnsemble``).
_OPSET, _ML_OPSET = 21, 5


def to_onnx(booster: Booster) -> bytes:
    """The serialized ONNX model of ``booster`` (see the module docstring)."""
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError:
        raise InputError(
            "ONNX export needs the onnx package: pip install 'p2pboost[onnx]'"
        ) from None
    if booster.categories:
        raise InputError(
            "ONNX export takes models without categorical columns (their input would be "
            f"category codes): {', '.join(booster.categories)}"
        )
    objective = canonical_objective(booster.params.objective)
    k = booster.n_outputs
    attrs = _ensemble(booster)
    ensemble = helper.make_node(
        "TreeEnsemble",
        ["X"],
        ["trees"],
        domain="ai.onnx.ml",
        n_targets=k,
        post_transform=0,  # none
        aggregate_function=1,  # sum
        **attrs,
    )
    base = helper.make_tensor("base_margin", TensorProto.DOUBLE, [1, k], booster.base_margin)
    link = ONNX_LINKS.get(objective)
    margin = "margin" if link is not None else "prediction"
    nodes = [ensemble, helper.make_node("Add", ["trees", "base_margin"], [margin])]
    if link == "Softmax":
        nodes.append(helper.make_node("Softmax", ["margin"], ["prediction"], axis=1))
    elif link is not None:
        nodes.append(helper.make_node(link, ["margin"], ["prediction"]))
    names = booster.feature_names or [f"f{i}" for i in range(booster.n_features)]
    graph = helper.make_graph(
        nodes,
        "p2pboost",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, booster.n_features])],
        [helper.make_tensor_value_info("prediction", TensorProto.DOUBLE, [None, k])],
        [base],
        doc_string="features, in order: " + ", ".join(names),
    )
    model = helper.make_model(
        graph,
        producer_name="p2pboost",
        opset_imports=[
            helper.make_opsetid("", _OPSET),
            helper.make_opsetid("ai.onnx.ml", _ML_OPSET),
        ],
    )
    model.doc_string = f"p2pboost model, objective {objective}"
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _ensemble(booster: Booster) -> dict[str, Any]:
    """The ``TreeEnsemble`` attributes of the trees prediction uses.

    A tree with vector leaves (one tree for every output) is written once per output, each
    copy's leaves targeting that output (a leaf of the operator has one target). A tree that
    is a single leaf gets one split whose two branches are that leaf (the operator's roots are
    splits)."""
    from onnx import TensorProto, helper

    used = booster.n_rounds if booster.best_iteration is None else booster.best_iteration + 1
    pairs = list(zip(booster.trees, booster.tree_output, strict=True))
    roots: list[int] = []
    features: list[int] = []
    splits: list[float] = []
    true_ids: list[int] = []
    true_leaf: list[int] = []
    false_ids: list[int] = []
    false_leaf: list[int] = []
    missing: list[int] = []
    leaf_targets: list[int] = []
    leaf_weights: list[float] = []
    for tree, out in pairs[: used * booster.trees_per_round]:
        for target in range(booster.n_outputs) if out < 0 else [out]:
            column = target if out < 0 else 0
            leaf = tree.is_leaf
            inner = np.flatnonzero(~leaf)
            leaves = np.flatnonzero(leaf)
            # Node ids -> positions in the operator's split and leaf lists.
            at = np.zeros(tree.n_nodes, dtype=np.int64)
            at[inner] = len(features) + np.arange(inner.size)
            at[leaves] = len(leaf_targets) + np.arange(leaves.size)
            leaf_targets += [target] * leaves.size
            leaf_weights += tree.value[leaves, column].astype(float).tolist()
            if inner.size == 0:  # a single leaf: one split, both ways to it
                roots.append(len(features))
                features.append(0)
                splits.append(0.0)
                for ids, flags in ((true_ids, true_leaf), (false_ids, false_leaf)):
                    ids.append(int(at[0]))
                    flags.append(1)
                missing.append(0)
                continue
            roots.append(int(at[0]))
            for node in inner.tolist():
                left, right = int(tree.left[node]), int(tree.right[node])
                features.append(int(tree.feature[node]))
                splits.append(float(tree.threshold[node]))
                true_ids.append(int(at[left]))
                true_leaf.append(int(leaf[left]))
                false_ids.append(int(at[right]))
                false_leaf.append(int(leaf[right]))
                missing.append(int(tree.default_left[node]))

    def tensor(name: str, kind: int, data: list[Any]) -> Any:
        return helper.make_tensor(name, kind, [len(data)], data)

    return {
        "tree_roots": roots,
        "nodes_featureids": features,
        "nodes_splits": tensor("nodes_splits", TensorProto.DOUBLE, splits),
        "nodes_modes": tensor("nodes_modes", TensorProto.UINT8, [0] * len(features)),  # LEQ
        "nodes_truenodeids": true_ids,
        "nodes_trueleafs": true_leaf,
        "nodes_falsenodeids": false_ids,
        "nodes_falseleafs": false_leaf,
        "nodes_missing_value_tracks_true": missing,
        "leaf_targetids": leaf_targets,
        "leaf_weights": tensor("leaf_weights", TensorProto.DOUBLE, leaf_weights),
    }
