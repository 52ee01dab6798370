"""The exceptions a transport raises: its own, so that transports stay a bytes-only layer.

A transport knows nothing of the library above it, so it cannot raise that library's
exceptions. These keep the standard library's families instead (network failures are
:class:`ConnectionError`, bad arguments :class:`ValueError`), and the library translates them
into its own where it calls a transport (for p2pboost: :mod:`p2pboost.net.transport`)::

    ConnectionError
    └── TransportError              the link failed, or no link could be made
        ├── HandshakeError          the TLS handshake or the party-identity check refused it
        └── FrameTooLarge           a message over the configured size limit
    ValueError
    └── TransportConfigError        a malformed address or setting, given by the caller
    RuntimeError
    └── TransportUsageError         a connection used in a way it does not support

The documented operations of a transport raise only these (besides cancellation).
"""

from __future__ import annotations

__all__ = [
    "FrameTooLarge",
    "HandshakeError",
    "TransportConfigError",
    "TransportError",
    "TransportUsageError",
]


class TransportError(ConnectionError):
    """The link failed (dropped, closed, refused), or a connection could not be made."""


class HandshakeError(TransportError):
    """The TLS handshake or the party-identity check refused a connection.

    ``certificate_refused`` is true when the peer hung up during the handshake in the way that
    means it refused *our* certificate without saying why (asyncio drops the TLS alert that
    would). The transport cannot say more, but a caller that knows our certificate can check
    it for the usual causes (expired, issued by another CA).
    """

    def __init__(self, message: str, *, certificate_refused: bool = False) -> None:
        super().__init__(message)
        self.certificate_refused = certificate_refused


class FrameTooLarge(TransportError):
    """A message exceeded the size limit (the sender's, or the receiver's: then the link
    closed)."""


class TransportConfigError(ValueError):
    """An address or a setting given to a transport is malformed or out of range."""


class TransportUsageError(RuntimeError):
    """A connection was used in a way it does not support (two ``receive()`` at once)."""
