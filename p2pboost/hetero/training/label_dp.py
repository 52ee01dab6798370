"""Label differential privacy towards the hosts by noisy gradients (``label_dp_epsilon``).

What is protected: the guest's *training labels*, against everything the hosts observe
(neighbouring training sets differ in one row's label; the rows, the features and which rows
are aligned are public to the federation). A host sees, per round, the rows sampled, the
encrypted gradients (semantically secure: nothing), which of its rows go left at every node
(the instance spaces), which of its splits are chosen, the fixed-point grids' exponents and
the number of trees. Every one of these is a function of the rounds' gradients and of
label-free data. So the guest adds noise to each round's gradient matrix *before anything
depends on it* (:class:`NoisyMargins`: the row sample and GOSS, its own split search, the
encrypted gradients sent to the hosts, the leaf values and so the next round's margins), and
all the hosts observe is post-processing of the noisy gradients: epsilon-label-DP by
composition over the rounds.

Sensitivity. For the logistic loss ``g = p - y`` with ``p`` a function of the margin (itself
post-processing of earlier noisy rounds): a label flip moves the row's gradient by exactly 1
and leaves its hessian ``p (1 - p)`` unchanged. For multi-class softmax ``g = p - onehot(y)``:
a label change moves two entries of the row's vector by 1 each, 2 in L1, hessians unchanged.
``sample_weight`` multiplies both by the row's weight, so the sensitivity is the largest
weight times that. Other objectives are refused: a regression label moves its gradient
without bound (squared error, Tweedie, ...) and L1's leaf refit reads the labels directly.

Mechanism and accounting. Laplace noise per round (scale ``sensitivity / epsilon_round``, on
every entry of the gradient matrix), by Mironov's snapping mechanism of
:mod:`p2pboost.gbdt.noise` (textbook floating-point Laplace leaks through the doubles it can
output), with basic sequential composition over the rounds: ``epsilon_round = epsilon /
rounds``. Why not Gaussian noise with a zCDP accountant, whose noise grows with
``sqrt(rounds)`` rather than ``rounds``: at delta ``1e-5`` it needs less noise only past about
12 to 15 rounds (at 10 rounds and epsilon 8 its standard deviation is 2.2 against Laplace's
1.9; at 50 rounds about half of Laplace's), it costs a delta, and floating-point Gaussian
sampling has the leak snapping closes for Laplace (the library has no float-safe discrete
Gaussian sampler); pure epsilon also reads like the DP model's record. The snapping clamp is
set far above the noise (``bound + 40 scale``), so the noisy gradients stay unbiased; the
record's epsilon includes the snapping term. Snapping rounds each noisy entry to a multiple of
the smallest power of two (in units of the sensitivity) at least the scale: a little more
variance (a twelfth of that step squared), no bias.

The base margin. Without ``base_score`` the core starts from the labels' mean, which would
move every row's gradient when one label changes. A label-DP run spends
:data:`BASE_SHARE` of the budget on a noisy count of each class (Laplace by snapping,
sensitivity 1 for binary, 2 for K classes; the row count is public) and starts from its
margin; with ``base_score`` set it spends nothing there.

The noise source is :class:`~p2pboost.gbdt.noise.NoiseSource`: SHAKE-256 keyed by 32 bytes of
``os.urandom`` drawn in the guest's process; the key is never written, logged or sent (a host
that knew it could subtract the noise). ``HeteroConfig.label_dp_noise_seed`` derives the key
from a seed instead, for tests that compare a federated run with the core's on the same noisy
gradients (the record then says the noise was seeded and not private).

What is not covered: labels of evaluation sets (early stopping on them decides how many trees
the hosts see), and the guest's own model file's evaluation history and label diagnostics
(the guarantee is towards the hosts; the trees' leaf values are covered). It composes with
the purity gate (``purity_bound``) at no extra cost: the gate measures the guest's tree on
the noisy gradients, so when the hosts join is post-processing too (the noise lowers the
gradient purity it measures, so the gate opens sooner than without). It is refused with the
model's own differential privacy (``BoostParams.dp``), which already covers the labels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.noise import NoiseSource, snapped_laplace, snapping_epsilon
from p2pboost.gbdt.objectives import Objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import Margins
from p2pboost.hetero.config import HeteroConfig

__all__ = [
    "BASE_SHARE",
    "LabelNoise",
    "NoisyMargins",
    "check_label_dp_run",
    "label_noise",
]

F64 = npt.NDArray[np.float64]

#: The budget's share spent on the base margin's noisy class counts (no ``base_score``).
BASE_SHARE = 0.05
#: The snapping mechanism's clamp above the gradients' bound, in noise scales (the noise is
#: clamped there with probability ``e^-40`` per entry: the gradients stay unbiased).
CLAMP_SCALES = 40.0
#: Objective -> (L1 sensitivity of a row's gradient vector to its label, the largest
#: ``|g|`` of an entry, entries a label change moves) at weight 1.
SENSITIVITY = {"binary:logistic": (1.0, 1.0, 1), "multi:softmax": (2.0, 1.0, 2)}


def check_label_dp_run(
    config: HeteroConfig, params: BoostParams, objective: Objective, warm: bool, resume: bool
) -> None:
    """What a label-DP run refuses (InputError naming ``label_dp_epsilon`` and why)."""
    if not config.label_dp_epsilon:
        return
    if params.dp is not None:
        raise InputError(
            "label_dp_epsilon with dp: a dp model is already differentially private for "
            "whole rows, labels included; choose one (leave label_dp_epsilon at 0 with dp)"
        )
    if objective.name not in SENSITIVITY:
        raise InputError(
            f"label_dp_epsilon needs an objective whose gradient a label moves by a bounded "
            f"amount (binary:logistic, multi:softmax); {objective.name}'s is unbounded or "
            "its leaves are refit from the labels"
        )
    if warm:
        raise InputError(
            "label_dp_epsilon cannot continue a model (init_model): its trees were grown on "
            "gradients no label-DP accountant counted"
        )
    if resume:
        raise InputError(
            "label_dp_epsilon cannot resume: a round redone after an interruption releases "
            "its labels again under fresh noise (start the run afresh)"
        )


class LabelNoise:
    """The run's mechanism and accountant: noise for each round's gradients and the noisy
    base margin, and what they spent (:meth:`record`)."""

    def __init__(
        self,
        epsilon: float,
        rounds: int,
        objective: Objective,
        weight: F64 | None,
        seed: int | None,
        base_public: bool,
    ) -> None:
        l1, entry, changed = SENSITIVITY[objective.name]
        top = 1.0 if weight is None else float(np.max(weight))
        self.epsilon = float(epsilon)
        self.rounds = int(rounds)
        self.objective = objective
        self.sensitivity = l1 * top
        self.changed = changed
        self.base_epsilon = 0.0 if base_public else BASE_SHARE * self.epsilon
        self.epsilon_round = (self.epsilon - self.base_epsilon) / self.rounds
        self.scale = self.sensitivity / self.epsilon_round
        self.bound = entry * top + CLAMP_SCALES * self.scale
        self.source = NoiseSource(seed, "label_dp.gradients")
        self._base_source = NoiseSource(seed, "label_dp.base")
        self.rounds_noised = 0
        self.base_spent = 0.0

    def __call__(self, grad: F64) -> F64:
        """One round's gradient matrix ``(n, K)`` with its noise (a round of the budget)."""
        if self.rounds_noised >= self.rounds:
            raise InputError("label DP: more rounds than the budget was split over")
        self.rounds_noised += 1
        noisy = snapped_laplace(grad, self.sensitivity, self.epsilon_round, self.bound, self.source)
        return np.asarray(noisy, dtype=np.float64)

    def base_margin(self, y: F64) -> F64:
        """The base margin from noisy class counts (:data:`BASE_SHARE` of the budget), as the
        objective's :meth:`~p2pboost.gbdt.objectives.Objective.init_margin` from the labels."""
        n = y.size
        k = self.objective.n_outputs
        if k == 1:  # binary: the count of ones, sensitivity 1 (the row count is public)
            counts = np.array([float(np.sum(y))])
            sensitivity = 1.0
        else:
            counts = np.bincount(y.astype(np.intp), minlength=k).astype(np.float64)
            sensitivity = 2.0
        noisy = snapped_laplace(counts, sensitivity, self.base_epsilon, float(n), self._base_source)
        self.base_spent = snapping_epsilon(self.base_epsilon, sensitivity, float(n))
        share = np.clip(noisy / n, 1e-6, 1.0 - 1e-6)
        if k == 1:
            p = float(share[0])
            return np.array([math.log(p / (1.0 - p))])
        logp = np.log(share)
        return np.asarray(logp - logp.mean())

    def round_epsilon(self) -> float:
        """A round's epsilon with the snapping term (once per entry a label change moves)."""
        one = snapping_epsilon(self.epsilon_round, self.sensitivity, self.bound)
        return self.epsilon_round + self.changed * (one - self.epsilon_round)

    def record(self) -> dict[str, Any]:
        """The accountant's statement: settings and budgets only, nothing of the rows."""
        return {
            "mechanism": "label_dp_laplace",
            "epsilon": float(self.rounds_noised * self.round_epsilon() + self.base_spent),
            "epsilon_requested": self.epsilon,
            "neighbouring": "training sets that differ in one row's label",
            "protects": "the training labels, towards the hosts (all they observe)",
            "composition": "basic (sequential) over rounds",
            "rounds": self.rounds_noised,
            "rounds_planned": self.rounds,
            "epsilon_per_round": self.epsilon_round,
            "sensitivity_l1": self.sensitivity,
            "noise_scale": self.scale,
            "base_margin": (
                "base_score (a setting)"
                if self.base_epsilon == 0.0
                else f"noisy class counts (epsilon {self.base_epsilon:.6g})"
            ),
            "noise": "seeded (tests only: not private)" if self.source.seeded else "os.urandom",
        }


def label_noise(
    config: HeteroConfig, params: BoostParams, objective: Objective, weight: F64 | None
) -> LabelNoise | None:
    """The run's mechanism (``config.label_dp_epsilon`` over ``params.n_estimators`` rounds;
    :func:`check_label_dp_run` has passed), or None when label DP is off."""
    if not config.label_dp_epsilon:
        return None
    return LabelNoise(
        float(config.label_dp_epsilon),
        params.n_estimators,
        objective,
        weight,
        config.label_dp_noise_seed,
        base_public=params.base_score is not None,
    )


class NoisyMargins(Margins):
    """:class:`~p2pboost.gbdt.rounds.Margins` whose gradients carry ``noise`` each round (the
    hessians, free of the labels for the objectives allowed, are left as they are)."""

    def __init__(self, noise: LabelNoise, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.noise = noise

    def gradients(self) -> tuple[F64, F64]:
        grad, hess = super().gradients()
        return self.noise(grad), hess
