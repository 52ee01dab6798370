"""Node throughput and latency against bare ``websockets``, over loopback with mutual TLS.

``python -m benchmarks transport [--mib 40 --rounds 21 --rtt-rounds 2000 --small 50000]``

Both sides of every measurement run in this one process and event loop (so the figures
include the work of both ends on the same core, as two co-located parties would). Bulk
throughput is timed identically for both stacks: the sender pushes ``--mib`` messages of
1 MiB (``bytes``) and the clock stops when the receiver's one-byte acknowledgement of the
last one arrives. Raw and node rounds alternate ``--rounds`` times (so drift on a shared
machine hits both alike; which of the two goes first swaps every round), each after a
collection and a short pause (so no run pays for the previous one's garbage and closing
handshakes), and the medians are reported. The raw stack uses the same TLS contexts
(throw-away CA from :mod:`p2pboost.certs`), no compression, and one WebSocket message per
payload; the node adds sessions, channels, credit flow control, sequence numbers and acks on
top. ``bytes`` travel through the node without msgpack (its
blob path); for comparison the table also shows a 1 MiB ``uint8`` array, which goes through
:mod:`p2pboost.codec`. The table also shows the minor page faults per MiB of each stack (fresh
memory: on these machines a fault costs more than copying the page), since the allocator's
state is shared by both stacks in this process (see :mod:`p2pboost.net._memory`).

JSON keys: ``benchmark``, ``node_mb_per_s``, ``raw_websockets_mb_per_s``, ``rtt_p50_ms``,
``rtt_p99_ms``, ``small_msgs_per_s`` (MB = 2**20 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import emit_json, print_table

MIB = 1 << 20


async def _raw_websockets(tls: Any, payload: bytes, count: int) -> float:
    """Seconds to push ``count`` payloads through bare websockets (same TLS as the node)."""
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import ServerConnection, serve

    done = asyncio.get_running_loop().create_future()

    async def handler(ws: ServerConnection) -> None:
        for _ in range(count):
            await ws.recv()
        await ws.send(b"k")
        await done

    limit = 2 * len(payload)
    server_ctx, client_ctx = tls.raw_contexts()
    async with serve(
        handler, "127.0.0.1", 0, ssl=server_ctx, max_size=limit, compression=None
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        uri = f"wss://localhost:{port}/"
        async with connect(uri, ssl=client_ctx, max_size=limit, compression=None) as ws:
            await ws.send(payload)  # warm-up: TLS session, buffers
            await asyncio.sleep(0)
            start = time.perf_counter()
            for _ in range(count - 1):
                await ws.send(payload)
            await ws.recv()
            elapsed = time.perf_counter() - start
            done.set_result(None)
    return elapsed * count / (count - 1)


def _minor_faults() -> int:
    """Minor page faults of this process so far (memory touched for the first time)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


async def _settle() -> None:
    """Start every timed run from the same state: the previous run's garbage collected and
    its closing handshakes done, so no run pays for its predecessor."""
    gc.collect()
    await asyncio.sleep(0.05)


class _NodePair:
    """Two nodes (``bench-a`` dials ``bench-b``) over the default-style WebSocket transport."""

    def __init__(self, tls: _Tls) -> None:
        self.tls = tls
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> _NodePair:
        from p2pboost.net.node import Node

        tls = self.tls
        b = Node(
            "bench-b",
            listen=tls.listen,
            peers={"bench-a": None},
            transport=tls.transport("bench-b"),
        )
        self.b = await self._stack.enter_async_context(b)
        assert b.address is not None
        a = Node("bench-a", peers={"bench-b": b.address}, transport=tls.transport("bench-a"))
        self.a = await self._stack.enter_async_context(a)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def bulk(self, payload: object, count: int, name: str) -> float:
        """Seconds to push ``count`` payloads a -> b, timed like :func:`_raw_websockets`."""
        async with (
            self.a.session(name, peers=["bench-b"]) as sa,
            self.b.session(name, peers=["bench-a"]) as sb,
        ):
            tx, rx = sa.channel("bench-b"), sb.channel("bench-a")

            async def sink() -> None:
                for _ in range(count):
                    await rx.recv()
                await rx.send(b"k")

            consumer = asyncio.create_task(sink())
            await tx.send(payload)  # warm-up, as for the raw stack
            await asyncio.sleep(0)
            start = time.perf_counter()
            for _ in range(count - 1):
                await tx.send(payload)
            await tx.recv()
            elapsed = time.perf_counter() - start
            await consumer
        return elapsed * count / (count - 1)

    async def round_trips(self, rounds: int) -> list[float]:
        """Seconds per small request/response (after 50 warm-up rounds), sorted."""
        async with (
            self.a.session("rtt", peers=["bench-b"]) as sa,
            self.b.session("rtt", peers=["bench-a"]) as sb,
        ):
            ping, pong = sa.channel("bench-b"), sb.channel("bench-a")

            async def echo() -> None:
                for _ in range(rounds + 50):
                    await pong.send(await pong.recv())

            echoer = asyncio.create_task(echo())
            rtts = []
            for i in range(rounds + 50):
                t0 = time.perf_counter()
                await ping.send({"i": i})
                await ping.recv()
                if i >= 50:
                    rtts.append(time.perf_counter() - t0)
            await echoer
        return sorted(rtts)

    async def small_messages(self, count: int) -> float:
        """Small messages per second, a -> b, until b acknowledges the last one."""
        async with (
            self.a.session("small", peers=["bench-b"]) as sa,
            self.b.session("small", peers=["bench-a"]) as sb,
        ):
            tx, rx = sa.channel("bench-b"), sb.channel("bench-a")

            async def sink() -> None:
                for _ in range(count):
                    await rx.recv()
                await rx.send(b"k")

            consumer = asyncio.create_task(sink())
            start = time.perf_counter()
            for i in range(count):
                await tx.send(i)
            await tx.recv()
            rate = count / (time.perf_counter() - start)
            await consumer
        return rate


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks transport", description=__doc__)
    parser.add_argument("--mib", type=int, default=40, help="1 MiB messages per stack per round")
    parser.add_argument("--rounds", type=int, default=21, help="alternating raw/node rounds")
    parser.add_argument("--rtt-rounds", type=int, default=2000)
    parser.add_argument("--small", type=int, default=50_000, help="small messages to send")
    args = parser.parse_args(argv)
    if args.mib < 2 or args.rounds < 1:
        parser.error("need --mib >= 2 and --rounds >= 1")
    payload = bytes(range(256)) * (MIB // 256)

    raw_faults: list[float] = []
    node_faults: list[float] = []
    with tempfile.TemporaryDirectory(prefix="p2pboost-bench-") as tmp:
        tls = _Tls(Path(tmp))

        async def run() -> tuple[list[float], list[float], list[float], list[float], float]:
            raw_s: list[float] = []
            node_s: list[float] = []
            async with _NodePair(tls) as pair:

                async def raw_round(r: int) -> None:
                    await _settle()
                    before = _minor_faults()
                    raw_s.append(await _raw_websockets(tls, payload, args.mib))
                    raw_faults.append((_minor_faults() - before) / args.mib)

                async def node_round(r: int) -> None:
                    await _settle()
                    before = _minor_faults()
                    node_s.append(await pair.bulk(payload, args.mib, f"bulk-{r}"))
                    node_faults.append((_minor_faults() - before) / args.mib)

                for r in range(args.rounds):  # alternate, so drift hits both stacks alike
                    # ... and swap which goes first each round, so neither always runs
                    # right after the other (what one leaves behind, the other inherits).
                    first, second = (
                        (raw_round, node_round) if r % 2 == 0 else (node_round, raw_round)
                    )
                    await first(r)
                    await second(r)
                array = np.frombuffer(payload, dtype=np.uint8)
                codec_s = []
                for r in range(3):
                    await _settle()
                    codec_s.append(await pair.bulk(array, args.mib, f"array-{r}"))
                rtts = await pair.round_trips(args.rtt_rounds)
                small = await pair.small_messages(args.small)
            return raw_s, node_s, codec_s, rtts, small

        raw_s, node_s, codec_s, rtts, small = asyncio.run(run())

    raw_mb = args.mib / statistics.median(raw_s)
    node_mb = args.mib / statistics.median(node_s)
    rtt_p50 = statistics.median(rtts) * 1e3
    rtt_p99 = rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))] * 1e3
    rows: list[tuple[str, Any]] = [
        ("1 MiB messages per stack and round", args.mib),
        ("rounds (raw, node alternating)", args.rounds),
        ("raw websockets MB/s per round", " ".join(f"{args.mib / t:.0f}" for t in raw_s)),
        ("node MB/s per round", " ".join(f"{args.mib / t:.0f}" for t in node_s)),
        ("raw websockets MB/s (median)", raw_mb),
        ("node MB/s (median)", node_mb),
        ("node / raw (ratio of medians)", node_mb / raw_mb),
        ("node MB/s, uint8 array via codec", args.mib / statistics.median(codec_s)),
        (
            "node / raw (median of round pairs)",
            statistics.median(r / n for r, n in zip(raw_s, node_s, strict=True)),
        ),
        (
            "minor page faults per MiB, raw / node (median)",
            f"{statistics.median(raw_faults):.0f} / {statistics.median(node_faults):.0f}",
        ),
        ("rtt p50 ms", rtt_p50),
        ("rtt p99 ms", rtt_p99),
        ("small messages / s", small),
    ]
    print_table(rows, "transport: Node over WebSocket + mTLS (loopback, one process)")
    emit_json(
        {
            "benchmark": "transport",
            "node_mb_per_s": round(node_mb, 1),
            "raw_websockets_mb_per_s": round(raw_mb, 1),
            "rtt_p50_ms": round(rtt_p50, 3),
            "rtt_p99_ms": round(rtt_p99, 3),
            "small_msgs_per_s": round(small),
        }
    )
    return 0


class _Tls:
    """Throw-away CA and party certificates; contexts for the node and for raw websockets."""

    listen = "wss://127.0.0.1:0"

    def __init__(self, directory: Path) -> None:
        from p2pboost import certs

        dirs = certs.init(directory, ["bench-a", "bench-b"])
        self.configs = {party: certs.TLSConfig.from_dir(d) for party, d in dirs.items()}

    def raw_contexts(self) -> tuple[Any, Any]:
        """Server context of bench-b, client context of bench-a (what the node uses)."""
        from p2pboost import certs

        return (
            certs.server_context(self.configs["bench-b"]),
            certs.client_context(self.configs["bench-a"]),
        )

    def transport(self, party: str) -> Any:
        from p2pboost.net.transport import websocket_transport

        return websocket_transport(self.configs[party])
