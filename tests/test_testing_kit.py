"""The public federation kit (p2pboost.testing): the time factor and a local federation."""

from __future__ import annotations

import pytest

from p2pboost.testing import MemoryFabric, local_federation, time_factor


def test_time_factor_defaults_to_one_and_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("P2PBOOST_TIME_FACTOR", raising=False)
    assert time_factor() == 1.0
    monkeypatch.setenv("P2PBOOST_TIME_FACTOR", "2.5")
    assert time_factor() == 2.5


@pytest.mark.parametrize("raw", ["fast", "0.5", "inf", "nan"])
def test_a_time_factor_that_would_shrink_the_bounds_is_refused(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("P2PBOOST_TIME_FACTOR", raw)
    with pytest.raises(ValueError, match="P2PBOOST_TIME_FACTOR"):
        time_factor()


async def test_a_local_federation_meshes_every_party_and_carries_messages() -> None:
    async with local_federation(MemoryFabric(), ["guest", "host-a", "host-b"]) as fed:
        assert all(p.connected for node in fed.nodes.values() for p in node.stats().peers.values())
        async with (
            fed["guest"].session("s", peers=["host-a", "host-b"]) as guest,
            fed["host-a"].session("s", peers=["guest"]) as a,
            fed["host-b"].session("s", peers=["guest"]) as b,
        ):
            await guest.channel("host-a").send({"to": "a"})
            await guest.channel("host-b").send({"to": "b"})
            assert await a.channel("guest").recv() == {"to": "a"}
            assert await b.channel("guest").recv() == {"to": "b"}
        assert fed.transports["guest"].kill_all() == 2  # one live connection per peer
