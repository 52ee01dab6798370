"""Peers that break the protocol are refused with an error naming them."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import replace

import numpy as np
import pytest

from p2pboost.crypto.paillier import CiphertextBatch
from p2pboost.exceptions import DeadlineExceeded, InputError, RemoteProtocolError
from p2pboost.gbdt.fixedpoint import choose_grid
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.config import VERSION
from p2pboost.hetero.training.checkpoint import chain_start
from p2pboost.hetero.training.guest import guest_train
from p2pboost.hetero.training.host import host_train
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import CONFIG, Keys

N = 40
RUN = "0" * 32


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    return rng.normal(size=(N, 3)), (rng.random(N) < 0.5).astype(np.float64)


async def test_guest_refuses_a_package_for_a_node_it_did_not_ask(
    pool: Executor, keys: Keys
) -> None:
    X, y = _data()
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:

        async def rogue_host() -> None:
            async with c["b"].session("train", peers=["a"]) as s:
                ctl, grad, info = (s.channel("a", n) for n in ("ctl", "grad", "info"))
                await ctl.send(
                    {
                        "t": "hello",
                        "version": VERSION,
                        "n_rows": N,
                        "n_features": 2,
                        "n_eval": [],
                        "run": "",
                        "chain": [],
                        "init": "",
                        "directions": None,
                        "groups": [],
                    }
                )
                await ctl.recv()  # setup
                await ctl.recv()  # tree
                await grad.recv()  # gradients
                await info.send(
                    {
                        "t": "pkg",
                        "tree": 0,
                        "node": 99,
                        "ids": np.zeros(0, np.uint64),
                        "counts": np.zeros(0, np.int64),
                        "ciphertexts": CiphertextBatch(keys[0].fingerprint, 256, b""),
                        "tokens": None,
                    }
                )
                await asyncio.sleep(5)

        async def guest() -> None:
            async with c["a"].session("train", peers=["b"]) as s:
                await guest_train(
                    s,
                    ["b"],
                    X,
                    y,
                    BoostParams(n_estimators=1),
                    config=replace(CONFIG, workers=1),
                    keys=keys,  # no executor: the protocol starts (and stops) its own pool
                )

        rogue = asyncio.ensure_future(rogue_host())
        with pytest.raises(RemoteProtocolError, match="b: unexpected package for node 99"):
            await guest()
        rogue.cancel()
        await asyncio.gather(rogue, return_exceptions=True)


@pytest.mark.parametrize(
    ("layer", "error"),
    [
        (
            {
                "nodes": np.array([0]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.zeros(1, np.uint8)],
                "grow": True,
            },
            "bitmap must be 5 uint8",
        ),
        (
            {
                "nodes": np.array([3]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.zeros(5, np.uint8)],
                "grow": True,
            },
            "unknown nodes",
        ),
        (
            {
                "nodes": np.array([0]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.full(5, 255, np.uint8)],
                "grow": "yes",
            },
            "'grow' must be a boolean",
        ),
        (
            {
                "nodes": np.array([0]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.full(5, 255, np.uint8)],
                "grow": True,
                "features": [np.ones(3, np.uint8)],  # one mask for two children
            },
            "one feature mask per child expected",
        ),
        (
            {
                "nodes": np.array([0]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.full(5, 255, np.uint8)],
                "grow": True,
                "features": [np.ones(3, np.uint8), np.full(3, 2, np.uint8)],
            },
            "one 0 or 1 per feature",
        ),
        (
            {
                "nodes": np.array([0]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.full(5, 255, np.uint8)],
                "grow": True,
                "features": [np.ones(3, np.uint8), np.ones(3, np.uint8)],
            },
            "column draws per node in a tree that started without",
        ),
        (
            {
                "nodes": np.array([0]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.zeros(0, np.uint8)],
                "grow": True,
                "decided": np.array([0]),  # no Decide came: the host decided nothing
            },
            "leaves out left sets other than the ones decided here",
        ),
        (
            {
                "nodes": np.array([0]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.full(5, 255, np.uint8)],
                "grow": True,
                "decided": np.array([0]),
            },
            "a bitmap for a node the host decided",
        ),
        (
            {
                "nodes": np.array([0]),
                "left": np.array([1]),
                "right": np.array([2]),
                "bitmaps": [np.full(5, 255, np.uint8)],
                "grow": True,
                "decided": np.array([3]),
            },
            "a decided node the layer does not split",
        ),
    ],
)
async def test_host_refuses_a_malformed_layer(
    layer: dict[str, object], error: str, pool: Executor, keys: Keys
) -> None:
    public_key, _ = keys
    X, _ = _data()
    g_grid = choose_grid(np.ones(N), N)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:

        async def rogue_guest() -> None:
            async with c["a"].session("train", peers=["b"]) as s:
                ctl, grad, info = (s.channel("b", n) for n in ("ctl", "grad", "info"))
                await ctl.recv()  # hello
                await ctl.send(
                    {
                        "t": "setup",
                        "version": VERSION,
                        "key": public_key,
                        "max_bin": 8,
                        "min_samples_leaf": 1,
                        "run": RUN,
                        "start": 0,
                        "init": "",
                        "chain": [],
                        "private": 0,
                        "min_child_weight": 1.0,
                        "tokens": False,
                    }
                )
                await ctl.send(
                    {
                        "t": "tree",
                        "tree": 0,
                        "grid": [
                            g_grid.bits,
                            g_grid.magnitude_bits,
                            g_grid.bits,
                            g_grid.magnitude_bits,
                        ],
                        "sample": None,
                        "features": np.ones(3, np.uint8),
                        "chain": chain_start(RUN),
                        "root_features": None,
                        "outputs": 1,
                    }
                )
                cts = [public_key.encrypt(1) for _ in range(N)]
                await grad.send(
                    {
                        "t": "chunk",
                        "start": 0,
                        "ct": CiphertextBatch.from_ciphertexts(public_key, cts),
                    }
                )
                await info.recv()  # the root package
                await ctl.send(
                    {"t": "layer", "features": [], "decided": np.zeros(0, np.int64), **layer}
                )
                await asyncio.sleep(5)

        async def host() -> None:
            async with c["b"].session("train", peers=["a"]) as s:
                await host_train(s, "a", X, executor=pool, workers=1)

        rogue = asyncio.ensure_future(rogue_guest())
        with pytest.raises(RemoteProtocolError, match=f"a: .*{error}"):
            await host()
        rogue.cancel()
        await asyncio.gather(rogue, return_exceptions=True)


async def test_guest_names_a_host_that_never_starts_training(pool: Executor, keys: Keys) -> None:
    """Host ``c`` is connected but runs nothing (another task, other settings): the guest names
    it after ``hello_timeout`` instead of waiting until the node gives up on the session."""
    X, y = _data()
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:

        async def host() -> None:
            async with c["b"].session("train", peers=["a"]) as s:
                await host_train(s, "a", X[:, 1:], executor=pool, workers=1)

        async def guest() -> None:
            async with c["a"].session("train", peers=["b", "c"]) as s:
                await guest_train(
                    s,
                    ["b", "c"],
                    X[:, :1],
                    y,
                    BoostParams(n_estimators=1),
                    config=replace(CONFIG, hello_timeout=0.5),
                    executor=pool,
                    keys=keys,
                )

        waiting_host = asyncio.ensure_future(host())
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(DeadlineExceeded, match=r"host\(s\) \['c'\] did not start training"):
            await guest()
        assert asyncio.get_running_loop().time() - t0 < 5.0
        waiting_host.cancel()
        await asyncio.gather(waiting_host, return_exceptions=True)
    with pytest.raises(InputError, match="hello_timeout"):
        replace(CONFIG, hello_timeout=0)


async def test_host_sparse_setting_is_checked() -> None:
    with pytest.raises(InputError, match="sparse must be True, False or 'auto'"):
        await host_train(None, "a", np.zeros((3, 2)), sparse="maybe")  # type: ignore[arg-type]


async def test_guest_bins_its_rows_while_it_waits_for_the_hellos(
    pool: Executor, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guest's binning and digest run in a thread started before the hellos: a host that
    starts late finds them done, and a host with other rows is still refused by name."""
    import threading
    import time

    from p2pboost.hetero.training import guest as guest_module

    X, y = _data()
    seen: dict[str, float | str] = {}
    binning = guest_module._bin

    def spy(*args: object) -> None:
        seen["thread"] = threading.current_thread().name
        binning(*args)  # type: ignore[arg-type]
        seen["binned"] = time.monotonic()

    monkeypatch.setattr(guest_module, "_bin", spy)
    async with local_federation(MemoryFabric(), ["a", "b"], TRAINING) as c:

        async def late_host(rows: int) -> None:
            await asyncio.sleep(0.5)
            seen["host"] = time.monotonic()
            async with c["b"].session("train", peers=["a"]) as s:
                await host_train(s, "a", X[:rows, 1:], executor=pool, workers=1)

        async def guest() -> None:
            async with c["a"].session("train", peers=["b"]) as s:
                await guest_train(
                    s,
                    ["b"],
                    X[:, :1],
                    y,
                    BoostParams(n_estimators=1, max_depth=2),
                    config=CONFIG,
                    executor=pool,
                    keys=keys,
                )

        await asyncio.gather(guest(), late_host(N))
        assert seen["thread"] != threading.main_thread().name
        assert isinstance(seen["binned"], float)
        assert isinstance(seen["host"], float)
        assert seen["binned"] < seen["host"]  # done while the host had not even started

        host = asyncio.ensure_future(late_host(N - 1))
        with pytest.raises(InputError, match="host 'b' has 39 rows, the guest 40"):
            await guest()
        host.cancel()
        await asyncio.gather(host, return_exceptions=True)
