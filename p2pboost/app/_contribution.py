"""What the partners' data added to a vertical model: gain shares and the guest-only lift.

The first question a guest's business owner asks of a federation is what the partners' data
bought. Two answers come from what the guest already holds, and both are stated as what they
are:

* **Each party's share of the total gain.** The guest's model file holds every split's gain,
  the hosts' splits included (it computed them from its gradients; it never learns the
  hosts' features or thresholds). The share is over the trees predictions use (the best
  iteration's, when early stopping chose one). A share of gain says how much of the fitted
  loss reduction went through a party's splits; it is not the drop in quality without that
  party (features stand in for each other).
* **The lift on validation rows.** When the guest has validation rows (``[data] valid_path``),
  it also trains, in the same run and on its own machine, a *guest-only* model: the same
  boosting parameters (and early stopping) on the same aligned training rows with its own
  features only, evaluated on the same validation rows. The federated model's metric beside
  the guest-only model's is what the partners' features bought on those rows. Nothing is sent
  for it: the hosts see no extra message.

The comparison is stored in the guest's model file among its ``diagnostics`` (figures only the
guest can compute, outside the model's fingerprint; older readers ignore them), under the keys
``contribution.valid_rows``, ``contribution.federated.<metric>`` and
``contribution.guest_only.<metric>``, so ``p2pboost inspect`` and ``report`` show it later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from p2pboost.exceptions import InputError
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import LOCAL as GUEST  # the owner id of the guest's own splits

if TYPE_CHECKING:
    from p2pboost.app._validation import EvalSets
    from p2pboost.app.config import TrainConfig
    from p2pboost.hetero.model import GuestModel

__all__ = [
    "Comparison",
    "comparison_of",
    "comparison_text",
    "gain_shares",
    "guest_only_comparison",
    "measure",
    "shares_text",
    "summary",
    "summary_lines",
]

_PREFIX = "contribution."
_FEDERATED = _PREFIX + "federated."
_GUEST_ONLY = _PREFIX + "guest_only."
_ROWS = _PREFIX + "valid_rows"


def gain_shares(model: GuestModel) -> dict[str, float]:
    """Each party's share of the total split gain (the guest, then its hosts, summing to 1),
    over the trees predictions use; empty when the trees hold no gain (a private model's file
    keeps none, and a model without splits has none)."""
    totals = np.zeros(len(model.hosts) + 1)
    for tree in model.trees[: model.used_trees()]:
        split = tree.owner >= GUEST
        owners = np.asarray(tree.owner[split], dtype=np.int64)
        np.add.at(totals, owners, np.maximum(tree.gain[split], 0.0))
    total = float(totals.sum())
    if not total > 0:
        return {}
    names = ["guest", *model.hosts]
    return {n: float(t) / total for n, t in zip(names, totals, strict=True)}


def shares_text(shares: Mapping[str, float]) -> str:
    """``guest 61.2%, bank-b 38.8%`` (or why there is no share to show)."""
    if not shares:
        return "unknown: the trees hold no gain (a private model's file keeps none)"
    return ", ".join(f"{party} {share:.1%}" for party, share in shares.items())


class Comparison(dict[str, Any]):
    """The validation comparison read back from a model's diagnostics: ``metric``,
    ``valid_rows``, ``federated``, ``guest_only``, ``lift`` (federated minus guest-only, signed
    so that a positive lift is an improvement) and ``higher_is_better``."""


def comparison_of(diagnostics: Mapping[str, float]) -> Comparison | None:
    """The comparison stored by :func:`guest_only_comparison`, or None when there is none."""
    from p2pboost.gbdt.metrics import get_metric

    fed = {k[len(_FEDERATED) :]: v for k, v in diagnostics.items() if k.startswith(_FEDERATED)}
    own = {k[len(_GUEST_ONLY) :]: v for k, v in diagnostics.items() if k.startswith(_GUEST_ONLY)}
    common = [m for m in fed if m in own]
    if not common:
        return None
    metric = common[0]
    try:
        higher = get_metric(metric).higher_is_better
    except InputError:  # a metric this version does not know: show the figures unsigned
        higher = True
    sign = 1.0 if higher else -1.0
    return Comparison(
        metric=metric,
        valid_rows=int(diagnostics.get(_ROWS, 0)),
        federated=float(fed[metric]),
        guest_only=float(own[metric]),
        lift=sign * (float(fed[metric]) - float(own[metric])),
        higher_is_better=higher,
    )


def _at_best(history: Mapping[str, list[float]], metric: str, best: int | None) -> float:
    values = history[metric]
    return float(values[best if best is not None and best < len(values) else -1])


def guest_only_comparison(
    model: GuestModel,
    params: BoostParams,
    X: Any,
    y: Any,
    valid: tuple[Any, Any],
    early_stopping_rounds: int | None,
    valid_name: str,
) -> dict[str, float]:
    """Train the guest-only model (same parameters and early stopping, ``X``/``y`` the
    federated run's aligned training rows) and return the diagnostics that compare it with
    ``model`` on ``valid`` (the guest's validation rows). Empty when the guest has no
    features of its own or the federated run kept no validation history."""
    from p2pboost.gbdt.booster import train
    from p2pboost.gbdt.callbacks import EarlyStopping

    scores = model.history.get(valid_name)
    if not scores or np.asarray(X).shape[1] == 0:
        return {}
    metric = next(iter(scores))
    own = train(
        params,
        X,
        y,
        eval_sets=[valid],
        eval_names=[valid_name],
        eval_metrics=[metric],
        callbacks=[EarlyStopping(early_stopping_rounds)] if early_stopping_rounds else [],
        feature_names=model.feature_names,
    )
    return {
        _ROWS: float(np.asarray(valid[1]).shape[0]),
        _FEDERATED + metric: _at_best(scores, metric, model.best_iteration),
        _GUEST_ONLY + metric: _at_best(own.history[valid_name], metric, own.best_iteration),
    }


def summary(model: GuestModel) -> dict[str, Any]:
    """The training summary's figures: ``gain_share`` and, with validation rows,
    ``validation`` (the comparison with the guest-only model)."""
    out: dict[str, Any] = {"gain_share": {p: round(v, 6) for p, v in gain_shares(model).items()}}
    comparison = comparison_of(model.diagnostics)
    if comparison is not None:
        out["validation"] = dict(comparison)
    return out


def summary_lines(model: GuestModel) -> list[str]:
    """The same, in words, for the console."""
    lines = [f"share of the total gain: {shares_text(gain_shares(model))}"]
    c = comparison_of(model.diagnostics)
    if c is not None:
        lines.append(comparison_text(c))
    return lines


def comparison_text(c: Mapping[str, Any]) -> str:
    """``valid auc 0.9812 federated vs 0.9590 guest-only (lift +0.0222, 114 rows)``."""
    return (
        f"validation {c['metric']}: {c['federated']:.4f} federated vs {c['guest_only']:.4f} "
        f"guest-only, trained on the guest's features alone in the same run (lift "
        f"{c['lift']:+.4f} on {c['valid_rows']} rows)"
    )


async def measure(
    model: GuestModel,
    train: TrainConfig,
    X: Any,
    y: Any,
    sets: EvalSets,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """After a vertical guest's training: with validation rows, train the guest-only model
    (in a worker thread: the node's connections keep going) and store the comparison in
    ``model``'s diagnostics; say the shares and the comparison; return the summary's
    figures (:func:`summary`)."""
    from p2pboost.app._validation import VALID

    if sets.has_valid:
        say("training a guest-only model on the same rows, for comparison...")
        own = (train.params, X, y, sets.guest[-1], train.early_stopping_rounds, VALID)
        model.diagnostics.update(await asyncio.to_thread(guest_only_comparison, model, *own))
    for line in summary_lines(model):
        say(line)
    return summary(model)
