"""Page faults of a bulk transfer between two nodes over mutual TLS, in a fresh process (the C
allocator's state is the measurement, so no earlier test may have shaped it).

``python -m tests.node._fault_counter FED [--keep-trimming]`` prints one JSON line: minor page
faults per MiB sent (both nodes run in this process, as in ``benchmarks/transport.py``) and
what :func:`~p2pboost.net._memory.retain_freed_buffers` did when the first node started.
``--keep-trimming`` replaces it by a no-op first: the allocator then behaves as it did before
the node kept freed buffers, which shows the measurement can tell the two apart.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path

from p2pboost.net import _memory
from p2pboost.net.node import Node

MiB = 1 << 20
#: Messages timed after the warm-up (the first messages set up TLS and the buffers).
COUNT = 30


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


async def main(fed: Path, keep_trimming: bool) -> None:
    freed: list[int] = []
    retain = _memory.retain_freed_buffers

    def recorded(size: int) -> int:
        freed.append(0 if keep_trimming else retain(size))
        return freed[-1]

    _memory.retain_freed_buffers = recorded  # what Node.start() calls
    payload = bytes(range(256)) * (MiB // 256)
    async with Node("b", listen="127.0.0.1:0", peers={"a": None}, tls=fed / "b") as b:
        assert b.address is not None
        async with (
            Node("a", peers={"b": b.address}, tls=fed / "a") as a,
            a.session("bulk", peers=["b"]) as sa,
            b.session("bulk", peers=["a"]) as sb,
        ):
            tx, rx = sa.channel("b"), sb.channel("a")

            async def sink(count: int) -> None:
                for _ in range(count):
                    await rx.recv()

            for count in (5, COUNT):  # warm-up, then the measured run
                before = minor_faults()
                async with asyncio.TaskGroup() as tasks:
                    tasks.create_task(sink(count))
                    for _ in range(count):
                        await tx.send(payload)
                faults = minor_faults() - before
    print(json.dumps({"faults_per_mib": faults / COUNT, "freed": freed[0]}))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), "--keep-trimming" in sys.argv[2:]))
