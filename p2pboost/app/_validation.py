"""Validation rows of vertical training run from the party files (``[data] valid_path``).

A vertical learning curve on the training rows always falls, so it cannot say when to stop.
Each party may name a second file of held-out rows in ``[data] valid_path``: the guest's with
the label, each host's with its features of the same samples. The rows are aligned like the
training rows, by a second PSI in its own session (the ids in the open never leave a party),
so the guest's and every host's validation rows are the same samples in the same order
before training starts; the training protocol then carries them as one more evaluation set
(the hosts answer one bit per row and split node for it, as for the training rows), and the
guest's ``[train] eval_metric`` and ``early_stopping_rounds`` act on it.

Whether a validation file is given is one of the settings the parties agree on before the run
(:func:`~p2pboost.app._plan.shared_settings`): a guest with validation rows and a host
without would otherwise meet only at the protocol's hello, with a message about set sizes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.app._tables import Table
from p2pboost.app.config import PartyConfig, Role
from p2pboost.gbdt.binning import is_sparse

__all__ = ["VALID", "EvalSets", "eval_sets", "subset", "valid_rows"]

#: The validation set's name in the history, the progress line and the model file.
VALID = "valid"
#: The training rows' name (``[train] eval_train``).
TRAIN = "train"


def subset(table: Table, keep: npt.NDArray[np.int64]) -> Table:
    """``table``'s rows at ``keep``, in that order (the PSI's positions, guest's order)."""
    y = None if table.y is None else table.y[keep]
    return Table(table.ids[keep], table.X[keep], y, table.features)


@dataclass(frozen=True, slots=True)
class EvalSets:
    """The evaluation sets of one party's run, in the order every party passes them: the
    training rows (when ``eval_train``), then the validation rows (when given)."""

    names: list[str]
    guest: list[tuple[Any, Any]]
    host: list[Any]

    @property
    def has_valid(self) -> bool:
        return VALID in self.names


def eval_sets(train: Table, valid: Table | None, eval_train: bool) -> EvalSets:
    """Training then validation rows; a host's entries are its features only (``host``), a
    guest's are ``(X, y)`` pairs (``guest``, empty for a host's tables without labels)."""
    tables: Sequence[tuple[str, Table]] = [
        *([(TRAIN, train)] if eval_train else []),
        *([(VALID, valid)] if valid is not None else []),
    ]
    return EvalSets(
        names=[name for name, _ in tables],
        guest=[(t.X, t.y) for _, t in tables if t.y is not None],
        host=[t.X for _, t in tables],
    )


async def valid_rows(
    config: PartyConfig,
    table: Table,
    read: Callable[..., Awaitable[Table]],
    align: Callable[[npt.NDArray[Any]], Awaitable[npt.NDArray[np.int64]]],
) -> Table | None:
    """The party's validation rows (``[data] valid_path``; None without one), read by the
    training columns' names (``read``: the runner's reader) and, unless ``train.psi`` is off
    (the files are aligned already, like the training rows), put in the guest's order by
    ``align`` (a PSI of their own)."""
    path: Path | None = config.data.valid_path if config.data is not None else None
    if path is None:
        return None
    rows = await read(
        require_label=config.role is Role.GUEST,
        path=path,
        model_features=table.features,
        sparse=is_sparse(table.X),
    )
    if not config.train.psi:
        return rows
    return subset(rows, await align(rows.ids))
