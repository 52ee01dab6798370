"""The host's side of the embedding example: a node that answers the guest's score queries.

It loads its half of the model and its features (an
:class:`~p2pboost.hetero.inference.feature_store.ArrayStore` from ``host.csv``; a service would
rather pass a ``CallbackStore`` that queries its database) and answers until stopped (Ctrl-C or
SIGTERM). It sees the ids the guest asks about, never the guest's features or the scores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from p2pboost.hetero.inference.feature_store import ArrayStore
from p2pboost.hetero.inference.predictor import serve_host
from p2pboost.hetero.model import HostModel
from p2pboost.net.node import Node


async def answer(work: Path, listen: str) -> None:
    model = HostModel.load(work / "host-model.json")
    store = ArrayStore.from_csv(work / "host.csv", "id")
    async with Node(
        "host", listen=listen, peers={"guest": None}, tls=work / "certs" / "host"
    ) as node:
        print(f"host answering at {node.address}", flush=True)
        await serve_host(node, model, store)


async def main_async(work: Path, listen: str) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # stop cleanly: the node says goodbye
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await answer(work, listen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("work"), help="train.py's --out.")
    parser.add_argument("--listen", default="wss://127.0.0.1:8444", help="Where to listen.")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.work, args.listen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
