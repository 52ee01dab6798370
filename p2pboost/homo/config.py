"""What every role of a horizontal run shares: the agreed settings, identities, phases, result.

Server (:mod:`p2pboost.homo.server`) and clients (:mod:`p2pboost.homo.client`) must agree on
a :class:`HomoConfig`; they compare its :meth:`HomoConfig.digest` at hello, so a run never
starts with two parties believing different things (masking on at one, off at another).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from p2pboost.exceptions import ConfigError, InputError, TwoClientWarning
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.objectives import canonical_objective, get_objective
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.tree import Tree
from p2pboost.homo._vectors import RANK_METRICS

__all__ = [
    "CHANNEL",
    "SUM_METRICS",
    "SUPPORTED_OBJECTIVES",
    "TWO_CLIENTS",
    "VERSION",
    "ClientIdentity",
    "HomoConfig",
    "HomoPhase",
    "HomoResult",
    "Tap",
    "warn_two_clients",
]

#: The one channel between the server and each client.
CHANNEL = "homo"
#: Protocol version, compared at hello (2: ``done`` carries the random generator state;
#: 5: ``median``, the median search of the labels and of L1's leaves; 6: the consistency
#: round, ``survivors`` and ``signed``, before ``unmask``).
VERSION = 6
#: Objectives horizontal training grows the core's trees for: base margins and leaves from
#: sums, or from medians found by a search over summed counts (``_quantile``).
SUPPORTED_OBJECTIVES = (
    "binary:logistic",
    "multi:softmax",
    "reg:squarederror",
    "reg:absoluteerror",
    "reg:tweedie",
    "reg:pseudohubererror",
    "reg:fair",
    "reg:logcosh",
)
#: Metrics that are means of per-row values, so they aggregate as sums.
SUM_METRICS = ("logloss", "mlogloss", "rmse", "mae", "accuracy")
#: A tap sees every message the server receives and every aggregate it computes:
#: ``("recv", client, wire map)`` and ``("aggregate", tag, {"round", "contributors", "total"})``.
Tap = Callable[[str, str, object], None]


class HomoPhase(Enum):
    """Where a run is, for logs and errors."""

    HELLO = "hello"
    KEYS = "keys"
    STATS = "stats"
    BINNING = "binning"
    TREES = "trees"
    EVAL = "eval"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class HomoConfig:
    """What server and clients agree on (checked through a digest at hello).

    Validation (``eval_metric`` or ``early_stopping_rounds`` set): after every round the mean
    of the metric over all clients' validation rows is aggregated; early stopping keeps the
    best round, as :class:`~p2pboost.gbdt.callbacks.EarlyStopping`.

    ``threshold``: Shamir threshold ``t`` of the self-mask seeds (``None``: a majority of the
    epoch's clients); a client that dies after sending its vector is recovered only if ``t``
    others answer. ``min_clients``: the fewest vectors an aggregate may sum (a client refuses
    to unmask a smaller one). ``masking=False`` sends plaintext vectors to the server: an
    insecure mode for measuring the cost of masking, which every party must opt into.

    ``allow_two_clients``: this party knows that with exactly two clients the server and one
    client together learn the other's vectors exactly (:data:`TWO_CLIENTS`), and accepts it;
    otherwise such a run starts with a :class:`~p2pboost.exceptions.TwoClientWarning` and a
    log line (:func:`warn_two_clients`). Each party's own choice: not in :meth:`shared`.

    ``share_statistics``: the server sends clients its trees with their per-node statistics
    (covers, gains); by default it sends zeros in their place (:meth:`shared_tree`), since with
    the split values they help a client reconstruct another client's records and prediction
    needs neither (a client needs them only for TreeSHAP on its copy). The server's choice:
    not in :meth:`shared`; the server's own model keeps them.
    """

    params: BoostParams = field(default_factory=BoostParams)
    threshold: int | None = None
    min_clients: int = 2
    masking: bool = True
    round_timeout: float = 120.0
    eval_metric: str | None = None
    early_stopping_rounds: int | None = None
    allow_two_clients: bool = False
    share_statistics: bool = False

    def validate(self) -> HomoConfig:
        self.params.validate()
        p = self.params
        objective = canonical_objective(p.objective)  # aliases too: "l2"
        if objective not in SUPPORTED_OBJECTIVES:
            raise InputError(
                f"homo training supports {', '.join(SUPPORTED_OBJECTIVES)}, not {p.objective!r}"
            )
        named = isinstance(p.monotone_constraints, dict) or any(
            isinstance(f, str) for group in p.interaction_constraints or () for f in group
        )
        if named:
            raise InputError(
                "horizontal training shares no feature names: give monotone_constraints as a "
                "tuple (one -1/0/1 per feature, by position) and interaction_constraints as "
                "groups of feature positions"
            )
        if self.threshold is not None and self.threshold < 1:
            raise InputError("threshold must be at least 1")
        if self.min_clients < 2:
            raise InputError("min_clients must be at least 2: one vector is no aggregate")
        if not self.round_timeout > 0:
            raise InputError("round_timeout must be positive")
        metric = self.metric
        if metric in RANK_METRICS and objective != "binary:logistic":
            raise InputError(f"eval_metric {metric!r} ranks the scores of a binary objective")
        if metric not in SUM_METRICS + RANK_METRICS:
            raise InputError(
                f"eval_metric must be one of {', '.join(SUM_METRICS + RANK_METRICS)}: horizontal"
                f" validation aggregates sums over rows, which {metric!r} is not"
            )
        if self.early_stopping_rounds is not None and self.early_stopping_rounds < 1:
            raise InputError("early_stopping_rounds must be at least 1")
        return self

    @property
    def evaluating(self) -> bool:
        """Clients' validation sets are evaluated (an aggregation per round) only when asked."""
        return self.eval_metric is not None or self.early_stopping_rounds is not None

    @property
    def metric(self) -> str:
        return self.eval_metric or get_objective(self.params).default_metric

    def shamir_threshold(self, n_members: int) -> int:
        """The threshold an epoch of ``n_members`` uses: the configured one (or a majority),
        never more than the members. Clients refuse an epoch announcing less."""
        return min(self.threshold or n_members // 2 + 1, n_members)

    def shared_tree(self, tree: Tree) -> dict[str, Any]:
        """``tree`` as the server sends it to clients: without its covers and gains (zeros)
        unless ``share_statistics``."""
        if not self.share_statistics:
            tree = replace(tree, gain=np.zeros_like(tree.gain), cover=np.zeros_like(tree.cover))
        return tree.to_dict()

    def shared(self) -> dict[str, str]:
        """What every party must agree on (timeouts may differ), by name, as text."""
        body: dict[str, object] = {
            **{f"params.{k}": v for k, v in self.params.to_dict().items()},
            "threshold": self.threshold,
            "min_clients": self.min_clients,
            "masking": self.masking,
            "metric": self.metric,
            "early_stopping_rounds": self.early_stopping_rounds,
        }
        return {k: json.dumps(v, sort_keys=True) for k, v in sorted(body.items())}

    def digest(self) -> str:
        """A digest of :meth:`shared`."""
        return hashlib.sha256(json.dumps(self.shared(), sort_keys=True).encode()).hexdigest()

    def differences(self, theirs: Mapping[str, str]) -> list[str]:
        """The settings where ``theirs`` (the server's) differ from ours, each with both
        values."""
        ours = self.shared()
        return [
            f"{key} {theirs.get(key, '(unset)')} at the server, {ours.get(key, '(unset)')} here"
            for key in sorted(set(ours) | set(theirs))
            if ours.get(key) != theirs.get(key)
        ]


#: What secure aggregation does not protect against when a federation has two clients.
TWO_CLIENTS = (
    "a horizontal federation of exactly two clients: secure aggregation hides each client's "
    "vectors (gradient histograms, counts, metrics) from the server only while it colludes "
    "with neither client; if the server colludes with one client, the two learn the other "
    "client's vectors exactly (the aggregate minus their own). Add a third client, or set "
    "allow_two_clients (HomoConfig; [train] allow_two_clients = true in a party file) to "
    "accept this and silence this warning"
)


def warn_two_clients(config: HomoConfig, clients: int, log: logging.Logger) -> None:
    """Warn (:class:`~p2pboost.exceptions.TwoClientWarning`, and a line in ``log``) when a
    masked federation has exactly two clients and this party has not accepted it
    (``allow_two_clients``). Why both: the warning reaches a library caller's filters, the
    log line an operator who runs the command-line party."""
    if clients != 2 or config.allow_two_clients or not config.masking:
        return
    log.warning(TWO_CLIENTS)
    warnings.warn(TWO_CLIENTS, TwoClientWarning, stacklevel=3)


@dataclass(frozen=True)
class ClientIdentity:
    """A client's certificate key (to sign its key adverts and, after a dropout, the survivor
    set) and the federation CA (to check the others'). ``from_dir`` reads the files
    :func:`p2pboost.certs.init` writes."""

    signing_key: ec.EllipticCurvePrivateKey
    cert_pem: bytes
    ca: x509.Certificate

    @classmethod
    def from_dir(cls, directory: str | os.PathLike[str]) -> ClientIdentity:
        base = Path(directory)
        try:
            key = serialization.load_pem_private_key((base / "key.pem").read_bytes(), None)
            ca = x509.load_pem_x509_certificate((base / "ca.pem").read_bytes())
            cert = (base / "cert.pem").read_bytes()
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"cannot read the identity in {base}: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError(f"{base / 'key.pem'} is not an ECDSA key")
        return cls(key, cert, ca)


@dataclass
class HomoResult:
    """The server's outcome: the model (which every client also holds) and statistics."""

    booster: Booster
    clients: list[str]
    rounds: int
    epochs: int
    seconds_setup: float
    seconds_trees: float
    n_trees: int
    evaluation: list[float] = field(default_factory=list)
    #: Clients dropped during the run, and why (``clients`` are those that finished).
    dropped: dict[str, str] = field(default_factory=dict)
