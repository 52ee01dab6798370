"""``p2pboost binning``: a guest and a host as separate processes over mutual TLS on loopback.

Both run from their party files as ``p2pboost party`` does (PSI alignment first); every WOE
in the guest's table and every IV in its summary must equal the plaintext computation on the
joined rows exactly, and the host's file must hold its own kept names and nothing else.
"""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from p2pboost.app.binning import BinningOptions, run_binning
from p2pboost.app.config import load_config
from p2pboost.exceptions import ConfigError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.woe import bin_counts, select_by_iv, woe_table
from tests.cli.conftest import COMMON, FAST_TRAIN, finish, free_port, party_configs, start_cli


def _columns(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [r["id"] for r in rows], {k: [r[k] for r in rows] for k in rows[0]}


def _plain(tmp_path: Path) -> tuple[list[str], list[str], list[object]]:
    """Every feature's WOE table on the common rows, guest's first (names g*, then h*)."""
    g_ids, g = _columns(tmp_path / "guest.csv")
    h_ids, h = _columns(tmp_path / "host.csv")
    common = [i for i in g_ids if i in set(h_ids)]
    assert len(common) == COMMON
    g_pos = {v: k for k, v in enumerate(g_ids)}
    h_pos = {v: k for k, v in enumerate(h_ids)}
    gi = np.array([g_pos[i] for i in common])
    hi = np.array([h_pos[i] for i in common])
    y = np.array(g["y"], dtype=np.float64)[gi]
    g_names = [k for k in g if k not in ("id", "y")]
    h_names = [k for k in h if k != "id"]
    out: list[object] = []
    for names, cols, rows in ((g_names, g, gi), (h_names, h, hi)):
        X = np.column_stack([np.array(cols[n], dtype=np.float64)[rows] for n in names])
        mapper = BinMapper(32).fit(X)
        data = mapper.transform(X)
        e, ne = bin_counts(data.codes, y, data.n_slots)
        out += woe_table(mapper, e, ne)
    return g_names, h_names, out


@pytest.mark.slow
def test_binning_over_mtls_equals_plaintext_and_hosts_get_their_names(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    guest_toml, host_toml = party_configs(tmp_path, cert_root, port=free_port(), train=FAST_TRAIN)
    host = start_cli("binning", "--config", str(host_toml))
    guest = start_cli("binning", "--config", str(guest_toml), "--top-k", "8")
    g_code, g_out, g_err = finish(guest)
    h_code, _, h_err = finish(host)
    assert (g_code, h_code) == (0, 0), f"guest:\n{g_err}\nhost:\n{h_err}"
    summary = json.loads(g_out.strip().splitlines()[-1])
    assert (summary["task"], summary["rows"], summary["kept"]) == ("binning", COMMON, 8)

    g_names, h_names, plain = _plain(tmp_path)
    with (tmp_path / "out-guest" / "binning.csv").open(newline="") as fh:
        table = list(csv.DictReader(fh))
    labels = [("guest", n) for n in g_names] + [("host", f"#{j}") for j in range(len(h_names))]
    for (party, name), want in zip(labels, plain, strict=True):
        rows = [r for r in table if (r["party"], r["feature"]) == (party, name)]
        assert [int(r["events"]) for r in rows] == want.events.tolist()  # type: ignore[attr-defined]
        assert [float(r["woe"]) for r in rows] == want.woe.tolist()  # type: ignore[attr-defined]
    ivs = [p.iv for p in plain]  # type: ignore[attr-defined]
    got = json.loads((tmp_path / "out-guest" / "binning.json").read_text())
    assert [f["iv"] for f in got["features"]] == ivs  # exact
    kept = select_by_iv(ivs, top_k=8).tolist()
    want_host = [h_names[i - len(g_names)] for i in kept if i >= len(g_names)]
    host_file = json.loads((tmp_path / "out-host" / "binning.json").read_text())
    assert host_file == {"party": "host", "kept": want_host}
    assert got["kept"]["host"] == [f"#{i - len(g_names)}" for i in kept if i >= len(g_names)]
    assert "PSI: 531 common ids" in h_err


def test_binning_refuses_to_replace_its_files_without_force(
    tmp_path: Path, cert_root: Path, vertical: tuple[Path, Path]
) -> None:
    guest_toml, _ = party_configs(tmp_path, cert_root, port=free_port())
    (tmp_path / "out-guest").mkdir()
    (tmp_path / "out-guest" / "binning.json").write_text("{}")
    config = load_config(guest_toml)
    with pytest.raises(ConfigError, match=r"binning\.json exists: pass --force"):
        asyncio.run(run_binning(config, BinningOptions()))
