"""The boosting round loop every booster shares (the round-loop hook of :func:`train`).

A round draws a row sample and a column sample, grows one tree per output (or one tree with
vector leaves) on gradients put on a :mod:`~p2pboost.gbdt.fixedpoint` grid, refits the leaves
where the objective asks for it, adds the trees to the training and evaluation margins,
evaluates, and lets the callbacks stop training early. The plaintext core
(:func:`~p2pboost.gbdt.booster.train`), the vertical guest and the horizontal server all run
this loop; they differ only in how one tree is grown (on local rows, with the hosts, from
securely aggregated histograms). So the loop is two objects with steps, driven by a ``for``
loop in each booster, synchronous or not:

* :class:`RoundLoop` - what every booster has: the random draws (one generator seeded once per
  run, so the same seed gives the same samples in every booster), the trees and their outputs,
  the evaluation history, callbacks and early stopping;
* :class:`Margins` - what a party holding labels has: the margins of the training rows and of
  the evaluation sets, the gradients, leaf refits and the evaluation (the horizontal server
  has no labels: it evaluates by aggregation instead).

::

    loop = RoundLoop(params, n_features, objective.n_outputs, callbacks)
    margins = Margins(objective, y, base, evals, metrics)
    for it in loop:
        for task in loop.tasks(margins):
            tree, positions, eval_leaves = grow(task)          # the only booster-specific step
            loop.add_tree(margins.update(task, tree, positions, eval_leaves), task.out)
        loop.end_round(margins.evaluation())
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.binning import BinnedData
from p2pboost.gbdt.callbacks import Callback, CallbackEnv, EarlyStop, RecordEvaluation
from p2pboost.gbdt.fixedpoint import Grid, choose_grid, quantize
from p2pboost.gbdt.history import History
from p2pboost.gbdt.metrics import Metric
from p2pboost.gbdt.objectives import Objective
from p2pboost.gbdt.params import BoostParams, MultiStrategy
from p2pboost.gbdt.privacy import PrivateRounds, PrivateTree, RowKeys, clip_on_grid
from p2pboost.gbdt.sampling import column_sample, row_sample
from p2pboost.gbdt.sampling import goss_sample as draw_goss
from p2pboost.gbdt.tree import Tree

__all__ = [
    "EvalData",
    "GossSample",
    "Margins",
    "RoundLoop",
    "RoundStart",
    "RowSample",
    "TreeTask",
    "add_tree",
    "on_grid",
    "refit_leaves",
    "trees_per_round",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
#: ``row_sample(round, n_rows)``: the sorted rows ``subsample`` keeps this round (None: all).
RowSample = Callable[[int, int], I64 | None]
#: ``goss_sample(round, grad)``: GOSS's sorted rows this round and every row's gradient
#: multiplier ``(n,)``, from the round's gradients ``grad`` ``(n, K)``.
GossSample = Callable[[int, F64], tuple[I64, F64]]


@dataclass
class EvalData:
    """An evaluation set, binned once; ``margin`` is updated tree by tree."""

    name: str
    data: BinnedData
    y: F64
    margin: F64


@dataclass(frozen=True, slots=True, eq=False)
class TreeTask:
    """One tree of a round: output ``out`` (-1: all outputs) on on-grid gradients.

    ``grad``/``hess`` ``(n, 1 or K)`` are on the grids ``grids`` (chosen from the ``sample``
    rows, every row otherwise); ``features`` masks the columns this tree may split on (over
    all parties' features, in the global order). ``privacy``: the mechanisms of a
    differentially private tree (its grower uses them), else None.
    """

    iteration: int
    out: int
    grad: F64
    hess: F64
    grids: tuple[Grid, Grid]
    sample: I64 | None
    features: B8
    privacy: PrivateTree | None = None


def trees_per_round(params: BoostParams, n_outputs: int) -> int:
    """Trees a round grows: one per output, or one with vector leaves (``multi_output_tree``)."""
    vector = MultiStrategy(params.multi_strategy) is MultiStrategy.MULTI_OUTPUT_TREE
    return 1 if vector else n_outputs


def add_tree(margin: F64, values: F64, out: int) -> None:
    """Add one tree's outputs ``values`` ``(n, 1 or K)`` to output ``out`` (-1: all)."""
    if out < 0:
        margin += values
    else:
        margin[:, out] += values[:, 0]


def on_grid(g: F64, h: F64, sample: I64 | None) -> tuple[F64, F64, Grid, Grid]:
    """Quantize g and h on grids chosen from the rows this tree uses (see fixedpoint)."""
    n = g.shape[0] if sample is None else max(sample.size, 1)  # a private tree may get none
    g_used = g if sample is None else g[sample]
    h_used = h if sample is None else h[sample]
    g_grid, h_grid = choose_grid(g_used, n), choose_grid(h_used, n)
    return quantize(g, g_grid), quantize(h, h_grid), g_grid, h_grid


def refit_leaves(
    objective: Objective,
    tree: Tree,
    y: F64,
    margin: F64,
    positions: I64,
    sample: I64 | None,
    learning_rate: float,
) -> Tree:
    """Replace the leaf values if the objective refits them (L1: median residual per leaf)."""
    rows = slice(None) if sample is None else sample
    values = objective.refit_leaves(y[rows], margin[rows], positions[rows], tree.n_nodes)
    if values is None:
        return tree
    new = np.where(tree.is_leaf, learning_rate * values, tree.value[:, 0])
    return replace(tree, value=new[:, None])


@dataclass(frozen=True)
class RoundStart:
    """Where a warm start continues: the trees so far (with their outputs), their history and
    the state of the random generator after them (``None``: a fresh one from the seed, so row
    and column draws differ from an uninterrupted run). ``extend``: ``n_estimators`` more
    rounds follow (a warm start); False: the run ends at ``n_estimators`` rounds in all (a
    resumed run), counted after the ``base_rounds`` of the model the run continued, if any."""

    trees: Sequence[Tree]
    tree_output: Sequence[int]
    history: History
    rng_state: dict[str, Any] | None
    extend: bool = True
    base_rounds: int = 0


class RoundLoop:
    """Rounds, random draws, trees, history and early stopping (see the module docstring).

    ``n_features`` counts every feature a tree may split on (all parties' in a vertical
    federation); ``n_outputs`` the objective's outputs. Iterating yields the round numbers
    until ``n_estimators`` or an early stop. ``start`` continues a model (warm start): its
    rounds keep their numbers and ``n_estimators`` more follow. ``features_by_round(round)``
    (a mask over the features, or None) restricts what a round's trees may split on, on top
    of the column sample (vertical training's ``complete_secure``: guest features only).
    With ``params.dp`` the rows of each tree, its gradients and its mechanisms come from a
    :class:`~p2pboost.gbdt.privacy.PrivateRounds` (``privacy``; ``row_keys`` replaces its
    draw of the rows' ensemble keys). ``row_sample(round, n_rows)`` replaces the draw of
    ``subsample``'s rows (a horizontal federation's clients draw their own; the core is given
    the same draws to compare), leaving the generator to the column draws; ``goss_sample(round,
    grad)`` likewise replaces GOSS's draw (rows and gradient multipliers: each client of a
    horizontal federation applies GOSS's rule to its own rows).
    """

    def __init__(
        self,
        params: BoostParams,
        n_features: int,
        n_outputs: int,
        callbacks: Sequence[Callback] = (),
        *,
        start: RoundStart | None = None,
        features_by_round: Callable[[int], B8 | None] | None = None,
        row_keys: RowKeys | None = None,
        row_sample: RowSample | None = None,
        goss_sample: GossSample | None = None,
    ) -> None:
        self.params = params
        self.row_sample = row_sample
        self.goss_sample = goss_sample
        self.privacy = None if params.dp is None else PrivateRounds(params, row_keys)
        self.n_features = n_features
        self.features_by_round = features_by_round
        self.trees_per_round = trees_per_round(params, n_outputs)
        self.outputs = [-1] if self.trees_per_round == 1 else list(range(n_outputs))
        self.rng = np.random.default_rng(params.seed)
        self.callbacks = list(callbacks)
        self.trees: list[Tree] = []
        self.tree_output: list[int] = []
        self.history: History = {}
        self.best_iteration: int | None = None
        self._first = 0
        if start is not None:
            self.trees, self.tree_output = list(start.trees), list(start.tree_output)
            self.history.update(
                {s: {m: list(v) for m, v in per.items()} for s, per in start.history.items()}
            )
            if start.rng_state is not None:
                self.rng.bit_generator.state = start.rng_state
            self._first = len(self.trees) // self.trees_per_round
        self._last = self._first + params.n_estimators
        if start is not None and not start.extend:
            self._last = start.base_rounds + params.n_estimators
        self._record = RecordEvaluation(self.history)
        self._iteration = self._first - 1
        self._stopped = False

    @property
    def rng_state(self) -> dict[str, Any]:
        """The random generator's state now (a model keeps it, for a warm start)."""
        return dict(self.rng.bit_generator.state)

    def __iter__(self) -> Iterator[int]:
        for it in range(self._first, self._last):
            if self._stopped:
                return
            self._iteration = it
            yield it

    @property
    def iteration(self) -> int:
        """The current round (0-based; -1 before the first)."""
        return self._iteration

    def replay_callbacks(self) -> None:
        """Show the callbacks the recorded rounds again, in order, so that a resumed run's
        callbacks (early stopping's best round and patience) are where they were when the run
        stopped."""
        for it in range(self._first):
            evaluation = {
                name: {metric: values[it] for metric, values in per.items()}
                for name, per in self.history.items()
            }
            if not evaluation or self._stopped:
                return
            self._call_back(it, evaluation)

    def sample_rows(self, grad: F64, hess: F64) -> tuple[F64, F64, I64 | None]:
        """This round's row sample (GOSS or ``subsample``), with GOSS's gradient weights."""
        p = self.params
        if p.goss:
            sample, scale = self._goss(grad)
            return grad * scale[:, None], hess * scale[:, None], sample
        if self.row_sample is not None and p.subsample < 1.0:
            drawn = self.row_sample(self._iteration, grad.shape[0])
            return grad, hess, None if drawn is None else np.asarray(drawn, dtype=np.int64)
        return grad, hess, row_sample(self.rng, grad.shape[0], p.subsample)

    def _goss(self, grad: F64) -> tuple[I64, F64]:
        """GOSS's rows and gradient multipliers this round: the hook's, else the core's draw."""
        p = self.params
        if self.goss_sample is None:
            return draw_goss(self.rng, grad, p.top_rate, p.other_rate)
        rows, weights = self.goss_sample(self._iteration, grad)
        scale = np.asarray(weights, dtype=np.float64)
        if scale.shape != (grad.shape[0],):
            raise InputError(f"goss_sample must give one multiplier per row ({grad.shape[0]})")
        return np.asarray(rows, dtype=np.int64), scale

    def sample_columns(self) -> B8:
        """This round's column sample (one draw per round, shared by its trees)."""
        return column_sample(self.rng, self.n_features, self.params.colsample_bytree)

    def tasks(self, margins: Margins) -> Iterator[TreeTask]:
        """This round's trees: gradients, row and column samples, one task per output."""
        grad, hess = margins.gradients()
        private = self.privacy
        sample: I64 | None
        if private is not None:  # one tree per round (DP objectives have one output)
            grad, hess, sample, plan = private.rows(len(self.trees), grad)
        else:
            grad, hess, sample = self.sample_rows(grad, hess)
        features = self.sample_columns()
        allowed = (
            None if self.features_by_round is None else self.features_by_round(self._iteration)
        )
        if allowed is not None:  # after the draw: the generator moves as without a restriction
            features = features & allowed
        for out in self.outputs:
            g = grad if out < 0 else grad[:, out : out + 1]
            h = hess if out < 0 else hess[:, out : out + 1]
            gq, hq, g_grid, h_grid = on_grid(g, h, sample)
            if private is None:
                yield TreeTask(self._iteration, out, gq, hq, (g_grid, h_grid), sample, features)
                continue
            gq = clip_on_grid(gq, g_grid, plan.grad_bound)
            tree = private.tree(plan)
            yield TreeTask(self._iteration, out, gq, hq, (g_grid, h_grid), sample, features, tree)
            private.released(tree)  # the consumer has grown and kept it

    def add_tree(self, tree: Tree, out: int) -> None:
        """Keep a grown tree (for output ``out``)."""
        self.trees.append(tree)
        self.tree_output.append(out)

    def end_round(self, evaluation: dict[str, dict[str, float]] | None) -> None:
        """Record the round's evaluation and run the callbacks (which may stop training).

        ``None``: nothing was evaluated this round (record nothing, call no callback).
        """
        if evaluation is None:
            return
        self._call_back(self._iteration, evaluation, record=True)

    def _call_back(
        self, iteration: int, evaluation: dict[str, dict[str, float]], *, record: bool = False
    ) -> None:
        env = CallbackEnv(
            iteration=iteration, n_estimators=self.params.n_estimators, evaluation=evaluation
        )
        if record:
            self._record(env)
        try:
            for cb in self.callbacks:
                cb(env)
        except EarlyStop as stop:
            self.best_iteration = stop.best_iteration
            self._stopped = True


def check_weights(weight: Any, n_rows: int) -> F64 | None:
    """Sample weights as a float64 array of ``n_rows`` finite values >= 0, not all 0 (None:
    every row counts once)."""
    if weight is None:
        return None
    try:
        w = np.asarray(weight, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"sample_weight must be numeric: {exc}") from None
    if w.shape != (n_rows,):
        raise InputError(f"sample_weight needs one value per row ({n_rows}), got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise InputError("sample_weight values must be finite and >= 0")
    if not np.any(w > 0):
        raise InputError("sample_weight is zero for every row: nothing to learn from")
    return w


class Margins:
    """Training and evaluation margins of a party that holds the labels.

    ``base`` ``(K,)`` starts every margin; ``evals`` are the binned evaluation sets (their
    margins are set here). ``weight`` (one per training row, see :func:`check_weights`)
    multiplies each row's gradient and hessian, as XGBoost's ``sample_weight`` does.
    """

    def __init__(
        self,
        objective: Objective,
        y: F64,
        base: F64,
        evals: Sequence[EvalData],
        metrics: Sequence[Metric],
        learning_rate: float,
        weight: F64 | None = None,
    ) -> None:
        self.objective = objective
        self.y = y
        self.weight = None if weight is None else weight[:, None]
        self.margin = np.tile(base, (y.size, 1))
        self.evals = list(evals)
        for ev in self.evals:
            ev.margin = np.tile(base, (ev.y.size, 1))
        self.metrics = list(metrics)
        self.learning_rate = learning_rate

    def restore(self, margin: F64, eval_margins: Sequence[F64]) -> None:
        """Continue from margins saved earlier (a resumed run), after checking their shapes."""
        if margin.shape != self.margin.shape or len(eval_margins) != len(self.evals):
            raise InputError("saved margins do not fit the training or evaluation rows")
        if any(m.shape != ev.margin.shape for m, ev in zip(eval_margins, self.evals, strict=True)):
            raise InputError("saved margins do not fit the training or evaluation rows")
        self.margin = np.array(margin, dtype=np.float64)
        for ev, m in zip(self.evals, eval_margins, strict=True):
            ev.margin = np.array(m, dtype=np.float64)

    def gradients(self) -> tuple[F64, F64]:
        """The objective's gradients and hessians at the current margins (weighted)."""
        grad, hess = self.objective.grad_hess(self.y, self.margin)
        if self.weight is not None:
            grad, hess = grad * self.weight, hess * self.weight
        return grad, hess

    def update(
        self, task: TreeTask, tree: Tree, positions: I64, eval_leaves: Sequence[I64]
    ) -> Tree:
        """Refit ``tree``'s leaves where the objective asks, then add it to every margin.

        ``positions``: every training row's leaf; ``eval_leaves[i]``: every row's leaf in
        evaluation set ``i``. Returns the tree as refit.
        """
        if self.margin.shape[1] == 1:
            tree = refit_leaves(
                self.objective,
                tree,
                self.y,
                self.margin,
                positions,
                task.sample,
                self.learning_rate,
            )
        add_tree(self.margin, tree.value[positions], task.out)
        for ev, leaves in zip(self.evals, eval_leaves, strict=True):
            add_tree(ev.margin, tree.value[leaves], task.out)
        return tree

    def evaluation(self) -> dict[str, dict[str, float]]:
        """Every metric on every evaluation set at the current margins."""
        return {
            ev.name: {m.name: m(ev.y, self.objective.prediction(ev.margin)) for m in self.metrics}
            for ev in self.evals
        }
