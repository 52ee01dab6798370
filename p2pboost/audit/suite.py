"""The attack suite: a whole vertical federation in this process, and what each party infers.

:func:`federate` trains a guest and its hosts over the testing kit's in-memory fabric with
every received transport message recorded (:class:`~p2pboost.audit.views.TapFabric`), then
scores held-out rows by one-round inference; :class:`Run` keeps the models and, decoded as
each node decodes them, what every host received during training
(:func:`~p2pboost.audit.views.host_partitions`) and what the guest received at inference
(:func:`~p2pboost.audit.views.guest_bits`). The attacks then use only those and the
attacker's own data:

- :func:`label_attack`: a host knows the labels of a few rows (:func:`known_rows`) and
  labels the rest from the row sets it saw (:func:`~p2pboost.audit.attacks.propagate_labels`)
  and, second, from those and its own features together; the better of the two counts.
- :func:`host_alone`: the reference, what the host infers without the federation: the better
  of the core GBDT and a logistic regression on its own features and the same known labels.
  The federation's leak is the attack's *excess* over it.
- :func:`feature_order`: the guest orders a host's rows by the host feature its splits use
  most, from the inference bits (splits grouped by nesting); ``scores_only`` is the best any
  attack on the scores alone ranks.

``p2pboost audit`` (the application) and ``python -m benchmarks attacks`` both run on this.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.audit.attacks import (
    auc,
    cross_fitted,
    logistic_scores,
    nesting_groups,
    order_by_bits,
    propagate_labels,
    spearman,
)
from p2pboost.audit.views import HostView, TapFabric, decoded, guest_bits, host_partitions
from p2pboost.gbdt.booster import train
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.estimators import HeteroGuest, HeteroHost
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.testing import TRAINING, local_federation
from p2pboost.workers import AnyExecutor

__all__ = [
    "GUEST",
    "Run",
    "feature_order",
    "federate",
    "flat_groups",
    "host_alone",
    "known_rows",
    "label_attack",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

#: The guest's party id in the simulated federation (hosts are ``host1``, ``host2``, ...).
GUEST = "guest"


@dataclass
class Run:
    """One trained federation and what its parties received."""

    guest: GuestModel
    hosts: list[HostModel]
    views: list[HostView]  # per host: the row sets it saw during training
    proba: F64  # the model's probability of the positive class on the test rows
    bits: list[tuple[I64, I64, B8]]  # per host: the bits of its splits the guest received
    seconds: float
    #: With ``private_rows``: the first that many test rows scored again by private
    #: inference: the guest's scores there, and the host splits' bits its received messages
    #: hold (none, when private inference keeps its promise).
    private_proba: F64 | None = None
    private_bits: list[tuple[I64, I64, B8]] | None = None

    @property
    def host(self) -> HostModel:
        return self.hosts[0]

    @property
    def view(self) -> HostView:
        return self.views[0]


async def _federate(
    X_guest: F64,
    y: F64,
    X_hosts: Sequence[Any],
    test_guest: F64,
    test_hosts: Sequence[Any],
    params: BoostParams,
    config: HeteroConfig,
    workers: int,
    executor: AnyExecutor | None,
    private_rows: int = 0,
) -> Run:
    names = [f"host{i + 1}" for i in range(len(X_hosts))]
    fabric = TapFabric()
    async with local_federation(fabric, [GUEST, *names], TRAINING) as fed:
        guest = HeteroGuest(params, config=config, executor=executor)
        hosts = [HeteroHost(workers=workers, executor=executor) for _ in names]
        t0 = time.perf_counter()
        await asyncio.gather(
            guest.afit(fed[GUEST], names, X_guest, y),
            *(h.afit(fed[n], GUEST, X) for h, n, X in zip(hosts, names, X_hosts, strict=True)),
        )
        seconds = time.perf_counter() - t0
        views = [
            host_partitions(decoded(fabric, n), X_guest.shape[0], decoded(fabric, GUEST, sender=n))
            for n in names
        ]
        mark = fabric.mark(GUEST)
        proba, *_ = await asyncio.gather(
            guest.apredict(fed[GUEST], test_guest),
            *(
                h.aserve_predict(fed[n], X)
                for h, n, X in zip(hosts, names, test_hosts, strict=True)
            ),
        )
        n_test = test_guest.shape[0]
        bits = [guest_bits(decoded(fabric, GUEST, since=mark, sender=n), n_test) for n in names]
        private_proba: F64 | None = None
        private_bits: list[tuple[I64, I64, B8]] | None = None
        if private_rows > 0:
            m = min(private_rows, n_test)
            mark = fabric.mark(GUEST)
            scored, *_ = await asyncio.gather(
                guest.apredict(fed[GUEST], test_guest[:m], private=True),
                *(
                    h.aserve_predict(fed[n], X[:m], private=True)
                    for h, n, X in zip(hosts, names, test_hosts, strict=True)
                ),
            )
            private_proba = np.asarray(scored, dtype=np.float64).reshape(m, -1)[:, -1]
            private_bits = [
                guest_bits(decoded(fabric, GUEST, since=mark, sender=n), m) for n in names
            ]
    return Run(
        guest.model_,
        [h.model_ for h in hosts],
        views,
        np.asarray(proba, dtype=np.float64).reshape(n_test, -1)[:, -1],
        bits,
        seconds,
        private_proba,
        private_bits,
    )


def federate(
    X_guest: F64,
    y: F64,
    X_hosts: Sequence[Any],
    test_guest: F64,
    test_hosts: Sequence[Any],
    params: BoostParams,
    config: HeteroConfig,
    workers: int = 1,
    executor: AnyExecutor | None = None,
    private_rows: int = 0,
) -> Run:
    """Train the federation (the guest's ``X_guest``, ``y``; one host per ``X_hosts``) in
    this process and score the test rows, recording what every party received. ``executor``:
    one pool for every party (a :func:`~p2pboost.workers.pinned_pool`, started once for many
    federations), else each party starts its own of ``workers`` processes. ``private_rows``:
    also score that many test rows by private inference (a fresh 2048-bit key, ``trees x
    2**depth`` encryptions a row, so a sample), recording what the guest received there."""
    return asyncio.run(
        _federate(
            X_guest,
            y,
            X_hosts,
            test_guest,
            test_hosts,
            params,
            config,
            workers,
            executor,
            private_rows,
        )
    )


def known_rows(y: npt.ArrayLike, shares: Sequence[float], seed: int) -> dict[float, I64]:
    """The attacker's labelled rows per share: prefixes of one random order of the rows, so a
    larger share knows every label a smaller one does (the shares differ in nothing else);
    each holds at least one row of each class."""
    labels = np.asarray(y)
    rng = np.random.default_rng(seed)
    order = rng.permutation(labels.size)
    out = {}
    for share in shares:
        k = max(2, round(share * labels.size))
        known = order[:k]
        if not 0 < labels[known].sum() < k:  # one class only: add the first row of the other
            other = order[k:][labels[order[k:]] != labels[known[0]]][:1]
            known = np.concatenate([known, other])
        out[share] = np.sort(known)
    return out


def host_alone(X: F64, y: npt.ArrayLike, known: I64, params: BoostParams) -> float:
    """What the host infers from its own features and the known labels, no federation (the
    better, on the unknown rows, of the core GBDT and a logistic regression: generous to the
    host, so the excess is if anything understated)."""
    labels = np.asarray(y, dtype=np.float64)
    unknown = np.setdiff1d(np.arange(labels.size), known)
    X = np.asarray(X, dtype=np.float64)
    gbdt = train(params.with_updates(dp=None), X[known], labels[known])
    filled = np.nan_to_num(X)
    logistic = logistic_scores(filled[known], labels[known], filled[unknown])
    return max(auc(labels[unknown], gbdt.predict(X[unknown])), auc(labels[unknown], logistic))


def label_attack(
    groups: Sequence[I64], y: npt.ArrayLike, known: I64, X_host: F64 | None
) -> dict[str, float]:
    """The host's attack AUCs on the rows whose labels it did not know: ``sets`` (the row
    sets alone) and, given ``X_host``, ``with_features`` (a logistic regression on the known
    rows over the host's own features and the sets' cross-fitted score: what the host makes of
    both together)."""
    labels = np.asarray(y)
    n = labels.size
    unknown = np.setdiff1d(np.arange(n), known)
    yk = labels[known].astype(np.float64)
    score = propagate_labels(groups, n, known, yk)
    out = {"sets": auc(labels[unknown], score[unknown])}
    if X_host is not None:
        fitted = cross_fitted(groups, n, known, yk)
        fitted[unknown] = score[unknown]
        p = np.clip(fitted, 1e-4, 1 - 1e-4)
        own = np.nan_to_num(np.asarray(X_host, dtype=np.float64))
        Z = np.column_stack([own, np.log(p / (1 - p))])
        found = logistic_scores(Z[known], yk, Z[unknown])
        out["with_features"] = auc(labels[unknown], found)
    return out


def flat_groups(view: HostView) -> list[I64]:
    """Every row set of every tree the host saw, as one list."""
    return [g for groups in view.groups for g in groups]


def feature_order(bits: tuple[I64, I64, B8], feature: F64) -> dict[str, Any]:
    """The guest's reconstruction of a host feature's order from the inference bits of that
    host's splits: ``spearman`` with the feature's true values (``feature``, test rows)."""
    _, _, go_left = bits
    groups = nesting_groups(go_left, min_side=max(20, go_left.shape[1] // 200))
    order = order_by_bits(go_left, groups[0] if groups else [])
    return {
        "spearman": round(spearman(order, feature), 4),
        "host_splits": int(go_left.shape[0]),
        "largest_group": len(groups[0]) if groups else 0,
        "groups": len(groups),
    }
