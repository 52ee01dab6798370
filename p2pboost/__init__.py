"""p2pboost: peer-to-peer federated gradient boosting over WebSockets with mutual TLS."""

from __future__ import annotations

from p2pboost.exceptions import (
    CodecError,
    ConfigError,
    CryptoError,
    DeadlineExceeded,
    HandshakeError,
    InputError,
    ModelError,
    NotFittedError,
    P2PBoostError,
    PeerDisconnected,
    ProtocolError,
    RemoteProtocolError,
    SessionClosed,
    TransportError,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "CodecError",
    "ConfigError",
    "CryptoError",
    "DeadlineExceeded",
    "HandshakeError",
    "InputError",
    "ModelError",
    "NotFittedError",
    "P2PBoostError",
    "PeerDisconnected",
    "ProtocolError",
    "RemoteProtocolError",
    "SessionClosed",
    "TransportError",
    "__version__",
]
