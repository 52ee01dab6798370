"""Helpers shared by the benchmarks: where the data is, how results are printed."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def data_dir(cli_value: str | None) -> Path:
    """``--data-dir`` if given, else ``$P2PBOOST_DATA``, else ``../shared/data``."""
    path = Path(cli_value or os.environ.get("P2PBOOST_DATA") or DEFAULT_DATA_DIR)
    if not path.is_dir():
        raise SystemExit(f"data directory {path} not found; pass --data-dir or set P2PBOOST_DATA")
    return path


def read_csv(path: Path) -> tuple[list[str], np.ndarray]:
    """Read a numeric CSV with one header line into (column names, float64 matrix)."""
    with path.open() as f:
        header = f.readline().strip().split(",")
    values = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    return header, values


def median_time(fn: Callable[[], Any], repeat: int = 5) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs (these machines are noisy)."""
    import time

    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def print_table(rows: Sequence[tuple[str, Any]], title: str) -> None:
    """Print ``rows`` as a two-column table under ``title``."""
    width = max(len(k) for k, _ in rows)
    print(title)
    print("-" * len(title))
    for key, value in rows:
        shown = f"{value:.6g}" if isinstance(value, float) else str(value)
        print(f"  {key:<{width}}  {shown}")


def emit_json(result: dict[str, Any]) -> None:
    """Print the benchmark's result as the last line: one JSON object."""
    print(json.dumps(result, sort_keys=False), flush=True)
