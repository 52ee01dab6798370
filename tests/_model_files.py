"""Real model files of each kind for the inspect/report tests, trained quickly on small data.

The hetero pair comes from an actual federated training (guest ``a``, host ``b``, in-memory
transport, 1024-bit keys by explicit opt-in, a thread pool) so the tests see what
``guest_train`` really writes, history included; the booster from the plaintext core with an
evaluation set and early stopping.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer

from p2pboost.crypto.paillier import generate_keypair
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.callbacks import EarlyStopping, RecordEvaluation
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import federate

#: The guest holds the first GUEST_COLUMNS columns of the breast-cancer data, the host the rest.
GUEST_COLUMNS = 10
HETERO_PARAMS = BoostParams(n_estimators=4, max_depth=3, max_bin=16)


@dataclass(frozen=True)
class ModelFiles:
    guest: Path
    host: Path
    booster: Path
    guest_model: GuestModel
    host_model: HostModel
    booster_model: Booster
    #: What a RecordEvaluation callback saw during the hetero training.
    guest_record: dict[str, dict[str, list[float]]]


def breast(rows: int = 240) -> tuple[np.ndarray, np.ndarray]:
    X, y = load_breast_cancer(return_X_y=True)
    return X[:rows], y[:rows].astype(np.float64)


def make_model_files(folder: Path) -> ModelFiles:
    """Train the three kinds of model and save them in ``folder``."""
    X, y = breast()
    guest, host, record = asyncio.run(_federated(X, y))
    booster = _plaintext(X, y)
    paths = folder / "guest.json", folder / "host.json", folder / "booster.json"
    guest.save(paths[0])
    host.save(paths[1])
    booster.save(paths[2])
    return ModelFiles(*paths, guest, host, booster, record.history)


async def _federated(
    X: np.ndarray, y: np.ndarray
) -> tuple[GuestModel, HostModel, RecordEvaluation]:
    keys = generate_keypair(1024, allow_insecure=True)
    Xg, Xh = X[:, :GUEST_COLUMNS], X[:, GUEST_COLUMNS:]
    record = RecordEvaluation()
    with ThreadPoolExecutor(2) as pool:
        async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:
            fed = await federate(
                c,
                Xg,
                y,
                [Xh],
                HETERO_PARAMS,
                pool,
                keys,
                eval_guest=[(Xg, y)],
                eval_hosts=[[Xh]],
                callbacks=[record],
            )
    return fed.guest, fed.hosts[0], record


def _plaintext(X: np.ndarray, y: np.ndarray) -> Booster:
    """Early stopping on a held-out half, so ``best_iteration`` is set and history is longer."""
    half = X.shape[0] // 2
    return train(
        BoostParams(n_estimators=60, max_depth=3, learning_rate=0.5),
        X[:half],
        y[:half],
        eval_sets=[(X[:half], y[:half]), (X[half:], y[half:])],
        eval_names=["train", "valid"],
        eval_metrics=["logloss", "auc"],
        callbacks=[EarlyStopping(3, metric="logloss")],
    )
