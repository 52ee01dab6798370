"""The data of ``p2pboost demo`` when it runs on the user's CSVs (see :mod:`p2pboost.app.demo`):
a vertical pair matched by id, or labelled files with the same columns, one per client."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import ConfigError

__all__ = ["LabelledData", "VerticalData", "csv_labelled", "csv_vertical"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, eq=False)
class VerticalData:
    """A vertical split for the hetero demo: the same rows, guest columns and host columns.

    ``describe`` says where the data came from (for the progress lines).
    """

    X_guest: F64
    X_host: F64
    y: F64
    describe: str

    def split(self, seed: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """Train rows, test rows (a seeded 2/3 : 1/3 split)."""
        order = np.random.default_rng(seed).permutation(self.y.size)
        n_test = self.y.size // 3
        return order[n_test:], order[:n_test]


Rows = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True, eq=False)
class LabelledData:
    """Labelled rows with the same features, one part per client (homo) or one (plain).

    ``describe`` says where the data came from (for the progress lines).
    """

    parts: list[tuple[F64, F64]]
    describe: str

    def joined_split(self, seed: int) -> tuple[F64, F64, Rows, Rows]:
        """All parts' rows joined, and the train and test rows: each part split 2/3 : 1/3
        (seeded), so every client keeps its own train rows and gives its test third."""
        X = np.vstack([p[0] for p in self.parts])
        y = np.concatenate([p[1] for p in self.parts])
        train, test, start = [], [], 0
        for i, (_, yp) in enumerate(self.parts):
            order = start + np.random.default_rng(seed + i).permutation(yp.size)
            n_test = yp.size // 3
            test.append(order[:n_test])
            train.append(order[n_test:])
            start += yp.size
        return X, y, np.concatenate(train), np.concatenate(test)

    def client_rows(self, train: Rows) -> list[Rows]:
        """The train rows of each part (in the joined numbering)."""
        bounds = np.cumsum([0] + [p[1].size for p in self.parts]).tolist()
        return [train[(train >= a) & (train < b)] for a, b in itertools.pairwise(bounds)]


def csv_labelled(
    paths: Sequence[str | os.PathLike[str]],
    *,
    id_column: str = "id",
    label_column: str = "y",
) -> LabelledData:
    """CSVs with the same feature columns and a 0/1 label, one per client; the files after
    the first are read by column name in the first one's order (a column one lacks or adds
    fails naming it)."""
    from p2pboost.app._tables import load_table
    from p2pboost.app.config import DataConfig

    parts, features = [], None
    for path in paths:
        table = load_table(
            DataConfig(Path(path), id_column, label_column),
            require_label=True,
            model_features=features,
        )
        y = table.y
        assert y is not None  # require_label
        features = table.features
        if y.size < 10:
            raise ConfigError(f"{path}: {y.size} rows; the demo needs at least 10 per file")
        if not np.isin(y, (0.0, 1.0)).all():
            raise ConfigError(
                f"{path}: the demo trains a binary classifier; {label_column!r} must be 0 or 1"
            )
        parts.append((table.X, y))
    names = ", ".join(
        f"{Path(p).name} ({part[1].size} rows)" for p, part in zip(paths, parts, strict=True)
    )
    n_features = 0 if features is None else len(features)
    return LabelledData(parts, f"{names}; label + {n_features} features")


def csv_vertical(
    guest_csv: str | os.PathLike[str],
    host_csv: str | os.PathLike[str],
    *,
    id_column: str = "id",
    label_column: str = "y",
) -> VerticalData:
    """The rows two CSVs share by ``id_column``; the guest's holds ``label_column`` (0/1).

    The demo runs every party on this machine, so it matches the ids here, in the open;
    ``p2pboost party`` matches them with private set intersection instead.
    """
    from p2pboost.app._tables import load_table
    from p2pboost.app.config import DataConfig

    guest = load_table(DataConfig(Path(guest_csv), id_column, label_column), require_label=True)
    host = load_table(DataConfig(Path(host_csv), id_column), require_label=False)
    if host.ids.dtype.kind != guest.ids.dtype.kind:
        raise ConfigError(
            f"the id columns differ in kind (integers in one file, strings in the other): "
            f"{guest_csv}, {host_csv}"
        )
    _, g, h = np.intersect1d(guest.ids, host.ids, assume_unique=True, return_indices=True)
    if g.size < 10:
        raise ConfigError(
            f"{guest_csv} and {host_csv} share {g.size} ids in column {id_column!r}; the demo "
            "needs at least 10"
        )
    y = guest.y
    assert y is not None  # require_label
    if not np.isin(y, (0.0, 1.0)).all():
        raise ConfigError(
            f"{guest_csv}: the demo trains a binary classifier; {label_column!r} must be 0 or 1"
        )
    return VerticalData(
        guest.X[g],
        host.X[h],
        y[g],
        f"{Path(guest_csv).name} (label + {guest.X.shape[1]} features) and "
        f"{Path(host_csv).name} ({host.X.shape[1]} features), {g.size} ids in common",
    )
