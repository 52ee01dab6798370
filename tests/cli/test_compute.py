"""``[compute]``: parties started from the command line put their work on a TLS Dask cluster
and train the model they train on their own pools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost import certs
from p2pboost.hetero.model import GuestModel, HostModel, joined_trees
from tests.cli.conftest import free_port, party_configs, write_vertical_csvs
from tests.cli.test_party import _run_pair


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """A 2-worker TLS LocalCluster with a CA of its own; the client identity's directory."""
    from p2pboost.workers import local_cluster

    out = tmp_path_factory.mktemp("compute-certs")
    certs.init(out, ["node", "party"])
    with local_cluster(2, out / "node") as running:
        yield running, out / "party"


def _train(directory: Path, cert_root: Path, compute: str = "") -> list[Any]:
    """Train guest and host from their config files (plus ``compute``); the joined trees."""
    directory.mkdir()
    write_vertical_csvs(directory)
    guest_toml, host_toml = party_configs(directory, cert_root, port=free_port())
    for toml in (guest_toml, host_toml):
        toml.write_text(toml.read_text() + compute)
    _, g_err, h_err = _run_pair(
        ["party", "--config", str(guest_toml)], ["party", "--config", str(host_toml)]
    )
    if compute:
        assert "compute: 2 workers" in g_err
        assert "compute: 2 workers" in h_err
    guest = GuestModel.load(directory / "out-guest" / "model.json")
    host = HostModel.load(directory / "out-host" / "model.json")
    return joined_trees(guest, [host])


@pytest.mark.slow
def test_parties_on_a_cluster_train_the_model_of_their_pools(
    tmp_path: Path, cert_root: Path, cluster: tuple[Any, Path]
) -> None:
    running, party = cluster
    compute = f'\n[compute]\nscheduler = "{running.scheduler_address}"\ntls = "{party}"\n'
    on_cluster = _train(tmp_path / "cluster", cert_root, compute)
    on_pools = _train(tmp_path / "pools", cert_root)
    assert len(on_cluster) == len(on_pools) > 0
    for a, b in zip(on_cluster, on_pools, strict=True):
        np.testing.assert_array_equal(a.feature, b.feature)
        np.testing.assert_array_equal(a.threshold, b.threshold)
        np.testing.assert_array_equal(a.value, b.value)


def test_an_unreachable_cluster_fails_the_party_naming_it(
    tmp_path: Path,
    cert_root: Path,
    cluster: tuple[Any, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from p2pboost.app.cli import main

    _, party = cluster
    write_vertical_csvs(tmp_path)
    _, host_toml = party_configs(tmp_path, cert_root, port=free_port())
    address = f"tls://127.0.0.1:{free_port()}"
    compute = f'\n[compute]\nscheduler = "{address}"\ntls = "{party}"\nconnect_timeout = 1\n'
    host_toml.write_text(host_toml.read_text() + compute)
    assert main(["party", "--config", str(host_toml)]) == 1
    assert f"cannot reach the compute cluster at {address}" in capsys.readouterr().err
