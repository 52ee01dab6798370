"""PSI reports its progress: points blinded so far of the points each side blinds."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from p2pboost.protocols.psi import psi_guest, psi_host
from p2pboost.testing import MemoryFabric, local_federation


async def test_both_sides_count_every_point_they_blind_up_to_the_total() -> None:
    guest_ids = [f"id{i}" for i in range(300)]
    host_ids = {"b": [f"id{i}" for i in range(100, 500)], "c": [f"id{i}" for i in range(250)]}
    seen: dict[str, list[tuple[int, int]]] = {p: [] for p in ("a", "b", "c")}
    with ThreadPoolExecutor(2) as pool:
        async with local_federation(MemoryFabric(), ["a", "b", "c"]) as fed:

            async def host(h: str) -> None:
                async with fed[h].session("psi", peers=["a"]) as s:
                    await psi_host(
                        s,
                        "a",
                        host_ids[h],
                        executor=pool,
                        batch=64,
                        progress=lambda d, t: seen[h].append((d, t)),
                    )

            async def guest() -> None:
                async with fed["a"].session("psi", peers=["b", "c"]) as s:
                    await psi_guest(
                        s,
                        ["b", "c"],
                        guest_ids,
                        executor=pool,
                        batch=64,
                        progress=lambda d, t: seen["a"].append((d, t)),
                    )

            await asyncio.gather(guest(), host("b"), host("c"))
    # The guest blinds its own set once and each host's; a host the guest's set and its own.
    assert {t for _, t in seen["a"]} == {300 + 400 + 250}
    assert {t for _, t in seen["b"]} == {300 + 400}
    assert {t for _, t in seen["c"]} == {300 + 250}
    for party, ticks in seen.items():
        done = [d for d, _ in ticks]
        assert done == sorted(done), party
        assert done[-1] == ticks[-1][1], party  # every point counted, none twice
        assert len(done) > 3, party  # in batches, not once at the end
