"""A spy on DPBoost's row rule for the federated-equals-core DP tests: how many of the rows
carried into a tree (filtered by an earlier tree of its ensemble) the tree used, so that a
test can show its run carried rows, not only that the federation and the core agree."""

from __future__ import annotations

import numpy as np
import pytest

from p2pboost.gbdt import privacy


def spy_carried_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Watch every :func:`~p2pboost.gbdt.privacy.tree_rows` call (the core's and every
    client's, in this process): the list gets, per call, the carried rows the tree used."""
    used: list[int] = []
    real = privacy.tree_rows

    def spy(
        plan: privacy.TreePlan,
        keys: np.ndarray | None,
        grad: np.ndarray,
        gdf: bool,
        carried: np.ndarray | None = None,
    ) -> privacy.TreeRows:
        picked = real(plan, keys, grad, gdf, carried)
        used.append(0 if carried is None else int(np.count_nonzero(carried[picked.sample])))
        return picked

    monkeypatch.setattr(privacy, "tree_rows", spy)
    return used
