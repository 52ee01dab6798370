"""The transition tables of a session (p2pboost.net._states): every legal move, every illegal one.

Table-driven: every (state, event) pair of each machine is tried; the ones in the table land
where the table says, every other one raises LocalProtocolError and changes nothing. Then the
owner: a Session moves its tables only through its events, and an illegal one raises there.
"""

from __future__ import annotations

import itertools
from enum import Enum
from typing import Any

import pytest

from p2pboost.exceptions import LocalProtocolError, SessionClosed
from p2pboost.net._session import Session
from p2pboost.net._states import (
    CLAIM_TRANSITIONS,
    PEER_TRANSITIONS,
    SESSION_TRANSITIONS,
    Claim,
    Event,
    PeerSide,
    SessionState,
    SessionStates,
)
from p2pboost.net.config import NodeConfig

# The tables as the docs draw them: written out again here, so that a changed table fails.
EXPECTED_SESSION: dict[tuple[Enum, Event], Enum] = {
    (SessionState.OPEN, Event.CLOSE): SessionState.CLOSED,
    (SessionState.OPEN, Event.FAIL): SessionState.FAILED,
    (SessionState.OPEN, Event.DROP): SessionState.CLOSED,
    (SessionState.FAILED, Event.CLOSE): SessionState.CLOSED,
    (SessionState.FAILED, Event.DROP): SessionState.CLOSED,
}
EXPECTED_CLAIM: dict[tuple[Enum, Event], Enum] = {
    (Claim.PENDING, Event.ACCEPT): Claim.ACCEPTED,
    (Claim.PENDING, Event.DECLARE): Claim.DECLARED,
}
EXPECTED_PEER: dict[tuple[Enum, Event], Enum] = {
    (PeerSide.OPEN, Event.LEAVE): PeerSide.LEFT,
    (PeerSide.OPEN, Event.RESTART): PeerSide.RESTARTED,
    (PeerSide.LEFT, Event.RESTART): PeerSide.RESTARTED,
    (PeerSide.RESTARTED, Event.RESTART): PeerSide.RESTARTED,
}
SESSION_EVENTS = (Event.CLOSE, Event.FAIL, Event.DROP)
CLAIM_EVENTS = (Event.ACCEPT, Event.DECLARE)
PEER_EVENTS = (Event.LEAVE, Event.RESTART)


def test_every_event_belongs_to_one_machine() -> None:
    assert sorted(e.value for e in (*SESSION_EVENTS, *CLAIM_EVENTS, *PEER_EVENTS)) == sorted(
        e.value for e in Event
    )


def test_the_tables_are_the_documented_ones() -> None:
    flat: dict[tuple[Enum, Event], Enum] = {
        (state, event): target
        for table in (SESSION_TRANSITIONS, CLAIM_TRANSITIONS, PEER_TRANSITIONS)
        for state, moves in table.items()
        for event, target in moves.items()
    }
    expected: dict[tuple[Enum, Event], Enum] = {}
    for table in (EXPECTED_SESSION, EXPECTED_CLAIM, EXPECTED_PEER):
        expected.update(table)
    assert flat == expected
    assert set(SESSION_TRANSITIONS) == set(SessionState)
    assert set(CLAIM_TRANSITIONS) == set(Claim)
    assert set(PEER_TRANSITIONS) == set(PeerSide)


def _at_session(state: SessionState) -> SessionStates:
    states = SessionStates(["b"], claim=Claim.PENDING)
    states.session = state
    return states


@pytest.mark.parametrize(("state", "event"), list(itertools.product(SessionState, SESSION_EVENTS)))
def test_session_transitions(state: SessionState, event: Event) -> None:
    states = _at_session(state)
    target = EXPECTED_SESSION.get((state, event))
    assert states.allows(event) is (target is not None)
    if target is None:
        with pytest.raises(LocalProtocolError, match=f"can't {event.value} a session in state"):
            states.apply(event)
        assert states.session is state
    else:
        states.apply(event)
        assert states.session is target
    assert states.claim is Claim.PENDING  # one machine's move never moves another
    assert states.side("b") is PeerSide.OPEN


@pytest.mark.parametrize(("claim", "event"), list(itertools.product(Claim, CLAIM_EVENTS)))
def test_claim_transitions(claim: Claim, event: Event) -> None:
    states = SessionStates(["b"], claim=claim)
    target = EXPECTED_CLAIM.get((claim, event))
    assert states.allows(event) is (target is not None)
    if target is None:
        with pytest.raises(LocalProtocolError, match=claim.value):
            states.apply(event)
        assert states.claim is claim
    else:
        states.apply(event)
        assert states.claim is target
    assert states.session is SessionState.OPEN


def _reach(side: PeerSide) -> SessionStates:
    """A session whose peer "b" is at ``side``, reached by legal moves only."""
    states = SessionStates(["b", "c"], claim=Claim.DECLARED)
    path = {
        PeerSide.OPEN: [],
        PeerSide.LEFT: [Event.LEAVE],
        PeerSide.RESTARTED: [Event.RESTART],
    }[side]
    for event in path:
        states.apply(event, "b")
    assert states.side("b") is side
    return states


@pytest.mark.parametrize(("side", "event"), list(itertools.product(PeerSide, PEER_EVENTS)))
def test_peer_side_transitions(side: PeerSide, event: Event) -> None:
    states = _reach(side)
    target = EXPECTED_PEER.get((side, event))
    assert states.allows(event, "b") is (target is not None)
    if target is None:
        with pytest.raises(LocalProtocolError, match="peer 'b'"):
            states.apply(event, "b")
        assert states.side("b") is side
    else:
        states.apply(event, "b")
        assert states.side("b") is target
    assert states.side("c") is PeerSide.OPEN  # one peer's side never moves another's


@pytest.mark.parametrize("event", PEER_EVENTS)
def test_a_stranger_has_no_side_to_move(event: Event) -> None:
    states = SessionStates(["b"], claim=Claim.DECLARED)
    assert not states.allows(event, "x")
    with pytest.raises(LocalProtocolError, match="without peer 'x'"):
        states.apply(event, "x")


def test_members_declared_keep_their_sides_and_merge_takes_new_ones() -> None:
    states = SessionStates(["b"], claim=Claim.PENDING)
    states.apply(Event.LEAVE, "b")
    other = SessionStates(["c"], claim=Claim.PENDING)
    other.apply(Event.RESTART, "c")
    states.merge(other)
    states.set_members(["b", "c", "d"])
    assert dict(states.sides) == {
        "b": PeerSide.LEFT,
        "c": PeerSide.RESTARTED,
        "d": PeerSide.OPEN,
    }
    states.set_members(["d"])
    assert dict(states.sides) == {"d": PeerSide.OPEN}


# -- the owner: a Session moves its table only through events, and an illegal one raises ----


class _Link:
    """What a session does to a link: frames pushed, sessions withdrawn (nothing is sent)."""

    def __init__(self) -> None:
        self.pushed: list[bytes] = []
        self.withdrawn: list[str] = []
        self._seq = 0

    def alloc_seq(self) -> int:
        self._seq += 1
        return self._seq

    def push(self, seq: int, parts: tuple[bytes | memoryview, ...], session: str | None) -> None:
        self.pushed.append(b"".join(bytes(p) for p in parts))

    def withdraw(self, session: str) -> None:
        self.withdrawn.append(session)


class _Host:
    """A SessionHost: the session's view of the multiplexer."""

    def __init__(self, peers: list[str]) -> None:
        self.party_id = "a"
        self.config = NodeConfig()
        self.links: dict[str, Any] = {p: _Link() for p in peers}
        self.forgotten: list[Session] = []

    def forget(self, session: Session) -> None:
        self.forgotten.append(session)


async def test_a_session_moves_only_by_its_events() -> None:
    host = _Host(["b", "c"])
    session = Session(host, "s", ["b"], opener="b")  # a peer's pending session
    claimed = [session.claimed]
    session.accept()
    claimed.append(session.claimed)
    assert claimed == [False, True]
    assert not session.declared
    with pytest.raises(LocalProtocolError, match="can't accept a session in state accepted"):
        session.accept()  # a claim is made once
    with pytest.raises(LocalProtocolError, match="can't declare"):
        session.declare(["b", "c"])
    ch = session.channel("b")
    session.peer_left("b")
    session.peer_left("b")  # a peer's second CLOSE is news of nothing, not a local error
    assert session.has_left("b")
    with pytest.raises(SessionClosed, match="peer 'b' left"):
        await ch.send(1)  # the channel reads its peer's side from the session's table
    session.fail(SessionClosed("gone"), level=None)
    session.fail(SessionClosed("again"), level=None)  # ended already: nothing changes
    seen = [session.state]
    assert str(session.error) == "gone"
    await session.close()
    await session.close()  # idempotent: it looks at the state before asking
    seen.append(session.state)
    assert seen == [SessionState.FAILED, SessionState.CLOSED]
    assert host.forgotten == [session]
    with pytest.raises(LocalProtocolError, match="can't drop a session in state closed"):
        session.drop()  # the node dropping a session it had closed: a bug here, seen here


async def test_a_declared_session_keeps_its_peers_sides() -> None:
    host = _Host(["b", "c"])
    pending = Session(host, "s", ["b"], opener="b")
    pending.peer_left("b")
    pending.declare(["b", "c"])
    assert pending.declared
    assert pending.peers == ("b", "c")
    assert pending.side("b") is PeerSide.LEFT
    assert pending.present() == ["c"]
    pending.peer_restarted("c")
    pending.peer_restarted("c")  # a peer may restart again before the session is closed
    assert pending.ended_for() == ["b"]  # a restarted peer may reopen the id to resume


@pytest.mark.parametrize(("session", "side"), list(itertools.product(SessionState, PeerSide)))
def test_open_to_is_the_session_and_the_side_both_open(
    session: SessionState, side: PeerSide
) -> None:
    # The per-message shortcut agrees with the two states it summarises, for every pair.
    states = _reach(side)
    if session is SessionState.FAILED:
        states.apply(Event.FAIL)
    elif session is SessionState.CLOSED:
        states.apply(Event.CLOSE)
    assert states.session is session
    expected = session is SessionState.OPEN and side is PeerSide.OPEN
    assert states.open_to("b") is expected
    assert states.open_to("x") is False  # a party not in the session
