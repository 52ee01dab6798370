"""Node throughput and latency against bare ``websockets``, over loopback with mutual TLS.

``python -m benchmarks transport [--mib 200 --rtt-rounds 2000 --small 50000]``

Both sides of every measurement run in this one process and event loop (so the figures
include the work of both ends on the same core, as two co-located parties would). Bulk
throughput is timed identically for both stacks: the sender pushes ``--mib`` messages of
1 MiB (``bytes``) and the clock stops when the receiver's one-byte acknowledgement of the last
one arrives. The raw stack uses the same TLS contexts (throw-away CA from
:mod:`p2pboost.certs`), no compression, and one WebSocket message per payload; the node adds
sessions, channels, credit flow control, sequence numbers and acks on top.

JSON keys: ``benchmark``, ``node_mb_per_s``, ``raw_websockets_mb_per_s``, ``rtt_p50_ms``,
``rtt_p99_ms``, ``small_msgs_per_s`` (MB = 2**20 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

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


async def _node_bench(
    tls: Any, payload: bytes, count: int, rtt_rounds: int, small: int
) -> dict[str, float]:
    from p2pboost.node import Node

    results: dict[str, float] = {}
    b = Node(
        "bench-b", listen=tls.listen, peers={"bench-a": None}, transport=tls.transport("bench-b")
    )
    async with b:
        assert b.address is not None
        a = Node("bench-a", peers={"bench-b": b.address}, transport=tls.transport("bench-a"))
        async with a:
            sa = a.session("bench", peers=["bench-b"])
            sb = b.session("bench", peers=["bench-a"])
            # -- bulk ---------------------------------------------------------------------
            tx, rx = sa.channel("bench-b", "bulk"), sb.channel("bench-a", "bulk")

            async def sink(n: int) -> None:
                for _ in range(n):
                    await rx.recv()
                await rx.send(b"k")

            consumer = asyncio.create_task(sink(count))
            await tx.send(payload)  # warm-up, as for the raw stack
            await asyncio.sleep(0)
            start = time.perf_counter()
            for _ in range(count - 1):
                await tx.send(payload)
            await tx.recv()
            results["node_s"] = (time.perf_counter() - start) * count / (count - 1)
            await consumer
            # -- round trips ------------------------------------------------------------
            ping, pong = sa.channel("bench-b", "rpc"), sb.channel("bench-a", "rpc")

            async def echo(n: int) -> None:
                for _ in range(n):
                    await pong.send(await pong.recv())

            echoer = asyncio.create_task(echo(rtt_rounds + 50))
            rtts = []
            for i in range(rtt_rounds + 50):
                t0 = time.perf_counter()
                await ping.send({"i": i})
                await ping.recv()
                if i >= 50:  # skip warm-up rounds
                    rtts.append(time.perf_counter() - t0)
            await echoer
            rtts.sort()
            results["rtt_p50_ms"] = statistics.median(rtts) * 1e3
            results["rtt_p99_ms"] = rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))] * 1e3
            # -- small messages -----------------------------------------------------------
            stx, srx = sa.channel("bench-b", "small"), sb.channel("bench-a", "small")

            async def small_sink() -> None:
                for _ in range(small):
                    await srx.recv()
                await srx.send(b"k")

            consumer = asyncio.create_task(small_sink())
            start = time.perf_counter()
            for i in range(small):
                await stx.send(i)
            await stx.recv()
            results["small_msgs_per_s"] = small / (time.perf_counter() - start)
            await consumer
            await sa.close()
            await sb.close()
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks transport", description=__doc__)
    parser.add_argument("--mib", type=int, default=200, help="1 MiB messages per stack")
    parser.add_argument("--rtt-rounds", type=int, default=2000)
    parser.add_argument("--small", type=int, default=50_000, help="small messages to send")
    args = parser.parse_args(argv)
    payload = bytes(range(256)) * (MIB // 256)

    with tempfile.TemporaryDirectory(prefix="p2pboost-bench-") as tmp:
        tls = _Tls(Path(tmp))

        async def run() -> tuple[float, dict[str, float]]:
            raw_s = await _raw_websockets(tls, payload, args.mib)
            node = await _node_bench(tls, payload, args.mib, args.rtt_rounds, args.small)
            return raw_s, node

        raw_s, node = asyncio.run(run())

    node_mb = args.mib / node["node_s"]
    raw_mb = args.mib / raw_s
    rows = [
        ("1 MiB messages per stack", args.mib),
        ("node MB/s", node_mb),
        ("raw websockets MB/s", raw_mb),
        ("node / raw", node_mb / raw_mb),
        ("rtt p50 ms", node["rtt_p50_ms"]),
        ("rtt p99 ms", node["rtt_p99_ms"]),
        ("small messages / s", node["small_msgs_per_s"]),
    ]
    print_table(rows, "transport: Node over WebSocket + mTLS (loopback, one process)")
    emit_json(
        {
            "benchmark": "transport",
            "node_mb_per_s": round(node_mb, 1),
            "raw_websockets_mb_per_s": round(raw_mb, 1),
            "rtt_p50_ms": round(node["rtt_p50_ms"], 3),
            "rtt_p99_ms": round(node["rtt_p99_ms"], 3),
            "small_msgs_per_s": round(node["small_msgs_per_s"]),
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
        from transports.websocket import WebSocketTransport

        return WebSocketTransport(self.configs[party])
