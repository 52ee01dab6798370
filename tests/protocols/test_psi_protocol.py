"""PSI over real nodes: the result is the set intersection, aligned, and peers are validated."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import InputError, RemoteProtocolError
from p2pboost.protocols.psi import PsiResult, psi_guest, psi_host
from p2pboost.testing import Fabric, MemoryFabric, WebSocketFabric, local_federation


@pytest.fixture(scope="module")
def pool() -> Iterator[Executor]:
    with ProcessPoolExecutor(max_workers=2) as executor:
        yield executor


async def _run(
    fabric: Fabric,
    guest_ids: Sequence[Any],
    host_ids: Mapping[str, Sequence[Any]],
    pool: Executor,
    batch: int = 64,
) -> tuple[PsiResult, dict[str, PsiResult]]:
    # Party ids: "a" is the guest; "b", "c" the hosts (the node fixtures' CA knows a, b, c).
    async with local_federation(fabric, ["a", *host_ids]) as c:

        async def host(h: str) -> PsiResult:
            async with c[h].session("psi-1", peers=["a"]) as s:
                return await psi_host(s, "a", host_ids[h], executor=pool, batch=batch)

        async def guest() -> PsiResult:
            async with c["a"].session("psi-1", peers=list(host_ids)) as s:
                return await psi_guest(s, list(host_ids), guest_ids, executor=pool, batch=batch)

        results = await asyncio.gather(guest(), *(host(h) for h in host_ids))
    return results[0], dict(zip(host_ids, results[1:], strict=True))


@pytest.mark.parametrize("kind", ["memory", "websocket"])
async def test_two_parties_get_the_aligned_intersection(
    kind: str, node_federation: Path, pool: Executor
) -> None:
    fabric = MemoryFabric() if kind == "memory" else WebSocketFabric(node_federation)
    rng = np.random.default_rng(1)
    guest_ids = rng.permutation(1000)[:600].tolist()
    host_ids = rng.permutation(1000)[:500].tolist()
    g, hosts = await _run(fabric, guest_ids, {"b": host_ids}, pool)
    expected = set(guest_ids) & set(host_ids)
    assert g.size == len(expected) == hosts["b"].size
    aligned_guest = [guest_ids[i] for i in g.positions]
    aligned_host = [host_ids[i] for i in hosts["b"].positions]
    assert aligned_guest == aligned_host  # same ids, same order on both sides
    assert set(aligned_guest) == expected
    assert g.peer_sizes == {"b": 500}
    assert hosts["b"].peer_sizes == {"a": 600}


async def test_several_hosts_give_the_intersection_of_all(pool: Executor) -> None:
    guest_ids = list(range(0, 300))
    host_ids = {"b": list(range(100, 400)), "c": list(range(250, 50, -1))}
    g, hosts = await _run(MemoryFabric(), guest_ids, host_ids, pool)
    expected = set(range(100, 251))
    assert {guest_ids[i] for i in g.positions} == expected
    for h, ids in host_ids.items():
        assert [ids[i] for i in hosts[h].positions] == [guest_ids[i] for i in g.positions]


async def test_empty_intersection_is_a_valid_result(pool: Executor) -> None:
    g, hosts = await _run(MemoryFabric(), [1, 2, 3], {"b": [4, 5]}, pool)
    assert g.size == 0
    assert hosts["b"].size == 0


async def test_string_ids_and_duplicates(pool: Executor) -> None:
    g, _ = await _run(MemoryFabric(), ["x", "y", "z"], {"b": ["z", "x", "q"]}, pool)
    assert [["x", "y", "z"][i] for i in g.positions] == ["x", "z"]
    with pytest.raises(InputError, match="unique"):
        await _run(MemoryFabric(), [1, 1, 2], {"b": [1]}, pool)


async def test_a_host_that_sends_too_many_points_is_named(pool: Executor) -> None:
    """A host announcing 2 ids but streaming more is refused, naming the host."""
    async with local_federation(MemoryFabric(), ["a", "b"]) as c:

        async def lying_host() -> None:
            async with c["b"].session("psi-x", peers=["a"]) as s:
                ctl = s.channel("a", "psi")
                await ctl.send({"t": "hello", "v": 1, "n": 2})
                await ctl.recv()
                await s.channel("a", "theirs").send_stream([b"\x09" * 32 * 5])
                await asyncio.sleep(0.5)

        async def guest() -> None:
            async with c["a"].session("psi-x", peers=["b"]) as s:
                await psi_guest(s, ["b"], [1, 2, 3], executor=pool, batch=2)

        host_task = asyncio.create_task(lying_host())
        with pytest.raises(RemoteProtocolError, match="b: host set: more points"):
            await guest()
        host_task.cancel()
        with pytest.raises((asyncio.CancelledError, Exception)):
            await host_task


async def test_bad_arguments_are_input_errors(pool: Executor) -> None:
    async with local_federation(MemoryFabric(), ["a", "b"]) as c:
        async with c["a"].session("psi-y", peers=["b"]) as s:
            with pytest.raises(InputError, match="at least one host"):
                await psi_guest(s, [], [1], executor=pool)
            with pytest.raises(InputError, match="at least one id"):
                await psi_guest(s, ["b"], [], executor=pool)


async def test_workers_cut_the_work_for_a_wider_party(tmp_path: Path) -> None:
    """``workers`` sets how finely each party's blinding is cut (what a party of that many
    workers would run), whatever the executor: the same result in more tasks."""
    from p2pboost.workers import process_pool, read_trace, record_trace

    guest_ids, host_ids = list(range(0, 4000)), list(range(2000, 6000))
    counts = []
    for workers in (1, 8):
        trace = tmp_path / f"w{workers}"
        with record_trace(trace), process_pool(2) as pool:
            async with local_federation(MemoryFabric(), ["a", "b"]) as c:

                async def host(w: int = workers) -> PsiResult:
                    async with c["b"].session("psi-w", peers=["a"]) as s:
                        return await psi_host(s, "a", host_ids, executor=pool, workers=w)

                async def guest(w: int = workers) -> PsiResult:
                    async with c["a"].session("psi-w", peers=["b"]) as s:
                        return await psi_guest(s, ["b"], guest_ids, executor=pool, workers=w)

                g, h = await asyncio.gather(guest(), host())
        assert [guest_ids[i] for i in g.positions] == [host_ids[i] for i in h.positions]
        assert g.size == 2000
        counts.append(sum(r.kind == "blind_blob" for r in read_trace(trace)))
    assert counts[1] > counts[0]


async def test_workers_must_be_positive(pool: Executor) -> None:
    async with local_federation(MemoryFabric(), ["a", "b"]) as c:
        async with c["a"].session("psi-z", peers=["b"]) as s:
            with pytest.raises(InputError, match="workers must be at least 1"):
                await psi_guest(s, ["b"], [1], executor=pool, workers=0)
        async with c["b"].session("psi-z", peers=["a"]) as s:
            with pytest.raises(InputError, match="workers must be at least 1"):
                await psi_host(s, "a", [1], executor=pool, workers=0)
