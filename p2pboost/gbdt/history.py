"""Evaluation history stored in model files: ``history[set name][metric]`` = one value per round.

Training already computes these figures every round (for the callbacks); keeping them in the
model file lets ``p2pboost report`` draw a learning curve later, on the machine that holds the
model, without re-running a federation. The history is optional and outside the model's
fingerprint: files written before it existed load with an empty history.

JSON has no NaN, and a metric can be undefined for a round (e.g. AUC on one class), so
non-finite values are written as ``null`` and read back as NaN. A model file is untrusted
input: :func:`history_from_json` checks names, types and lengths and raises
:class:`~p2pboost.exceptions.ModelError` for anything else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from p2pboost.exceptions import ModelError

__all__ = ["History", "history_from_json", "history_to_json"]

#: ``history[set name][metric name]`` is the metric after each round, in order.
History = dict[str, dict[str, list[float]]]

#: Longest name accepted for an evaluation set or a metric (a sanity bound on untrusted files).
_MAX_NAME = 200


def history_to_json(history: Mapping[str, Mapping[str, list[float]]]) -> dict[str, Any]:
    """A JSON-ready copy: non-finite values become ``None``."""
    return {
        name: {
            metric: [float(v) if math.isfinite(v) else None for v in values]
            for metric, values in scores.items()
        }
        for name, scores in history.items()
    }


def history_from_json(data: Any, n_rounds: int) -> History:
    """Check and rebuild a history; ``None`` (older files) gives an empty one.

    Every list may hold at most ``n_rounds`` values: a model cannot have been evaluated on
    more rounds than it has.
    """
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ModelError("invalid model history: expected an object")
    return {_name(name): _scores(scores, n_rounds) for name, scores in data.items()}


def _scores(scores: Any, n_rounds: int) -> dict[str, list[float]]:
    if not isinstance(scores, dict):
        raise ModelError("invalid model history: expected an object of metrics per set")
    return {_name(metric): _values(values, n_rounds) for metric, values in scores.items()}


def _values(values: Any, n_rounds: int) -> list[float]:
    if not isinstance(values, list) or len(values) > n_rounds:
        raise ModelError(
            f"invalid model history: expected a list of at most {n_rounds} values per metric"
        )
    out = []
    for v in values:
        if v is None:
            out.append(math.nan)
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out.append(float(v))
        else:
            raise ModelError("invalid model history: values must be numbers or null")
    return out


def _name(name: Any) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_NAME:
        raise ModelError("invalid model history: bad set or metric name")
    return name
