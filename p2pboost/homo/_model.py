"""A client's copy of the model as it grows, and the vectors its rows give for each tree.

Every client holds the federation's model (the server sends the bin edges, the base margin and
every finished tree); :class:`LocalModel` keeps it with what the client derives from it: its
binned rows, their margins (and the validation rows'), the current round's gradients, and per
tree the gradient columns (from the tree's ``grid`` request) and each row's node (from its
``root`` request). It answers the tree requests with plain int64 vectors (layouts in
:mod:`p2pboost.homo._vectors`), and counts the tree's residuals by leaf for L1's median search
(:mod:`p2pboost.homo._quantile`); masking the vectors is the client's job
(:mod:`p2pboost.homo.client`).

A differentially private model (``params.dp``) changes what a client sums, as the core's
round loop changes it: every tree uses only its rows (the client keys its own rows per
ensemble, :class:`~p2pboost.gbdt.privacy.KeyedRows`; after a restart mid-ensemble it offers
none until the next ensemble), gradients past the bound are filtered (the rows carried on to
the ensemble's next tree) or clipped, and clipped again on the grid, and hessians are 1 per
row.

A request that does not fit this state or these rows raises ``ValueError``; the client turns
it into a :class:`~p2pboost.exceptions.RemoteProtocolError` naming the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import ModelError
from p2pboost.gbdt.binning import BinMapper, BinnedData
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.fixedpoint import Grid, quantize
from p2pboost.gbdt.grower import partition_rows
from p2pboost.gbdt.histogram import HistogramBuilder, make_builder
from p2pboost.gbdt.history import History
from p2pboost.gbdt.noise import NoiseSource
from p2pboost.gbdt.objectives import Objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.privacy import KeyedRows, clip_on_grid, tree_plan
from p2pboost.gbdt.rounds import add_tree
from p2pboost.gbdt.tree import Tree
from p2pboost.homo._messages import CollectChildren, CollectRoot
from p2pboost.homo._quantile import GroupedKeys, RankQuery
from p2pboost.homo._sampling import client_rows
from p2pboost.homo._vectors import HistLayout, announced_grid, eval_vector, grid_vector

__all__ = ["LocalModel"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass
class _Validation:
    """The client's validation rows, binned, and their margins."""

    y: F64
    data: BinnedData
    margin: F64


@dataclass(frozen=True, slots=True)
class _Tree:
    """A tree being grown, from its ``grid`` request on: its gradient columns (and, in a
    private model, its rows: ``sample``; None: every row)."""

    g: F64
    h: F64
    sample: I64 | None = None


@dataclass
class _TreeRows:
    """A tree's rows, from its ``root`` request on: grids, quantized gradients, each row's
    node."""

    grid_g: Grid
    grid_h: Grid
    gq: F64
    hq: F64
    positions: I64


@dataclass
class LocalModel:
    """The federation's model at one client, from the ``model`` message on (see
    :meth:`start`)."""

    params: BoostParams
    objective: Objective
    trees_per_round: int
    mapper: BinMapper
    base: F64
    y: F64
    data: BinnedData
    builder: HistogramBuilder
    margin: F64
    validation: _Validation | None
    trees: list[Tree] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    #: Gradients of one boosting round: (round, grad, hess), shared by the round's trees.
    gradients: tuple[int, F64, F64] | None = None
    tree: _Tree | None = None
    rows: _TreeRows | None = None
    #: Sample weights (one per row; None: every row once): they scale gradients and hessians.
    weight: F64 | None = None
    #: A private model's rows: keys, carried rows, filtered counts (None otherwise).
    private: KeyedRows | None = None
    #: This client's name (its row sample and a private model's row keys depend on it).
    me: str = ""
    #: The tree's node count and its rows' residual keys by leaf (L1's median search).
    residuals: tuple[int, GroupedKeys] | None = None

    @classmethod
    def start(
        cls,
        params: BoostParams,
        objective: Objective,
        trees_per_round: int,
        mapper: BinMapper,
        base: F64,
        X: F64,
        y: F64,
        eval_set: tuple[F64, F64] | None,
        weight: F64 | None = None,
        me: str = "",
    ) -> LocalModel:
        """Bin the rows (and validation rows) with the federation's edges; margins at
        ``base``; ``weight`` scales each row's gradient and hessian, as in the core. ``me``
        names this client's row-key stream in a private model."""
        data = mapper.transform(X)
        validation = None
        if eval_set is not None:
            Xv, yv = eval_set
            validation = _Validation(yv, mapper.transform(Xv), np.tile(base, (Xv.shape[0], 1)))
        return cls(
            params=params,
            objective=objective,
            trees_per_round=trees_per_round,
            mapper=mapper,
            base=base,
            y=y,
            data=data,
            builder=make_builder(data, params.sparse_aware, with_counts=True),
            margin=np.tile(base, (X.shape[0], 1)),
            validation=validation,
            weight=None if weight is None else weight[:, None],
            private=None if params.dp is None else _keyed_rows(params.dp.noise_seed, me),
            me=me,
        )

    def add_tree(self, tree: Tree, out: int) -> None:
        """A finished tree: keep it and add it to every margin."""
        self.trees.append(tree)
        self.outputs.append(out)
        add_tree(self.margin, tree.predict_binned(self.data), out)
        if self.validation is not None:
            v = self.validation
            add_tree(v.margin, tree.predict_binned(v.data), out)

    def booster(
        self,
        best_iteration: int | None,
        history: History | None = None,
        rng_state: dict[str, Any] | None = None,
        privacy: dict[str, Any] | None = None,
    ) -> Booster:
        return Booster(
            self.params,
            self.mapper,
            self.base,
            self.trees,
            self.outputs,
            self.trees_per_round,
            best_iteration,
            history,
            rng_state,
            privacy=privacy,
            filtered_rows=None if self.private is None else sum(self.private.filtered.values()),
        )

    # -- the vectors --------------------------------------------------------------------------

    def grid(self, it: int, out: int, sample_seed: int = 0) -> I64:
        """A tree begins (round ``it``, output ``out``): its gradient grid vector, over the
        rows this client samples with ``sample_seed``, GOSS's multipliers applied
        (:mod:`p2pboost.homo._sampling`: as the core, on every output's gradients, then the
        tree's output is taken)."""
        g_all, h_all, sample = client_rows(self.params, sample_seed, self.me, *self._round(it))
        g, h = _output(g_all, h_all, out)
        if self.private is not None and self.params.dp is not None:
            plan = tree_plan(self.params, len(self.trees))  # DP: one tree per round
            picked = self.private.rows(plan, g, self.params.dp.gdf)
            sample, g = picked.sample, picked.grad
            h = np.ones_like(g)
        self.tree, self.rows, self.residuals = _Tree(g, h, sample), None, None
        if sample is None:
            return grid_vector(g, h)
        return grid_vector(g[sample], h[sample])

    def root(self, msg: CollectRoot) -> I64:
        """The root's histogram on the grids the server announced."""
        tree = self.tree
        if tree is None:
            raise ValueError("the root's histogram before the gradient grid")
        # The grid must be the core's for that magnitude, and our values must fit it.
        used = slice(None) if tree.sample is None else tree.sample
        grid_g = announced_grid(msg.g_bits, msg.g_mag, msg.n_rows, tree.g[used])
        grid_h = announced_grid(msg.h_bits, msg.h_mag, msg.n_rows, tree.h[used])
        gq, hq = quantize(tree.g, grid_g), quantize(tree.h, grid_h)
        if self.private is not None:  # as the core: rounding must not pass the bound
            gq = clip_on_grid(gq, grid_g, tree_plan(self.params, len(self.trees)).grad_bound)
        positions = np.zeros(self.data.n_rows, dtype=np.int64)
        self.rows = _TreeRows(grid_g, grid_h, gq, hq, positions)
        hist = self.builder.build(tree.sample, None, 1, gq, hq)
        return self._layout(tree).write(hist, grid_g, grid_h)

    def children(self, msg: CollectChildren) -> I64:
        """Move the rows by the layer's splits; the histograms of the nodes to build."""
        tree, rows = self.tree, self.rows
        if tree is None or rows is None:
            raise ValueError("child histograms before the root")
        n_nodes, depth = msg.n_nodes, self.params.max_depth
        if not 1 <= n_nodes < 2 ** (depth + 1):
            raise ValueError(f"a tree of depth {depth} has no {n_nodes} nodes")
        f = msg.feature
        if f.size and (f.min() < 0 or f.max() >= self.data.n_features):
            raise ValueError("feature out of range")
        rows.positions = partition_rows(
            self.data,
            rows.positions,
            msg.nodes,
            f,
            msg.threshold_bin,
            msg.default_left,
            msg.left,
            msg.right,
            n_nodes,
        )
        build = msg.build
        slot_of = np.full(n_nodes, -1, dtype=np.int64)
        slot_of[build] = np.arange(build.size)
        sample = tree.sample
        slots = slot_of[rows.positions if sample is None else rows.positions[sample]]
        chosen = np.flatnonzero(slots >= 0)
        picked = chosen if sample is None else sample[chosen]  # only the tree's rows
        hist = self.builder.build(picked, slots[chosen], build.size, rows.gq, rows.hq)
        return self._layout(tree).write(hist, rows.grid_g, rows.grid_h)

    def received_tree(self, wire: dict[str, Any], out: int) -> Tree:
        """A tree from the server, for output ``out``, checked against this model
        (``ValueError`` if it does not fit)."""
        try:
            tree = Tree.from_dict(wire)
        except (KeyError, TypeError, ValueError, ModelError) as exc:
            raise ValueError(f"bad tree: {exc}") from None
        k = self.objective.n_outputs
        if not -1 <= out < k or tree.n_outputs != (k if out < 0 else 1):
            raise ValueError("tree output does not fit the objective")
        if np.any(tree.feature >= self.data.n_features):
            raise ValueError("tree splits on an unknown feature")
        return tree

    def residual_counts(self, query: RankQuery, tree: dict[str, Any] | None) -> I64:
        """Counts for a step of L1's median search over the residuals (label minus margin
        before the tree) of the tree's rows (its sample), grouped by the leaves of ``tree``
        (sent with the first step), whose medians the core sets the leaves to."""
        if self.tree is None or self.margin.shape[1] != 1:
            raise ValueError("residuals before the tree's gradients, or of several outputs")
        if query.depth == 0 and tree is not None:
            shape = self.received_tree(tree, 0)
            used = slice(None) if self.tree.sample is None else self.tree.sample
            residual = self.y[used] - self.margin[used, 0]
            keys = GroupedKeys(residual, shape.leaves_binned(self.data)[used])
            self.residuals = (shape.n_nodes, keys)
        if self.residuals is None:
            raise ValueError("a residual search step before the first")
        n_nodes, keys = self.residuals
        if query.group.size and query.group.max() >= n_nodes:
            raise ValueError(f"the tree has {n_nodes} nodes")
        return keys.counts(query)

    def evaluation(self, metric: str) -> I64:
        """Summed validation losses of the model so far."""
        v = self.validation
        if v is None:
            return eval_vector(metric, None)
        pred = self.objective.transform(v.margin)
        return eval_vector(metric, (v.y, pred[:, 0] if pred.shape[1] == 1 else pred))

    def _round(self, it: int) -> tuple[F64, F64]:
        """The gradients and hessians of round ``it`` (every output), computed once per round
        at the margins before its first tree."""
        cached = self.gradients
        if cached is None or cached[0] != it:
            if it < len(self.trees) // max(1, self.trees_per_round):
                raise ValueError(f"boosting round {it} is over")
            g, h = self.objective.grad_hess(self.y, self.margin)
            if self.weight is not None:
                g, h = g * self.weight, h * self.weight
            cached = self.gradients = (it, g, h)
        return cached[1], cached[2]

    def _layout(self, tree: _Tree) -> HistLayout:
        return HistLayout(self.data.n_features, self.mapper.n_slots, tree.g.shape[1])


def _keyed_rows(seed: int | None, me: str) -> KeyedRows:
    """A client's rows of a private model: keyed from its own stream (``os.urandom``, or the
    test seed with the client's name), ensemble by ensemble (:class:`KeyedRows`: a client
    that restarted mid-ensemble sits the rest of it out)."""
    return KeyedRows(NoiseSource(seed, f"rows:{me}").uniform)


def _output(g: F64, h: F64, out: int) -> tuple[F64, F64]:
    """The gradient columns of a tree for output ``out`` (-1: all)."""
    if not -1 <= out < g.shape[1]:
        raise ValueError("output out of range")
    if out < 0:
        return g, h
    return g[:, out : out + 1], h[:, out : out + 1]
