"""Tiny vertical data sets in the layout of the benchmarks' data directory, for their tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_csv(path: Path, header: list[str], rows: np.ndarray) -> None:
    """A numeric CSV with a header line (six decimals, as the data directory's files)."""
    lines = [",".join(header)] + [",".join(f"{v:.6f}" for v in row) for row in rows]
    path.write_text("\n".join(lines))


def write_tiny_vertical(
    directory: Path, *, rows: int, guest: int, host: int, host_label_column: int
) -> Path:
    """``breast_hetero_guest.csv`` (id, y, x0..) and ``breast_hetero_host.csv`` (id, x0..,
    rows in another order: a join must use the ids) in ``directory``. The label is guest
    column 0 plus host column 0, minus host column ``host_label_column`` when it is not 0,
    positive: it needs both parties."""
    rng = np.random.default_rng(0)
    ids = rng.permutation(rows).astype(np.float64)
    g, h = rng.normal(size=(rows, guest)), rng.normal(size=(rows, host))
    score = g[:, 0] + h[:, 0] - (h[:, host_label_column] if host_label_column else 0.0)
    y = (score > 0).astype(np.float64)
    write_csv(
        directory / "breast_hetero_guest.csv",
        ["id", "y", *(f"x{j}" for j in range(guest))],
        np.column_stack([ids, y, g]),
    )
    order = rng.permutation(rows)
    write_csv(
        directory / "breast_hetero_host.csv",
        ["id", *(f"x{j}" for j in range(host))],
        np.column_stack([ids, h])[order],
    )
    return directory
