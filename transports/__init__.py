"""Transports move authenticated byte messages between parties; see :mod:`transports.base`.

They import nothing of p2pboost and raise only their own exceptions (:mod:`transports.errors`).
"""

from transports.base import Connection, ConnectionHandler, Listener, Transport
from transports.errors import (
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
