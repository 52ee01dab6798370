"""How long ``predict`` and ``serve`` wait for the other side: ``node.reconnect_timeout``.

A one-shot prediction has two sides that start by hand, often on two machines, and each used
to wait by its own rule: the guest needed its hosts up within ``[serve] host_timeout`` (5 s,
a bound meant for one batch of an online service), and a host waited for the guest's session
without end, also when the guest's ``predict`` had already failed on its own file. Now both
wait by the one setting that bounds every other wait for a peer, ``node.reconnect_timeout``:
either may start first, and a side whose partner does not come within it stops with
:class:`~p2pboost.exceptions.PeerDisconnected` naming the partner (the party runner adds its
address, the config file and the setting). ``host_timeout`` bounds each batch once both are up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from p2pboost.exceptions import PeerDisconnected
from p2pboost.net.node import Node

__all__ = ["first_session", "hosts_up"]

T = TypeVar("T")


async def hosts_up(node: Node, hosts: Sequence[str], wait: float) -> None:
    """Wait until every host's link is up, at most ``wait`` seconds in all."""
    try:
        async with asyncio.timeout(wait):
            await asyncio.gather(*(node.wait_connected(h) for h in hosts))
    except TimeoutError:
        away = next(h for h in hosts if not node.is_connected(h))
        raise PeerDisconnected(away, f"{away!r} did not connect in {wait:g} s") from None


async def first_session(
    answer: Callable[[Callable[[str], None]], Coroutine[Any, Any, T]], guest: str, wait: float
) -> T:
    """Run ``answer(on_session)`` (a host answering the guest's sessions); unless the guest
    opens one within ``wait`` seconds, stop it and raise :class:`PeerDisconnected` saying
    what to do. Once a session came, ``answer`` runs to its end without a bound."""
    came = asyncio.Event()
    task = asyncio.create_task(answer(lambda _: came.set()))
    waiting = asyncio.create_task(came.wait())
    try:
        first: set[asyncio.Future[Any]] = {task, waiting}
        done, _ = await asyncio.wait(first, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        if not done:
            raise PeerDisconnected(
                guest,
                f"{guest!r} asked for no prediction in {wait:g} s; if its predict stopped with "
                "an error, fix what that error names, then start both predicts again (in "
                "either order: each waits node.reconnect_timeout for the other)",
            )
        return await task
    finally:
        for t in (task, waiting):
            t.cancel()
        await asyncio.gather(task, waiting, return_exceptions=True)
