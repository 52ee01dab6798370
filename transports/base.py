"""The one small interface every transport implements: authenticated, ordered byte messages.

A transport moves whole byte messages between two authenticated parties and nothing else. It
knows nothing of sessions, channels, msgpack or protocols, and imports nothing of the library
above it (p2pboost's node and codec use transports, never the other way round). That keeps
transports swappable (WebSocket + mutual TLS in production, in-memory with fault injection in
unit tests) and lets one conformance suite (``tests/transports/``) check every implementation
against the same contract:

* ``connect(address)`` returns a :class:`Connection` whose ``peer_id`` has been *verified*
  (for TLS: read from the peer's certificate and checked against the id it claims and the
  configured peer list). Failing that it raises :class:`~p2pboost.transports.errors.HandshakeError`.
* ``serve(address, handler)`` accepts connections and calls ``handler(connection)`` for each
  authenticated one; it returns a :class:`Listener` whose ``close()`` stops accepting.
* ``send`` / ``receive`` move one whole message, in order. A message larger than
  ``max_message_bytes`` is refused with :class:`~p2pboost.transports.errors.FrameTooLarge`.
* Once the link breaks, ``send`` and ``receive`` raise
  :class:`~p2pboost.transports.errors.TransportError` (never a library's own exception).
* ``close()`` is idempotent; after it, ``receive`` raises
  :class:`~p2pboost.transports.errors.TransportError` too.

Errors are the transports' own (:mod:`p2pboost.transports.errors`); the library that uses a
transport translates them into its own exceptions where it calls it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

__all__ = ["Connection", "ConnectionHandler", "Listener", "Transport"]


class Connection(ABC):
    """One authenticated, ordered, message-oriented link to one peer."""

    #: The peer's verified party id.
    peer_id: str

    @abstractmethod
    async def send(self, message: bytes) -> None:
        """Send one whole message; waits while the transport's own buffers are full."""

    @abstractmethod
    async def receive(self) -> bytes:
        """Receive the next whole message."""

    @abstractmethod
    async def close(self) -> None:
        """Close the link (idempotent)."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once the link is closed, by either side or by a failure."""


ConnectionHandler = Callable[[Connection], Awaitable[None]]


class Listener(ABC):
    """A running server; ``address`` is where it actually listens (port 0 resolved)."""

    address: str

    @abstractmethod
    async def close(self) -> None:
        """Stop accepting connections and close the ones it accepted (idempotent)."""


class Transport(ABC):
    """Factory for connections and listeners of one kind."""

    @abstractmethod
    async def connect(self, address: str, *, peer_id: str) -> Connection:
        """Open a link to ``address`` and verify that the party there is ``peer_id``."""

    @abstractmethod
    async def serve(self, address: str, handler: ConnectionHandler) -> Listener:
        """Accept authenticated connections at ``address`` and hand each to ``handler``."""
