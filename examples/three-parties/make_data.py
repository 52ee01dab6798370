"""Write the example's CSVs from scikit-learn's bundled breast-cancer data (569 patients).

Three organisations know the same patients, each a different third of the 30 measurements:

* ``guest.csv``: ``id``, the label ``y`` (1 = benign) and the ten "mean" measurements of the
  training patients; ``guest_test.csv``: the same for every third patient, held out.
* ``host-a.csv``: ``id`` and the ten "error" measurements; ``host-b.csv``: ``id`` and the ten
  "worst" ones. Each host lacks a few patients and lists its rows in its own order, so PSI
  aligns the rows all three parties hold.

Usage: ``python make_data.py [guest|host-a|host-b ...]`` (default: every party).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer

HERE = Path(__file__).resolve().parent
PARTIES = ("guest", "host-a", "host-b")
#: Columns of each party's features.
COLUMNS = {"guest": slice(0, 10), "host-a": slice(10, 20), "host-b": slice(20, 30)}
#: Training patients each host has no record of.
HOST_MISSING = 15


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    print(f"wrote {path.name}")


def main(parties: Sequence[str]) -> None:
    data = load_breast_cancer()
    X, y = np.asarray(data.data), np.asarray(data.target)
    names = [str(n).replace(" ", "_") for n in data.feature_names]
    ids = np.array([f"p{i:04d}" for i in range(len(y))])
    test = np.arange(len(y)) % 3 == 0
    for seed, party in enumerate(PARTIES):
        if party not in parties:
            continue
        cols = COLUMNS[party]
        if party == "guest":
            header = ["id", "y", *names[cols]]
            for file, rows in (("guest.csv", ~test), ("guest_test.csv", test)):
                body = ([ids[i], int(y[i]), *X[i, cols]] for i in np.flatnonzero(rows))
                write_csv(HERE / file, header, body)
            continue
        rng = np.random.default_rng(seed)
        missing = rng.choice(np.flatnonzero(~test), HOST_MISSING, replace=False)
        keep = rng.permutation(np.setdiff1d(np.arange(len(y)), missing))
        body = ([ids[i], *X[i, cols]] for i in keep)
        write_csv(HERE / f"{party}.csv", ["id", *names[cols]], body)


if __name__ == "__main__":
    chosen = sys.argv[1:] or list(PARTIES)
    unknown = set(chosen) - set(PARTIES)
    if unknown:
        sys.exit(f"usage: python make_data.py [{'|'.join(PARTIES)} ...] (unknown: {unknown})")
    main(chosen)
