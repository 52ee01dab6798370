"""The ``scaling`` prediction of the ``hetero``, ``scale`` and ``psi`` benchmarks: the run's
task trace (:mod:`p2pboost.workers._trace`) replayed on 8 to 64 workers per party
(:mod:`benchmarks._schedule`, whose docstring states the model)."""

from __future__ import annotations

import argparse
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from benchmarks._schedule import WIDTHS, replay, scaling, tasks_from_trace
from p2pboost.workers import read_trace

__all__ = [
    "DEFAULT_GBPS",
    "Prediction",
    "add_bandwidth_argument",
    "add_trace_workers_argument",
    "bandwidth",
    "predict",
    "rows",
]

#: The network between two parties' machines the prediction assumes (Gbit/s): a data-centre
#: link, about what TLS over loopback carries on these machines.
DEFAULT_GBPS = 10.0


def add_bandwidth_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bandwidth-gbps",
        type=float,
        default=DEFAULT_GBPS,
        help="network between parties assumed by the scaling prediction, Gbit/s "
        f"(default {DEFAULT_GBPS:g}; 0: instant)",
    )


def add_trace_workers_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace-workers",
        type=int,
        default=None,
        metavar="N",
        help="the parties cut their work for N workers (a host's shards, the crypto engine's "
        "pieces, chunks in flight) while running on --workers processes, so the trace the "
        "scaling prediction replays holds the tasks an N-worker party would run "
        "(default: --workers)",
    )


def bandwidth(gbps: float) -> float | None:
    """Bytes per second for ``gbps`` Gbit/s (None: an instant network)."""
    return gbps * 1e9 / 8 if gbps > 0 else None


@dataclass(frozen=True)
class Prediction:
    """What the replay of one run's trace predicts, per unit (a tree, or the whole PSI)."""

    #: ``{"8": {key: seconds, "efficiency": e, "path": {...}}, ...}``: the JSON object.
    scaling: dict[str, dict[str, Any]]
    #: The replay at the run's own number of workers (what this machine would do if every
    #: worker had a core of its own and each party a machine).
    at_run: float
    workers: int
    #: party -> (tasks, CPU seconds of its tasks)
    work: dict[str, tuple[int, float]]


def predict(
    directory: str | os.PathLike[str],
    *,
    start: float,
    stop: float,
    units: float,
    workers: int,
    bandwidth: float | None,
    key: str = "s_per_tree",
) -> Prediction:
    """Replay the trace in ``directory`` of a run timed from ``start`` to ``stop`` (wall
    clock); seconds are divided by ``units``."""
    records = [r for r in read_trace(directory) if start <= r.submitted <= stop]
    tasks = tasks_from_trace(records)
    work: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for t in tasks:
        work[t.party][0] += 1
        work[t.party][1] += t.duration
    at_run = replay(tasks, workers, start=start, stop=stop, bandwidth=bandwidth) / units
    return Prediction(
        scaling=scaling(
            tasks, start=start, stop=stop, units=units, widths=WIDTHS, bandwidth=bandwidth, key=key
        ),
        at_run=at_run,
        workers=workers,
        work={p: (int(n), float(cpu)) for p, (n, cpu) in sorted(work.items())},
    )


def rows(label: str, p: Prediction, measured: float, unit: str) -> list[tuple[str, Any]]:
    """Table rows: the traced work, the replay at the run's width beside the measured time,
    then each width's prediction (``label`` before each, if any)."""
    label = f"{label} " if label else ""
    out: list[tuple[str, Any]] = [
        (
            f"{label}traced tasks (CPU s)",
            ", ".join(f"{party} {n} ({cpu:.2f})" for party, (n, cpu) in p.work.items()),
        ),
        (
            f"{label}replayed s/{unit} at {p.workers} workers (measured {measured:.3g})",
            p.at_run,
        ),
    ]
    for width, entry in p.scaling.items():
        seconds = next(v for k, v in entry.items() if k not in ("efficiency", "path"))
        path = entry["path"]
        out.append(
            (
                f"{label}predicted s/{unit} at W={width} (efficiency; tasks, waits, own, network)",
                f"{seconds:.4g} ({entry['efficiency']:.3f}; "
                + ", ".join(f"{path[k]:.3g}" for k in ("tasks", "waits", "own", "network"))
                + ")",
            )
        )
    return out
