"""Loss functions: gradients, hessians, link functions and label checks; a registry by name.

Margins (raw scores) are always 2-D, ``(n_rows, n_outputs)``; scalar objectives have one
output. ``grad_hess`` returns the first and second derivative of the per-row loss with respect
to each margin (the diagonal of the hessian for softmax). Where the true second derivative is 0
or undefined (L1), a documented surrogate is used so Newton steps stay finite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError

__all__ = [
    "Objective",
    "ObjectiveSettings",
    "available_objectives",
    "canonical_objective",
    "get_objective",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
#: Floor of hessians, as XGBoost: keeps leaf weights finite when predictions saturate.
_HESS_EPS = 1e-16


class Objective(ABC):
    """A twice-differentiable loss on margins plus its link to predictions."""

    name: ClassVar[str]
    #: Metric reported by default on evaluation sets.
    default_metric: ClassVar[str]
    #: :meth:`init_margin` is the labels' median: a federation that sees only sums finds it by
    #: a search over ranks instead (horizontal training).
    median_start: ClassVar[bool] = False
    #: :meth:`refit_leaves` sets every leaf to the median residual of its rows (L1): likewise.
    median_refit: ClassVar[bool] = False

    def __init__(self, num_class: int = 1) -> None:
        self.num_class = num_class

    @property
    def n_outputs(self) -> int:
        return 1

    def check_labels(self, y: Any) -> F64:
        """Labels as a 1-D float64 array; raises :class:`InputError` if unusable."""
        try:
            arr = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"labels must be numeric: {exc}") from None
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1:
            raise InputError(f"labels must be 1-D, got shape {arr.shape}")
        if arr.size == 0:
            raise InputError("labels are empty")
        if not np.all(np.isfinite(arr)):
            raise InputError("labels contain NaN or infinite values")
        self._check_domain(arr)
        return arr

    def _check_domain(self, y: F64) -> None:  # noqa: B027 - optional hook, not abstract
        """Subclasses reject labels outside the loss's domain (default: any real label)."""

    @abstractmethod
    def loss(self, y: F64, margin: F64) -> F64:
        """Per-row loss, shape ``(n,)``."""

    @abstractmethod
    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        """Gradient and hessian, each shaped like ``margin``."""

    @abstractmethod
    def init_margin(self, y: F64) -> F64:
        """Best constant margin estimated from the labels, shape ``(n_outputs,)``."""

    def margin_from_score(self, base_score: float) -> F64:
        """Margin of a user-given ``base_score`` (prediction scale)."""
        return np.full(self.n_outputs, float(base_score))

    def transform(self, margin: F64) -> F64:
        """Predictions from margins: identity unless the objective has a link function."""
        return margin

    def prediction(self, margin: F64) -> F64:
        """What ``predict`` returns: :meth:`transform`, ``(n,)`` for one output, else ``(n, K)``.

        The one place that shapes predictions, for boosters, federated models and metrics.
        """
        out = self.transform(margin)
        return out[:, 0] if out.shape[1] == 1 else out

    def refit_leaves(self, y: F64, margin: F64, leaf: I64, n_nodes: int) -> F64 | None:
        """Better leaf values than the Newton step, or ``None`` to keep the Newton step.

        ``leaf[i]`` is the leaf of row ``i`` (rows of this tree's sample); ``margin`` is before
        the tree. Returns ``(n_nodes,)`` values (unscaled; the learning rate is applied by the
        caller) for objectives whose hessian is only a surrogate.
        """
        return None


class Logistic(Objective):
    """Binary log loss; labels 0/1; predictions are probabilities."""

    name = "binary:logistic"
    default_metric = "logloss"

    def _check_domain(self, y: F64) -> None:
        if not np.all((y == 0.0) | (y == 1.0)):
            raise InputError("binary:logistic needs labels 0 and 1")

    def loss(self, y: F64, margin: F64) -> F64:
        m = margin[:, 0]
        return np.asarray(np.logaddexp(0.0, m) - y * m)

    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        p = _sigmoid(margin[:, 0])
        g = p - y
        h = np.maximum(p * (1.0 - p), _HESS_EPS)
        return g[:, None], h[:, None]

    def init_margin(self, y: F64) -> F64:
        p = float(np.clip(np.mean(y), 1e-6, 1.0 - 1e-6))
        return np.array([np.log(p / (1.0 - p))])

    def margin_from_score(self, base_score: float) -> F64:
        if not 0.0 < base_score < 1.0:
            raise InputError("base_score for binary:logistic must be a probability in (0, 1)")
        return np.array([np.log(base_score / (1.0 - base_score))])

    def transform(self, margin: F64) -> F64:
        return _sigmoid(margin)


class Softmax(Objective):
    """Multi-class cross-entropy; labels 0..num_class-1; predictions are class probabilities.

    The hessian is the diagonal of the true one, ``p (1 - p)``.
    """

    name = "multi:softmax"
    default_metric = "mlogloss"

    def __init__(self, num_class: int = 1) -> None:
        if num_class < 2:
            raise InputError("multi:softmax needs num_class >= 2")
        super().__init__(num_class)

    @property
    def n_outputs(self) -> int:
        return self.num_class

    def _check_domain(self, y: F64) -> None:
        if not np.all((y == np.floor(y)) & (y >= 0) & (y < self.num_class)):
            raise InputError(f"multi:softmax needs integer labels in [0, {self.num_class})")

    def loss(self, y: F64, margin: F64) -> F64:
        lse = _logsumexp(margin)
        return np.asarray(lse - margin[np.arange(y.size), y.astype(np.intp)])

    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        p = self.transform(margin)
        g = p.copy()
        g[np.arange(y.size), y.astype(np.intp)] -= 1.0
        h = np.maximum(p * (1.0 - p), _HESS_EPS)
        return g, h

    def init_margin(self, y: F64) -> F64:
        counts = np.bincount(y.astype(np.intp), minlength=self.num_class).astype(np.float64)
        logp = np.log(np.maximum(counts / y.size, 1e-6))
        return np.asarray(logp - logp.mean())

    def transform(self, margin: F64) -> F64:
        z = margin - margin.max(axis=1, keepdims=True)
        e = np.exp(z)
        return np.asarray(e / e.sum(axis=1, keepdims=True))


class SquaredError(Objective):
    """L2: ``(m - y)^2 / 2``."""

    name = "reg:squarederror"
    default_metric = "rmse"

    def loss(self, y: F64, margin: F64) -> F64:
        return np.asarray(0.5 * (margin[:, 0] - y) ** 2)

    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        g = margin[:, 0] - y
        return g[:, None], np.ones_like(g)[:, None]

    def init_margin(self, y: F64) -> F64:
        return np.array([float(np.mean(y))])


class AbsoluteError(Objective):
    """L1: ``|m - y|``. Gradient ``sign(m - y)``; hessian is the surrogate 1 (true: 0)."""

    name = "reg:absoluteerror"
    default_metric = "mae"
    median_start = True
    median_refit = True

    def loss(self, y: F64, margin: F64) -> F64:
        return np.asarray(np.abs(margin[:, 0] - y))

    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        g = np.sign(margin[:, 0] - y)
        return g[:, None], np.ones_like(g)[:, None]

    def init_margin(self, y: F64) -> F64:
        return np.array([float(np.median(y))])

    def refit_leaves(self, y: F64, margin: F64, leaf: I64, n_nodes: int) -> F64 | None:
        """Median residual per leaf: the exact L1 minimiser (as XGBoost and LightGBM do)."""
        residual = y - margin[:, 0]
        order = np.lexsort((residual, leaf))
        sorted_leaf, sorted_res = leaf[order], residual[order]
        starts = np.searchsorted(sorted_leaf, np.arange(n_nodes), side="left")
        ends = np.searchsorted(sorted_leaf, np.arange(n_nodes), side="right")
        out = np.zeros(n_nodes)
        for node in np.flatnonzero(ends > starts):
            out[node] = float(np.median(sorted_res[starts[node] : ends[node]]))
        return out


class PseudoHuber(Objective):
    """Smooth Huber: ``d^2 (sqrt(1 + (r/d)^2) - 1)`` with ``r = m - y``, ``d = huber_delta``."""

    name = "reg:pseudohubererror"
    default_metric = "mae"
    median_start = True

    def __init__(self, num_class: int = 1, delta: float = 1.0) -> None:
        super().__init__(num_class)
        self.delta = delta

    def loss(self, y: F64, margin: F64) -> F64:
        z = (margin[:, 0] - y) / self.delta
        return np.asarray(self.delta**2 * (np.sqrt(1.0 + z * z) - 1.0))

    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        r = margin[:, 0] - y
        s = 1.0 + (r / self.delta) ** 2
        g = r / np.sqrt(s)
        h = np.maximum(1.0 / (s * np.sqrt(s)), _HESS_EPS)
        return g[:, None], h[:, None]

    def init_margin(self, y: F64) -> F64:
        return np.array([float(np.median(y))])


class Fair(Objective):
    """Fair loss: ``c^2 (|r|/c - log(1 + |r|/c))`` with ``c = fair_c``."""

    name = "reg:fair"
    default_metric = "mae"
    median_start = True

    def __init__(self, num_class: int = 1, c: float = 1.0) -> None:
        super().__init__(num_class)
        self.c = c

    def loss(self, y: F64, margin: F64) -> F64:
        a = np.abs(margin[:, 0] - y) / self.c
        return np.asarray(self.c**2 * (a - np.log1p(a)))

    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        r = margin[:, 0] - y
        d = np.abs(r) + self.c
        return (self.c * r / d)[:, None], (self.c**2 / (d * d))[:, None]

    def init_margin(self, y: F64) -> F64:
        return np.array([float(np.median(y))])


class LogCosh(Objective):
    """Log-cosh: ``log(cosh(m - y))``; gradient ``tanh(r)``, hessian ``1 - tanh(r)^2``."""

    name = "reg:logcosh"
    default_metric = "rmse"
    median_start = True

    def loss(self, y: F64, margin: F64) -> F64:
        a = np.abs(margin[:, 0] - y)
        return np.asarray(a + np.log1p(np.exp(-2.0 * a)) - np.log(2.0))

    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        t = np.tanh(margin[:, 0] - y)
        return t[:, None], np.maximum(1.0 - t * t, _HESS_EPS)[:, None]

    def init_margin(self, y: F64) -> F64:
        return np.array([float(np.median(y))])


class Tweedie(Objective):
    """Tweedie deviance with log link, variance power ``rho`` in (1, 2); labels >= 0."""

    name = "reg:tweedie"
    default_metric = "rmse"

    def __init__(self, num_class: int = 1, rho: float = 1.5) -> None:
        super().__init__(num_class)
        self.rho = rho

    def _check_domain(self, y: F64) -> None:
        if np.any(y < 0) or not np.any(y > 0):
            raise InputError("reg:tweedie needs labels >= 0, not all zero")

    def loss(self, y: F64, margin: F64) -> F64:
        m, r = margin[:, 0], self.rho
        return np.asarray(
            -y * np.exp((1.0 - r) * m) / (1.0 - r) + np.exp((2.0 - r) * m) / (2.0 - r)
        )

    def grad_hess(self, y: F64, margin: F64) -> tuple[F64, F64]:
        m, r = margin[:, 0], self.rho
        a, b = np.exp((1.0 - r) * m), np.exp((2.0 - r) * m)
        g = -y * a + b
        h = -(1.0 - r) * y * a + (2.0 - r) * b
        return g[:, None], h[:, None]

    def init_margin(self, y: F64) -> F64:
        return np.array([float(np.log(np.mean(y)))])

    def margin_from_score(self, base_score: float) -> F64:
        if base_score <= 0.0:
            raise InputError("base_score for reg:tweedie must be positive")
        return np.array([np.log(base_score)])

    def transform(self, margin: F64) -> F64:
        return np.exp(margin)


class ObjectiveSettings(Protocol):
    """What an objective reads of :class:`~p2pboost.gbdt.params.BoostParams`.

    A structural type, so that this module does not import ``params`` (which validates
    objective names with :func:`canonical_objective`): the core has no import cycle.
    """

    @property
    def objective(self) -> str: ...
    @property
    def num_class(self) -> int: ...
    @property
    def huber_delta(self) -> float: ...
    @property
    def fair_c(self) -> float: ...
    @property
    def tweedie_variance_power(self) -> float: ...


_Factory = Callable[[ObjectiveSettings], Objective]
_REGISTRY: dict[str, _Factory] = {
    Logistic.name: lambda p: Logistic(),
    Softmax.name: lambda p: Softmax(p.num_class),
    SquaredError.name: lambda p: SquaredError(),
    AbsoluteError.name: lambda p: AbsoluteError(),
    PseudoHuber.name: lambda p: PseudoHuber(delta=p.huber_delta),
    Fair.name: lambda p: Fair(c=p.fair_c),
    LogCosh.name: lambda p: LogCosh(),
    Tweedie.name: lambda p: Tweedie(rho=p.tweedie_variance_power),
}
_ALIASES = {
    "binary": Logistic.name,
    "logistic": Logistic.name,
    "multi:softprob": Softmax.name,
    "softmax": Softmax.name,
    "multiclass": Softmax.name,
    "l2": SquaredError.name,
    "regression": SquaredError.name,
    "reg:linear": SquaredError.name,
    "l1": AbsoluteError.name,
    "huber": PseudoHuber.name,
    "fair": Fair.name,
    "logcosh": LogCosh.name,
    "tweedie": Tweedie.name,
}


def available_objectives() -> list[str]:
    """Canonical objective names (aliases such as ``"l2"`` or ``"softmax"`` also work)."""
    return sorted(_REGISTRY)


def canonical_objective(name: str) -> str:
    """Canonical name of ``name`` or an alias; :class:`InputError` if unknown."""
    key = _ALIASES.get(name, name)
    if key not in _REGISTRY:
        raise InputError(
            f"unknown objective {name!r}; choose one of {', '.join(available_objectives())} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        )
    return key


def get_objective(params: ObjectiveSettings) -> Objective:
    """The objective named by ``params.objective``, configured from ``params``."""
    return _REGISTRY[canonical_objective(params.objective)](params)


def _sigmoid(x: F64) -> F64:
    # exp of a non-positive number never overflows.
    e = np.exp(-np.abs(x))
    return np.asarray(np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)))


def _logsumexp(m: F64) -> F64:
    top = m.max(axis=1)
    return np.asarray(top + np.log(np.exp(m - top[:, None]).sum(axis=1)))
