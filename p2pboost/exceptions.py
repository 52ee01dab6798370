"""Every exception p2pboost raises on purpose.

Catch :class:`P2PBoostError` to catch them all. Errors about *your* input derive from
:class:`ValueError` as well, errors about the network from :class:`ConnectionError`, and
deadlines from :class:`TimeoutError`, so code written against the standard library's
families keeps working.

::

    P2PBoostError
    ├── InputError (ValueError)            bad arguments or data handed to p2pboost by the caller
    │   ├── InputTypeError (TypeError)     a value of a type p2pboost cannot use (a dict in X)
    │   ├── NotFittedError                 predict() before fit()
    │   └── UnknownIdError                 a host holds no features for some requested ids
    ├── ConfigError (ValueError)           bad configuration file, key or certificate path
    ├── CodecError (ValueError)            bytes that do not decode to a valid message
    ├── CryptoError                        a cryptographic check failed
    │   └── KeyMismatchError               ciphertext or key from a different key pair
    ├── ModelError (ValueError)            unreadable, foreign or incompatible model file
    │   └── CheckpointError                corrupted or foreign checkpoint, or other settings
    ├── ProtocolError                      a peer broke the rules of a protocol
    │   ├── LocalProtocolError             *we* were asked to do something out of order
    │   └── RemoteProtocolError            a peer sent something invalid; names the peer
    ├── SessionClosed                      the session or channel was closed (normally or not)
    ├── TransportError (ConnectionError)   the link below the protocols failed
    │   ├── HandshakeError                 TLS or identity check refused a connection
    │   │   └── PeerUnreachable            ...every time: waiting will not help; names the peer
    │   ├── PeerDisconnected               a peer went away and did not come back in time
    │   └── FrameTooLarge                  a frame larger than the configured limit
    ├── DeadlineExceeded (TimeoutError)    an operation ran past its deadline
    ├── ClusterError (ConnectionError)     the party's compute cluster is unreachable or gone
    └── WorkerStateLost                    a worker lost the state a task needs (rebuilt by
                                           the executor; escapes only when it cannot be)

Warnings (categories of :func:`warnings.warn`, so that each can be filtered on its own)::

    P2PBoostWarning (UserWarning)
    └── TwoClientWarning                   a horizontal federation of exactly two clients

Local versus remote: a :class:`LocalProtocolError` means the code in this process misused an
API; a :class:`RemoteProtocolError` means a peer did, and carries ``peer`` so operators know whom
to call. Neither is ever silently swallowed.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ClusterError",
    "CodecError",
    "ConfigError",
    "CryptoError",
    "DeadlineExceeded",
    "FrameTooLarge",
    "HandshakeError",
    "InputError",
    "InputTypeError",
    "KeyMismatchError",
    "LocalProtocolError",
    "ModelError",
    "NotFittedError",
    "P2PBoostError",
    "P2PBoostWarning",
    "PeerDisconnected",
    "PeerUnreachable",
    "ProtocolError",
    "RemoteProtocolError",
    "SessionClosed",
    "TransportError",
    "TwoClientWarning",
    "UnknownIdError",
    "WorkerStateLost",
]


class P2PBoostError(Exception):
    """Base class of every exception p2pboost raises on purpose."""


class InputError(P2PBoostError, ValueError):
    """Arguments or data handed to p2pboost by the caller are invalid."""


class InputTypeError(InputError, TypeError):
    """A value of a type p2pboost cannot use (a dict or a complex number among features)."""


class NotFittedError(InputError):
    """A model was used before it was fitted or loaded."""


class UnknownIdError(InputError):
    """A host has no features for some of the sample ids a prediction asked for.

    ``peer`` names the host and ``ids`` lists the ids it lacks (ids the caller sent, so
    nothing new is revealed to the caller; the host learns that they were asked for).
    """

    def __init__(self, peer: str, ids: list[object]) -> None:
        ids = [i.item() if hasattr(i, "item") else i for i in ids]  # numpy scalars read badly
        shown = ", ".join(repr(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
        super().__init__(f"{peer}: no features for {len(ids)} requested id(s): {shown}")
        self.peer = peer
        self.ids = ids


class ConfigError(P2PBoostError, ValueError):
    """A configuration file, key, path or certificate setting is invalid."""


class CodecError(P2PBoostError, ValueError):
    """Bytes that do not decode to a valid p2pboost message (the only error a decoder raises)."""


class CryptoError(P2PBoostError):
    """A cryptographic operation or check failed."""


class KeyMismatchError(CryptoError):
    """A ciphertext, key or fingerprint belongs to a different key pair."""


class ModelError(P2PBoostError, ValueError):
    """A model file is unreadable, from another format version, or from another federation."""


class CheckpointError(ModelError):
    """A checkpoint is corrupted, of another training, or of other data or parameters."""


class ProtocolError(P2PBoostError):
    """A protocol's rules were broken."""


class LocalProtocolError(ProtocolError):
    """This process asked a protocol or channel to do something it cannot do in its state."""


class RemoteProtocolError(ProtocolError):
    """A peer sent something invalid or out of order.

    ``peer`` names the party, so the operator knows which organisation to call.
    """

    def __init__(self, message: str, *, peer: str | None = None) -> None:
        super().__init__(f"{peer}: {message}" if peer else message)
        self.peer = peer


class SessionClosed(P2PBoostError):
    """The session or channel is closed; ``reason`` says why when it is known."""

    def __init__(self, message: str = "session closed", *, reason: str | None = None) -> None:
        super().__init__(message if reason is None else f"{message}: {reason}")
        self.reason = reason


class TransportError(P2PBoostError, ConnectionError):
    """The link below the protocols failed."""


class HandshakeError(TransportError):
    """A connection was refused by the TLS handshake or the party-identity check."""


class PeerUnreachable(HandshakeError):
    """Every attempt to connect to a peer is refused for a reason that waiting will not fix: a
    certificate from another CA, a certificate naming another party (a misspelled peer id), no
    TLS on the peer's port. Sessions with the peer end with it at once instead of after
    ``reconnect_timeout``; the message says the cause and what to check. ``peer`` names the
    party."""

    def __init__(self, peer: str, message: str) -> None:
        super().__init__(message)
        self.peer = peer


class PeerDisconnected(TransportError):
    """A peer went away and did not come back within the configured time, or came back as a
    new process that lost its state (``restarted``: it may resume its work from checkpoints,
    so a party that keeps its own may try again)."""

    def __init__(self, peer: str, message: str | None = None, *, restarted: bool = False) -> None:
        super().__init__(message or f"peer {peer!r} disconnected and did not come back in time")
        self.peer = peer
        self.restarted = restarted


class FrameTooLarge(TransportError):
    """A frame exceeded the configured maximum size."""


class DeadlineExceeded(P2PBoostError, TimeoutError):
    """An operation ran past its deadline."""


class ClusterError(P2PBoostError, ConnectionError):
    """The party's compute cluster (its Dask scheduler) is unreachable, refused us, or went
    away during a run; the message names the scheduler."""


class WorkerStateLost(P2PBoostError):
    """A task found no state under its name in the worker that ran it: the worker that held it
    was lost (a cluster worker killed and replaced) or the state was never made there.

    ``address`` names the worker the task ran in. A cluster executor catches this, rebuilds
    the state there by replaying the calls that made it, and runs the task again
    (:mod:`p2pboost.workers`)."""

    def __init__(self, message: str, address: str = "") -> None:
        super().__init__(message, address)
        self.message = message
        self.address = address

    def __str__(self) -> str:
        return self.message + (f" (worker {self.address})" if self.address else "")


class P2PBoostWarning(UserWarning):
    """Base class of every warning p2pboost gives on purpose."""


class TwoClientWarning(P2PBoostWarning):
    """A horizontal federation of exactly two clients: secure aggregation hides each client's
    vector from the server only while the server colludes with neither client; the server and
    one client together learn the other's vector exactly (the sum minus their own). Silenced
    by the party's explicit ``allow_two_clients`` setting
    (:class:`~p2pboost.homo.config.HomoConfig`)."""
