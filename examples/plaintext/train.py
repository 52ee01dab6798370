"""Train the plaintext core, evaluate it, save it, load it back and check the predictions.

Run from the repository root: ``.venv/bin/python examples/plaintext/train.py [OUT_DIR]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.estimators import GBDTClassifier
from p2pboost.gbdt.metrics import auc


def main(out_dir: Path) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=1 / 3, random_state=0)
    X_train, X_valid, y_train, y_valid = train_test_split(
        X_train, y_train, test_size=0.2, random_state=0
    )
    model = GBDTClassifier(
        n_estimators=200, max_depth=4, learning_rate=0.1, early_stopping_rounds=10
    )
    model.fit(X_train, y_train, eval_set=[(X_valid, y_valid)])
    proba = model.predict_proba(X_test)[:, 1]
    print(f"trees kept: {model.booster_.n_rounds}, test AUC: {auc(y_test, proba):.4f}")

    top = np.argsort(model.feature_importances_)[::-1][:3]
    print("most important features (by total gain):", top.tolist())

    path = out_dir / "breast.json"
    model.booster_.save(path)
    reloaded = Booster.load(path)
    same = np.array_equal(reloaded.predict(X_test), model.booster_.predict(X_test))
    print(f"saved to {path}; reloaded model predicts identically: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
