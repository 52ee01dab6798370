"""Write the example's CSVs from scikit-learn's bundled breast-cancer data (569 patients).

The columns are split vertically, as between two organisations that know the same people:

* ``guest.csv``: the guest's training rows: ``id``, the label ``y`` (1 = benign) and the ten
  "mean" measurements. Every third patient is held out of training.
* ``guest_test.csv``: the held-out patients (same columns), scored by ``p2pboost predict``; the
  label is kept so that the guest can report the test AUC.
* ``host.csv``: ``id`` and the twenty "error" and "worst" measurements, in another order, for
  every patient but a few, so the parties' id lists differ and PSI has work to do.

Usage: ``python make_data.py [guest|host]`` writes that party's files (default: both). On two
laptops each runs it for its own party only; neither ever sees the other's file.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer

HERE = Path(__file__).resolve().parent
GUEST_FEATURES = 10
#: Training patients the host has no record of (PSI leaves them out of training).
HOST_MISSING = 20


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
    rng = np.random.default_rng(7)
    test = np.arange(len(y)) % 3 == 0
    if "guest" in parties:
        header = ["id", "y", *names[:GUEST_FEATURES]]
        Xg = X[:, :GUEST_FEATURES]
        for file, rows in (("guest.csv", ~test), ("guest_test.csv", test)):
            body = ([ids[i], int(y[i]), *Xg[i]] for i in np.flatnonzero(rows))
            write_csv(HERE / file, header, body)
    if "host" in parties:
        missing = rng.choice(np.flatnonzero(~test), HOST_MISSING, replace=False)
        keep = rng.permutation(np.setdiff1d(np.arange(len(y)), missing))
        rows = ([ids[i], *X[i, GUEST_FEATURES:]] for i in keep)
        write_csv(HERE / "host.csv", ["id", *names[GUEST_FEATURES:]], rows)


if __name__ == "__main__":
    chosen = sys.argv[1:] or ["guest", "host"]
    unknown = set(chosen) - {"guest", "host"}
    if unknown:
        sys.exit(f"usage: python make_data.py [guest|host] (unknown: {', '.join(unknown)})")
    main(chosen)
