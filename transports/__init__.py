"""Transports move authenticated byte messages between parties; see
:mod:`p2pboost.transports.base`.

They import nothing else of p2pboost and raise only their own exceptions
(:mod:`p2pboost.transports.errors`). The repository keeps them in its ``transports/`` folder,
installed as ``p2pboost.transports`` (no generic top-level package in users' environments);
their modules import each other relatively, so the folder is the same package under either
name, and can be loaded on its own to show that it needs nothing of p2pboost.
"""

from .base import Connection, ConnectionHandler, Listener, Transport
from .errors import (
    FrameTooLarge,
    HandshakeError,
    TransportConfigError,
    TransportError,
    TransportUsageError,
)

__all__ = [
    "Connection",
    "ConnectionHandler",
    "FrameTooLarge",
    "HandshakeError",
    "Listener",
    "Transport",
    "TransportConfigError",
    "TransportError",
    "TransportUsageError",
]
