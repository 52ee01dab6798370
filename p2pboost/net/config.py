"""The node's settings and the statistics it reports: plain values, no behaviour.

:class:`NodeConfig` is what a deployment tunes (limits in bytes, timeouts in seconds; both
sides of a link should use the same values); :class:`NodeStats` and :class:`PeerStats` are the
snapshots :meth:`Node.stats() <p2pboost.net.node.Node.stats>` returns. They live apart from the
node so that every module of :mod:`p2pboost.net` can read the configuration without importing
the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from p2pboost.codec import DEFAULT_LIMITS, Limits
from p2pboost.exceptions import ConfigError

__all__ = ["KiB", "MiB", "NodeConfig", "NodeStats", "PeerStats"]

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Limits and timeouts of a node (seconds, bytes). Both sides should use the same values.

    Memory one peer can make this node hold is bounded by, per channel, ``window`` (plus, on
    a channel where the application waits for a message larger than the window, that message,
    at most ``max_message_bytes``), times ``max_channels_per_session``, times the sessions it
    is in (those it opens here: at most ``max_sessions_per_peer``; what a peer sends for a
    session not claimed yet counts as a session it opened, even under the name of another
    peer's session). The resend buffer is bounded by the peers' windows the same way. Lower
    these for peers you trust less; ``Node.stats().buffered_bytes`` shows what is held.
    """

    #: Per-channel receive window (credit granted to the peer before it must wait).
    window: int = 8 * MiB
    #: Largest DATA payload per frame; larger messages are split and reassembled. A little
    #: over 1 MiB so that a 1 MiB array and its encoding header travel as one frame.
    max_fragment: int = 1 * MiB + 64 * KiB
    #: Largest message (encoded) a channel sends or accepts.
    max_message_bytes: int = 256 * MiB
    #: Small frames are coalesced into one transport message up to this size.
    coalesce_bytes: int = 64 * KiB
    max_sessions: int = 1024
    #: Sessions one peer may open here (so one peer cannot take every slot): those it sent
    #: frames for before the application claimed them, and those it opened that were accepted.
    max_sessions_per_peer: int = 256
    max_channels_per_session: int = 64
    #: A session a peer opened that the application neither claimed (``session`` or
    #: ``accept_session``) nor saw end within this time is aborted, freeing its slot (each
    #: peer's frames for a session wait on their own clock).
    unclaimed_timeout: float = 300.0
    #: Send an (empty) message after this much silence...
    heartbeat_interval: float = 5.0
    #: ...and drop a connection on which nothing arrived for this long.
    heartbeat_timeout: float = 20.0
    #: A peer away for longer than this ends its sessions with PeerDisconnected.
    reconnect_timeout: float = 60.0
    #: Bound on one dial attempt (TCP + TLS + identity check).
    connect_timeout: float = 10.0
    #: Re-dial back-off: starts here, doubles, capped at ``backoff_max``, jittered.
    backoff_initial: float = 0.05
    backoff_max: float = 5.0
    #: A stand-alone ack goes out after this delay if nothing else carried it (acks only
    #: free the peer's resend buffer; credit, which paces the peer, is separate).
    ack_delay: float = 0.02
    #: On exit, wait this long for peers to acknowledge what was sent.
    close_timeout: float = 5.0
    codec_limits: Limits = field(default=DEFAULT_LIMITS)

    def __post_init__(self) -> None:
        positive = {
            "window": self.window,
            "max_fragment": self.max_fragment,
            "max_message_bytes": self.max_message_bytes,
            "coalesce_bytes": self.coalesce_bytes,
            "max_sessions": self.max_sessions,
            "max_sessions_per_peer": self.max_sessions_per_peer,
            "max_channels_per_session": self.max_channels_per_session,
            "unclaimed_timeout": self.unclaimed_timeout,
            "heartbeat_interval": self.heartbeat_interval,
            "heartbeat_timeout": self.heartbeat_timeout,
            "reconnect_timeout": self.reconnect_timeout,
            "connect_timeout": self.connect_timeout,
            "backoff_initial": self.backoff_initial,
            "backoff_max": self.backoff_max,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ConfigError(f"NodeConfig.{name} must be > 0, got {value!r}")
        if self.ack_delay < 0 or self.close_timeout < 0:
            raise ConfigError("NodeConfig.ack_delay and close_timeout must be >= 0")
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ConfigError("heartbeat_timeout must exceed heartbeat_interval")
        if self.window < 2 * 64:
            raise ConfigError("window must be at least 128 bytes")


@dataclass(frozen=True, slots=True)
class PeerStats:
    """Counters of the link to one peer (bytes include framing; messages are app messages)."""

    peer: str
    connected: bool
    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    wire_messages_sent: int
    wire_messages_received: int
    connections: int
    dial_attempts: int
    link_errors: int
    resend_buffer_bytes: int
    receive_buffer_bytes: int


@dataclass(frozen=True, slots=True)
class NodeStats:
    """A snapshot of the node's counters; ``buffered_bytes`` is what the memory bound covers.

    ``sessions`` counts the sessions the application claimed and, until they are claimed,
    each peer's frames for a session (one per session and peer).
    """

    party_id: str
    sessions: int
    buffered_bytes: int
    peers: Mapping[str, PeerStats]
