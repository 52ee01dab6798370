"""The states of a session and of each peer's side of it, and every transition between them.

One table, one owner (the model is h11's ``_state.py``): a session's life is three small state
machines, each written below as ``{state: {event: next state}}``, and
:class:`~p2pboost.net._session.Session` is the only class that moves them, through
:class:`SessionStates`. The multiplexer (:mod:`p2pboost.net._mux`) and the channels never
assign a state; they ask the session, whose methods name the event. A transition missing from
a table is a bug of this process (a session closed twice by the node, a claim of a session that
was claimed already), so asking for it raises
:class:`~p2pboost.exceptions.LocalProtocolError` instead of quietly moving on: an illegal move
is seen where it is made, not three frames later.

The three machines::

    the session's life (SessionState, public)
        OPEN ──CLOSE──▶ CLOSED          closed here: by the application, or the node closing
        OPEN ──FAIL───▶ FAILED          ended on an error (``Session.error`` says which)
        OPEN ──DROP───▶ CLOSED          the node shut down under it (nothing more is sent)
        FAILED ─CLOSE─▶ CLOSED          the application leaves a failed session
        FAILED ─DROP──▶ CLOSED

    who claimed it here (Claim)
        PENDING ──ACCEPT───▶ ACCEPTED   Node.accept_session() took one peer's session: the id
                                        stays free for other peers' sessions of the same id
        PENDING ──DECLARE──▶ DECLARED   Node.session(id, peers) adopted it: the id is now the
                                        declared peers', anyone else's frames are refused
        (a session opened here with Node.session starts DECLARED)

    each peer's side of it, which every channel to that peer reads (PeerSide)
        OPEN ──LEAVE────▶ LEFT          the peer closed its side (CLOSE frame): what it sent
                                        can still be read, then its channels raise
        OPEN ──RESTART──▶ RESTARTED     the peer restarted and lost its state: the session
        LEFT ──RESTART──▶ RESTARTED     fails, and its id is not remembered as ended for it
        RESTARTED ─RESTART─▶ RESTARTED  it restarted again before the application closed
                                        the failed session (each restart is news, none is a
                                        fault)

Events that a peer's frames cause (LEAVE) are different from events this process causes: a
peer may send a second CLOSE for a session, or one after it restarted; that is no bug here,
and the session asks :meth:`SessionStates.allows` first and drops such news rather than
raising. Everything else goes through :meth:`SessionStates.apply`, which raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum

from p2pboost.exceptions import LocalProtocolError

__all__ = [
    "CLAIM_TRANSITIONS",
    "PEER_TRANSITIONS",
    "SESSION_TRANSITIONS",
    "Claim",
    "Event",
    "PeerSide",
    "SessionState",
    "SessionStates",
]


class SessionState(Enum):
    """Where a session is in its life (public: ``Session.state``)."""

    OPEN = "open"
    CLOSED = "closed"  # closed locally (normally)
    FAILED = "failed"  # ended on an error: ``Session.error`` says which


class Claim(Enum):
    """Whether the application here has claimed the session, and how."""

    PENDING = "pending"  # one peer's frames, waiting for the application
    ACCEPTED = "accepted"  # Node.accept_session(): that one peer's session
    DECLARED = "declared"  # Node.session(id, peers): the declared peers' session


class PeerSide(Enum):
    """One peer's side of a session, shared by every channel to that peer."""

    OPEN = "open"
    LEFT = "left"  # the peer closed its side; its data can still be read
    RESTARTED = "restarted"  # the peer restarted while the session ran


class Event(Enum):
    """Every transition's name (the column of the tables below)."""

    CLOSE = "close"
    FAIL = "fail"
    DROP = "drop"
    ACCEPT = "accept"
    DECLARE = "declare"
    LEAVE = "leave"
    RESTART = "restart"


SESSION_TRANSITIONS: Mapping[SessionState, Mapping[Event, SessionState]] = {
    SessionState.OPEN: {
        Event.CLOSE: SessionState.CLOSED,
        Event.FAIL: SessionState.FAILED,
        Event.DROP: SessionState.CLOSED,
    },
    SessionState.FAILED: {
        Event.CLOSE: SessionState.CLOSED,
        Event.DROP: SessionState.CLOSED,
    },
    SessionState.CLOSED: {},
}

CLAIM_TRANSITIONS: Mapping[Claim, Mapping[Event, Claim]] = {
    Claim.PENDING: {Event.ACCEPT: Claim.ACCEPTED, Event.DECLARE: Claim.DECLARED},
    Claim.ACCEPTED: {},
    Claim.DECLARED: {},
}

PEER_TRANSITIONS: Mapping[PeerSide, Mapping[Event, PeerSide]] = {
    PeerSide.OPEN: {Event.LEAVE: PeerSide.LEFT, Event.RESTART: PeerSide.RESTARTED},
    PeerSide.LEFT: {Event.RESTART: PeerSide.RESTARTED},
    PeerSide.RESTARTED: {Event.RESTART: PeerSide.RESTARTED},
}

_SESSION_EVENTS = frozenset({Event.CLOSE, Event.FAIL, Event.DROP})
_CLAIM_EVENTS = frozenset({Event.ACCEPT, Event.DECLARE})
_PEER_EVENTS = frozenset({Event.LEAVE, Event.RESTART})


class SessionStates:
    """The three machines of one session (owned by it; nothing else moves them).

    ``peers`` start with their sides OPEN; ``claim`` is PENDING for a session a peer opened
    here, DECLARED for one the application opened.
    """

    def __init__(self, peers: Iterable[str], *, claim: Claim) -> None:
        self.session = SessionState.OPEN
        self.claim = claim
        self._sides = dict.fromkeys(peers, PeerSide.OPEN)

    def __repr__(self) -> str:
        sides = ", ".join(f"{p}={s.value}" for p, s in sorted(self._sides.items()))
        return f"<SessionStates {self.session.value} {self.claim.value} {{{sides}}}>"

    def side(self, peer: str) -> PeerSide:
        """``peer``'s side of the session (KeyError for a party not in it)."""
        return self._sides[peer]

    def open_to(self, peer: str) -> bool:
        """Whether the session is OPEN and ``peer`` a member whose side is OPEN (False for a
        party not in it): the per-message question, without building anything."""
        return self.session is SessionState.OPEN and self._sides.get(peer) is PeerSide.OPEN

    @property
    def sides(self) -> Mapping[str, PeerSide]:
        """Every member's side, by peer."""
        return self._sides

    def allows(self, event: Event, peer: str | None = None) -> bool:
        """Whether :meth:`apply` would take ``event`` now (``peer``: for a peer's event)."""
        return self._next(event, peer) is not None

    def apply(self, event: Event, peer: str | None = None) -> None:
        """Move on ``event`` (``peer`` names whose side, for LEAVE and RESTART).

        Raises :class:`LocalProtocolError` naming the state and event if the table has no
        such transition.
        """
        target = self._next(event, peer)
        if target is None:
            raise LocalProtocolError(
                f"can't {event.value} a session in state {self._describe(event, peer)}"
            )
        if isinstance(target, SessionState):
            self.session = target
        elif isinstance(target, Claim):
            self.claim = target
        else:
            assert peer is not None
            self._sides[peer] = target

    def set_members(self, peers: Iterable[str]) -> None:
        """The members become ``peers`` (a claim that declares them): a member already here
        keeps its side, a new one starts OPEN, one not declared is no longer a member."""
        self._sides = {peer: self._sides.get(peer, PeerSide.OPEN) for peer in peers}

    def merge(self, other: SessionStates) -> None:
        """Take in the sides of ``other``'s peers (a pending session joined to this one)."""
        for peer, side in other._sides.items():
            self._sides.setdefault(peer, side)

    def _next(self, event: Event, peer: str | None) -> SessionState | Claim | PeerSide | None:
        if event in _SESSION_EVENTS:
            return SESSION_TRANSITIONS[self.session].get(event)
        if event in _CLAIM_EVENTS:
            return CLAIM_TRANSITIONS[self.claim].get(event)
        assert event in _PEER_EVENTS
        if peer not in self._sides:
            return None
        return PEER_TRANSITIONS[self._sides[peer]].get(event)

    def _describe(self, event: Event, peer: str | None) -> str:
        if event in _SESSION_EVENTS:
            return self.session.value
        if event in _CLAIM_EVENTS:
            return self.claim.value
        if peer not in self._sides:
            return f"without peer {peer!r}"
        return f"{self._sides[peer].value} (peer {peer!r})"
