"""Write the example's CSVs from scikit-learn's bundled breast-cancer data (569 patients).

Horizontal federation: three clinics measure the same 30 features on *different* patients.
The patients are dealt out to the clinics unevenly (about 45%, 35% and 20%), and each clinic
keeps every fourth of its patients aside as its own test set:

* ``clinic-<x>.csv``: ``id``, the label ``y`` (1 = benign) and the 30 measurements;
* ``clinic-<x>_test.csv``: the same columns for the clinic's held-out patients.

The server holds no data. Usage: ``python make_data.py [clinic-a|clinic-b|clinic-c ...]``
(default: every clinic).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer

HERE = Path(__file__).resolve().parent
CLINICS = ("clinic-a", "clinic-b", "clinic-c")
SHARES = (0.45, 0.35, 0.20)


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    print(f"wrote {path.name}")


def main(clinics: Sequence[str]) -> None:
    data = load_breast_cancer()
    X, y = np.asarray(data.data), np.asarray(data.target)
    header = ["id", "y", *(str(n).replace(" ", "_") for n in data.feature_names)]
    owner = np.random.default_rng(3).choice(len(CLINICS), size=len(y), p=SHARES)
    for k, clinic in enumerate(CLINICS):
        if clinic not in clinics:
            continue
        rows = np.flatnonzero(owner == k)
        test = np.arange(rows.size) % 4 == 0
        for file, part in ((f"{clinic}.csv", rows[~test]), (f"{clinic}_test.csv", rows[test])):
            body = ([f"{clinic}-{i:04d}", int(y[i]), *X[i]] for i in part)
            write_csv(HERE / file, header, body)


if __name__ == "__main__":
    chosen = sys.argv[1:] or list(CLINICS)
    unknown = set(chosen) - set(CLINICS)
    if unknown:
        sys.exit(f"usage: python make_data.py [{'|'.join(CLINICS)} ...] (unknown: {unknown})")
    main(chosen)
