"""Training callbacks, LightGBM-style: called after every boosting round.

A callback receives a :class:`CallbackEnv` and may raise :class:`EarlyStop` to end training;
:func:`p2pboost.gbdt.booster.train` catches it and records the best iteration.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from p2pboost.exceptions import InputError
from p2pboost.gbdt.metrics import get_metric

__all__ = [
    "Callback",
    "CallbackEnv",
    "EarlyStop",
    "EarlyStopping",
    "LogEvaluation",
    "RecordEvaluation",
]


@dataclass(frozen=True, slots=True)
class CallbackEnv:
    """State after round ``iteration`` (0-based): ``evaluation[set name][metric] = value``."""

    iteration: int
    n_estimators: int
    evaluation: dict[str, dict[str, float]]


class EarlyStop(Exception):
    """Raised by a callback to end training (a signal: train() catches it; 0-based)."""

    def __init__(self, best_iteration: int, best_score: float) -> None:
        super().__init__(f"early stop at best iteration {best_iteration} ({best_score:.6g})")
        self.best_iteration = best_iteration
        self.best_score = best_score


Callback = Callable[[CallbackEnv], None]


@dataclass
class EarlyStopping:
    """Stop when ``metric`` on ``data_name`` has not improved for ``rounds`` rounds.

    Defaults: the first metric of the last evaluation set (as XGBoost). ``min_delta`` is the
    smallest change that counts as an improvement.
    """

    rounds: int
    metric: str | None = None
    data_name: str | None = None
    min_delta: float = 0.0
    best_iteration: int = field(default=-1, init=False)
    best_score: float = field(default=math.nan, init=False)

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise InputError("early stopping rounds must be >= 1")
        if self.min_delta < 0:
            raise InputError("min_delta must be >= 0")

    def __call__(self, env: CallbackEnv) -> None:
        if env.iteration == 0:  # a new training run: forget the previous one
            self.best_iteration, self.best_score = -1, math.nan
        if not env.evaluation:
            raise InputError("early stopping needs at least one evaluation set")
        name = self.data_name or list(env.evaluation)[-1]
        if name not in env.evaluation:
            raise InputError(f"no evaluation set named {name!r}")
        scores = env.evaluation[name]
        metric = self.metric or next(iter(scores))
        if metric not in scores:
            raise InputError(f"metric {metric!r} is not evaluated on {name!r}")
        score = scores[metric]
        sign = 1.0 if get_metric(metric).higher_is_better else -1.0
        if self.best_iteration < 0 or sign * (score - self.best_score) > self.min_delta:
            self.best_iteration, self.best_score = env.iteration, score
        elif env.iteration - self.best_iteration >= self.rounds:
            raise EarlyStop(self.best_iteration, self.best_score)


@dataclass
class LogEvaluation:
    """Print the evaluation results every ``period`` rounds (to ``printer``)."""

    period: int = 1
    printer: Callable[[str], Any] = print

    def __call__(self, env: CallbackEnv) -> None:
        if self.period > 0 and (env.iteration + 1) % self.period == 0:
            parts = [
                f"{name}-{metric}: {value:.6g}"
                for name, scores in env.evaluation.items()
                for metric, value in scores.items()
            ]
            self.printer(f"[{env.iteration}] " + "  ".join(parts))


@dataclass
class RecordEvaluation:
    """Collect every round's results: ``history[set name][metric]`` is a list of values."""

    history: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def __call__(self, env: CallbackEnv) -> None:
        for name, scores in env.evaluation.items():
            for metric, value in scores.items():
                self.history.setdefault(name, {}).setdefault(metric, []).append(value)
