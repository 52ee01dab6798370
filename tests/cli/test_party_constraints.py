"""Constraints from the party files: the guest's own directions and the run's groups in its
``[train]``, the host's own directions and the same groups in the host's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pboost.gbdt.tree import Tree
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from tests.cli.conftest import FAST_TRAIN, finish, free_port, party_configs, start_cli

GROUPS = '[["g0", "g1", "h3"], ["g2", "h0", "h1"]]'


def _add_to_train(path: Path, lines: str) -> None:
    path.write_text(path.read_text().replace("[train]\n", f"[train]\n{lines}\n", 1))


@pytest.mark.slow
def test_party_files_declare_constraints_on_their_own_features(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    guest_toml, host_toml = party_configs(tmp_path, cert_root, port=free_port(), train=FAST_TRAIN)
    _add_to_train(
        guest_toml,
        f"monotone_constraints = {{g0 = -1, g2 = -1}}\ninteraction_constraints = {GROUPS}",
    )
    _add_to_train(
        host_toml, f"monotone_constraints = {{h3 = -1}}\ninteraction_constraints = {GROUPS}"
    )
    host = start_cli("--quiet", "party", "--config", str(host_toml))
    guest = start_cli("--quiet", "party", "--config", str(guest_toml))
    g_code, _, g_err = finish(guest)
    h_code, _, h_err = finish(host)
    assert (g_code, h_code) == (0, 0), f"guest:\n{g_err}\nhost:\n{h_err}"
    g_model = GuestModel.load(tmp_path / "out-guest" / "model.json")
    h_model = HostModel.load(tmp_path / "out-host" / "model.json")
    assert g_model.params.monotone_constraints == {"g0": -1, "g2": -1}
    names = [*(g_model.feature_names or ()), *(h_model.feature_names or ())]
    groups = [{"g0", "g1", "h3"}, {"g2", "h0", "h1"}]
    trees = joined_trees(g_model, [h_model])
    assert any((t.owner == 1).any() for t in g_model.trees)  # the host took part

    def walk(t: Tree, node: int, used: frozenset[str]) -> None:
        feature = int(t.feature[node])
        if feature < 0:
            assert len(used) <= 1 or any(used <= g for g in groups), used
            return
        now = used | {names[feature]}
        walk(t, int(t.left[node]), now)
        walk(t, int(t.right[node]), now)

    for t in trees:
        walk(t, 0, frozenset())
    # -1 on g0, g2 (guest) and h3 (host): the margin never rises as one of them grows.
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(300, len(names))) * 5 + 10
    for name in ("g0", "g2", "h3"):
        f = names.index(name)
        margins = []
        for v in np.linspace(0, 200, 25):
            Z = rows.copy()
            Z[:, f] = v
            margins.append(sum(t.predict_raw(Z)[:, 0] for t in trees))
        assert (np.diff(np.stack(margins, axis=1), axis=1) <= 0).all(), name
