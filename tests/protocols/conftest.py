"""Fixtures for protocol tests: a throw-away federation CA for real TLS runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2pboost import certs


@pytest.fixture(scope="session")
def node_federation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Certificates for parties a, b and c (the ids the node test cluster uses)."""
    out = tmp_path_factory.mktemp("protocol-federation")
    certs.init(out, ["a", "b", "c"])
    return out
