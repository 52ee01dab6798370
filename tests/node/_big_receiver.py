"""A receiving party for the memory-bound test, in a process of its own (its peak RSS is the
measurement): ``python -m tests.node._big_receiver FED SIZE``. Prints its address, then, after
one message of about ``SIZE`` bytes, its peak RSS before and after (JSON lines)."""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path

import numpy as np

from p2pboost.net.config import NodeConfig
from p2pboost.net.node import Node

MiB = 1 << 20


def peak_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def main(fed: Path, size: int) -> None:
    config = NodeConfig(max_message_bytes=size + MiB)
    async with Node(
        "b", listen="127.0.0.1:0", peers={"a": None}, tls=fed / "b", config=config
    ) as n:
        print(json.dumps({"address": n.address}), flush=True)
        async with n.session("big", peers=["a"]) as session:
            channel = session.channel("a")
            await channel.recv()  # a small message first: link, TLS and buffers are up
            before = peak_bytes()
            message = await channel.recv()
            after = peak_bytes()
            await channel.send("ok")
            assert isinstance(message, np.ndarray)
            print(json.dumps({"before": before, "after": after, "nbytes": message.nbytes}))
            await asyncio.sleep(0.2)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
