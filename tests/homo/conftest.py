"""Shared pieces of the homo tests: a star of nodes (server + clients), data, certificates."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from p2pboost import certs
from p2pboost.gbdt.booster import Booster
from p2pboost.homo._messages import Reply
from p2pboost.homo.client import client_train
from p2pboost.homo.config import VERSION, ClientIdentity, HomoConfig, HomoPhase, HomoResult
from p2pboost.homo.server import server_train
from p2pboost.net.node import Node, Session
from p2pboost.testing import FAST, FaultyTransport, wait_until
from p2pboost.transports.memory import MemoryNetwork, MemoryTransport

SERVER = "server"
CLIENTS = ["c1", "c2", "c3", "c4", "c5"]

#: Relaxed heart-beats: training's CPU bursts on shared cores must not look like dead links.
TRAINING = replace(
    FAST, heartbeat_interval=0.2, heartbeat_timeout=5.0, reconnect_timeout=10.0, close_timeout=1.0
)


@pytest.fixture(scope="session")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("homo-federation")
    certs.init(out, [SERVER, *CLIENTS])
    return out


def bundled(
    name: str,
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], tuple[np.ndarray, np.ndarray]]:
    """Data bundled with scikit-learn (no download), split like FATE's homo files: two clients
    with disjoint rows and the same features, plus a disjoint test set (a fifth of the rows).

    ``breast``: binary (569 rows, 30 features); ``wine``: 3 classes (178 rows, 13 features);
    ``diabetes``: regression (442 rows, 10 features).
    """
    from sklearn import datasets

    loaders = {
        "breast": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
        "diabetes": datasets.load_diabetes,
    }
    X, y = loaders[name](return_X_y=True)
    y = np.asarray(y, dtype=np.float64)
    order = np.random.default_rng(0).permutation(len(y))
    n_test = len(y) // 5
    test, rest = order[:n_test], order[n_test:]
    half = len(rest) // 2
    first, second = rest[:half], rest[half:]
    return {"c1": (X[first], y[first]), "c2": (X[second], y[second])}, (X[test], y[test])


@pytest.fixture(scope="session")
def breast() -> list[tuple[np.ndarray, np.ndarray]]:
    parts, _ = bundled("breast")
    return [parts["c1"], parts["c2"]]


@dataclass
class Star:
    server: Node
    clients: dict[str, Node]
    net: MemoryNetwork
    #: Each client's transport: ``faults[c].silent = True`` is its process dying mid-run.
    faults: dict[str, FaultyTransport]


@contextlib.asynccontextmanager
async def star(clients: Sequence[str]) -> AsyncIterator[Star]:
    """A server node and client nodes over the in-memory network (clients dial the server)."""
    net = MemoryNetwork()
    async with contextlib.AsyncExitStack() as stack:
        server = await stack.enter_async_context(
            Node(
                SERVER,
                listen=f"mem://{SERVER}",
                peers=dict.fromkeys(clients),
                transport=MemoryTransport(net, SERVER, allowed_peers=clients),
                config=TRAINING,
            )
        )
        nodes, faults = {}, {}
        for c in clients:
            faults[c] = FaultyTransport(MemoryTransport(net, c, allowed_peers=[SERVER]))
            nodes[c] = await stack.enter_async_context(
                Node(c, peers={SERVER: f"mem://{SERVER}"}, transport=faults[c], config=TRAINING)
            )
        await wait_until(lambda: all(p.connected for p in server.stats().peers.values()))
        yield Star(server, nodes, net, faults)


@dataclass
class Run:
    result: HomoResult | BaseException
    models: dict[str, Booster | BaseException]
    received: list[tuple[str, str, Any]]
    plain: dict[str, dict[int, tuple[str, np.ndarray]]]


async def run_homo(
    parts: dict[str, tuple[np.ndarray, np.ndarray]],
    config: HomoConfig,
    federation: Path,
    *,
    eval_sets: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    hooks: dict[str, Callable[[Reply, HomoPhase], Reply]] | None = None,
    identities: dict[str, ClientIdentity] | None = None,
    n_features: int | None = None,
    init_model: Booster | None = None,
    weights: dict[str, np.ndarray] | None = None,
    tap: Callable[[str, str, Any], None] | None = None,
    **server_options: Any,
) -> Run:
    """Train with one client per entry of ``parts``. ``hooks[c](reply, phase)`` returns what
    ``c`` sends instead of ``reply``; raising :class:`Crash` kills ``c`` there (its task ends
    and its node closes, as when its process dies). ``tap`` sees what the server receives
    too; ``server_options`` go to :func:`server_train` (checkpoint, resume)."""
    received: list[tuple[str, str, Any]] = []
    plain: dict[str, dict[int, tuple[str, np.ndarray]]] = {c: {} for c in parts}
    names = list(parts)
    features = n_features or next(iter(parts.values()))[0].shape[1]
    async with star(names) as s:

        async def server() -> HomoResult:
            async with contextlib.AsyncExitStack() as stack:
                sessions = {
                    c: await stack.enter_async_context(s.server.session(f"homo/{c}", peers=[c]))
                    for c in names
                }

                def record(kind: str, who: str, obj: Any) -> None:
                    received.append((kind, who, obj))
                    if tap is not None:
                        tap(kind, who, obj)

                return await server_train(
                    sessions,
                    config,
                    n_features=features,
                    tap=record,
                    init_model=init_model,
                    **server_options,
                )

        async def client(c: str) -> Booster:
            X, y = parts[c]
            ident = (identities or {}).get(c) or ClientIdentity.from_dir(federation / c)

            def record(r: int, what: str, vec: np.ndarray) -> None:
                plain[c][r] = (what, vec.copy())

            async with s.clients[c].session(f"homo/{c}", peers=[SERVER]) as sess:
                return await client_train(
                    sess,
                    SERVER,
                    X,
                    y,
                    config,
                    identity=ident,
                    me=c,
                    eval_set=(eval_sets or {}).get(c),
                    on_vector=record,
                    before_send=(hooks or {}).get(c),
                    sample_weight=(weights or {}).get(c),
                )

        async def client_or_crash(c: str) -> Booster | BaseException:
            try:
                return await client(c)
            except Crash as exc:
                await s.clients[c].close(flush=False)  # the process is gone
                return exc
            except Exception as exc:
                return exc

        async def server_or_error() -> HomoResult | BaseException:
            try:
                return await server()
            except Exception as exc:
                return exc

        async with asyncio.timeout(100):
            res, models = await asyncio.gather(
                server_or_error(), asyncio.gather(*(client_or_crash(c) for c in names))
            )
    return Run(res, dict(zip(names, models, strict=True)), received, plain)


class Crash(Exception):
    """A simulated client crash."""


def crash_at(tag: str, nth: int, phase: HomoPhase = HomoPhase.TREES) -> Callable[..., Any]:
    """A hook that kills the client before its ``nth`` ``tag`` reply in ``phase``."""
    seen = [0]

    def hook(reply: Reply, now: HomoPhase) -> Reply:
        if reply.TAG == tag and now is phase:
            seen[0] += 1
            if seen[0] == nth:
                raise Crash(f"killed before {tag} #{nth}")
        return reply

    return hook


@dataclass
class Restarted:
    """A run in which one client's process died and started again (:func:`run_restarting`)."""

    result: HomoResult
    #: Every client's model: the restarted one's from its second process.
    models: dict[str, Booster]


async def run_restarting(
    parts: dict[str, tuple[np.ndarray, np.ndarray]],
    config: HomoConfig,
    federation: Path,
    restarts: str,
    nth: int,
) -> Restarted:
    """Train with one client per entry of ``parts``; client ``restarts`` dies before its
    ``nth`` masked reply of the trees phase (nothing more leaves its process) and a new
    process of it joins again, which the server (given ``rejoin``) takes back."""
    names = list(parts)

    async def client(node: Node, c: str, hook: Any = None) -> Booster:
        async with node.session(f"homo/{c}", peers=[SERVER]) as sess:
            return await client_train(
                sess,
                SERVER,
                *parts[c],
                config,
                identity=ClientIdentity.from_dir(federation / c),
                me=c,
                before_send=hook,
            )

    async with star(names) as s, contextlib.AsyncExitStack() as stack:

        async def rejoin(c: str) -> Session:
            return await stack.enter_async_context(s.server.session(f"homo/{c}", peers=[c]))

        async def server() -> HomoResult:
            sessions = {
                c: await stack.enter_async_context(s.server.session(f"homo/{c}", peers=[c]))
                for c in names
            }
            return await server_train(sessions, config, rejoin=rejoin)

        async def dying_then_back() -> Booster:
            crash = crash_at("masked", nth, HomoPhase.TREES)

            def die(reply: Reply, phase: HomoPhase) -> Reply:
                try:
                    return crash(reply, phase)
                except Crash:
                    s.faults[restarts].silent = True  # the process is gone: nothing more leaves
                    raise

            with pytest.raises(Crash):
                await client(s.clients[restarts], restarts, die)
            await s.clients[restarts].close(flush=False)  # the process is gone
            reborn = await stack.enter_async_context(
                Node(
                    restarts,
                    peers={SERVER: f"mem://{SERVER}"},
                    transport=MemoryTransport(s.net, restarts, allowed_peers=[SERVER]),
                    config=TRAINING,
                )
            )
            return await client(reborn, restarts)

        others = [c for c in names if c != restarts]
        async with asyncio.timeout(100):
            result, models = await asyncio.gather(
                server(),
                asyncio.gather(dying_then_back(), *(client(s.clients[c], c) for c in others)),
            )
    return Restarted(result, dict(zip([restarts, *others], models, strict=True)))


def same_trees(a: Booster, b: Booster) -> bool:
    """Structure, splits, thresholds and leaf values all equal (bit for bit); gains and covers
    too where both models carry them (a client's copy has zeros unless the server shares
    them: ``HomoConfig.share_statistics``)."""
    if len(a.trees) != len(b.trees) or a.tree_output != b.tree_output:
        return False
    if not np.array_equal(a.base_margin, b.base_margin):
        return False
    for ta, tb in zip(a.trees, b.trees, strict=True):
        for name in (
            "feature",
            "threshold_bin",
            "threshold",
            "default_left",
            "left",
            "right",
            "value",
        ):
            if not np.array_equal(getattr(ta, name), getattr(tb, name)):
                return False
        both = ta.cover.any() and tb.cover.any()
        if both and not (np.array_equal(ta.gain, tb.gain) and np.array_equal(ta.cover, tb.cover)):
            return False
    return True


def hello(config: HomoConfig) -> dict[str, Any]:
    """The server's ``hello`` for ``config``, as a wire map (for tests of the client's rules)."""
    return {
        "t": "hello",
        "version": VERSION,
        "digest": config.digest(),
        "run": "run-0123456789",
        "settings": config.shared(),
    }
