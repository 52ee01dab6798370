"""How a party's run ends on SIGTERM: cancelled, so it closes cleanly.

Service managers and containers stop a process with SIGTERM; a party that died on it would
leave its peers mid-message. Turning the signal into the task's cancellation lets the node
close its sessions and connections first (the CLI then prints one line and exits 143).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["stop_on_sigterm"]

T = TypeVar("T")


async def stop_on_sigterm(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; SIGTERM (service managers, containers) cancels it, so the node closes
    its sessions and connections cleanly instead of dying mid-message."""
    task = asyncio.current_task()
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals here
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await work
