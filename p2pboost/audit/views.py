"""What an attacking party receives, recorded below its node and decoded as its node decodes it.

The attacks of ``p2pboost audit`` and ``python -m benchmarks attacks`` must run on what a party
legitimately holds: its own model file and the messages it receives. Rather than reading the
protocol's internal state (which would show more than the wire carries, and break whenever that
code moves), the federation runs over the testing kit's in-memory fabric with every party's
transport wrapped: each connection records the transport messages it receives, untouched.
:func:`decoded` then does what the receiving node does with them: it parses the node's frames
(:func:`p2pboost.net._frames.parse_message`), reassembles each channel's fragments (the
``DATAX`` payload being the next transport message), and decodes every payload with the wire
codec. The result is the list of message maps the party's protocol code received, in order;
``"t"`` is each map's tag.

From those maps, :func:`host_partitions` rebuilds what a host learns of each tree during
training (the docs' leakage table, docs/explanation/leakage.md): the rows the tree samples
(``tree`` messages) and, layer by layer, which rows of each node go left (``layer``
messages, and the host's own answers for the splits it owns, which a layer sent ahead of the
answer leaves out). :func:`guest_bits` rebuilds what the guest learns from one-round
inference: the decision bit of every host split for every row of the batch (``bits``
messages).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost import codec
from p2pboost.net._frames import FLAG_END, FLAG_EOS, FLAG_RAW, Data, parse_message
from p2pboost.testing import MemoryFabric
from p2pboost.transports.base import Connection, ConnectionHandler, Listener, Transport

__all__ = [
    "HostView",
    "TapFabric",
    "decoded",
    "guest_bits",
    "host_partitions",
]

I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
_FRAMES = 0x02


class _TapConnection(Connection):
    """Passes everything through; keeps a copy of every message received."""

    def __init__(self, inner: Connection, log: list[bytes]) -> None:
        self.inner = inner
        self.peer_id = inner.peer_id
        self.log = log

    @property
    def closed(self) -> bool:
        return self.inner.closed

    async def send(self, message: bytes) -> None:
        await self.inner.send(message)

    async def receive(self) -> bytes:
        message = await self.inner.receive()
        self.log.append(bytes(message))
        return message

    async def close(self) -> None:
        await self.inner.close()


class _TapTransport(Transport):
    def __init__(self, inner: Transport, logs: list[list[bytes]], peers: list[str]) -> None:
        self.inner = inner
        self.logs = logs  # one log per connection: a DATAX payload follows its own frame
        self.peers = peers  # each connection's peer, parallel to ``logs``

    def _tap(self, conn: Connection) -> Connection:
        self.logs.append([])
        self.peers.append(conn.peer_id)
        return _TapConnection(conn, self.logs[-1])

    async def connect(self, address: str, *, peer_id: str) -> Connection:
        return self._tap(await self.inner.connect(address, peer_id=peer_id))

    async def serve(self, address: str, handler: ConnectionHandler) -> Listener:
        async def wrapped(conn: Connection) -> None:
            await handler(self._tap(conn))

        return await self.inner.serve(address, wrapped)


@dataclass
class TapFabric(MemoryFabric):
    """The in-memory fabric, recording every transport message each party receives."""

    received: dict[str, list[list[bytes]]] = field(default_factory=lambda: defaultdict(list))
    #: Each of a party's connection logs' peer, parallel to ``received[party]``.
    senders: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self) -> None:
        super().__init__()

    def transport(self, party: str, peers: Iterable[str]) -> Transport:
        inner = super().transport(party, peers)
        return _TapTransport(inner, self.received[party], self.senders[party])

    def mark(self, party: str) -> list[int]:
        """Where each of ``party``'s connection logs stands now (see :func:`decoded`)."""
        return [len(log) for log in self.received[party]]


def decoded(
    fabric: TapFabric, party: str, since: list[int] | None = None, sender: str | None = None
) -> list[Any]:
    """Every codec-encoded message ``party`` received (after ``since``, a :meth:`TapFabric.mark`;
    from ``sender`` only, when given), decoded as its node decodes it; raw blobs and
    end-of-stream markers are left out."""
    out: list[Any] = []
    seen: set[tuple[int, int]] = set()  # (connection, seq): a resent frame counts once
    for c, log in enumerate(fabric.received[party]):
        if sender is not None and fabric.senders[party][c] != sender:
            continue
        start = since[c] if since is not None and c < len(since) else 0
        partial: dict[tuple[str, str], list[bytes]] = defaultdict(list)
        pending: Data | None = None
        for message in log[start:]:
            if pending is not None:  # a DATAX frame's payload: this whole message
                frames: list[Any] = [
                    Data(pending.seq, pending.session, pending.channel, pending.flags, message)
                ]
                pending = None
            elif not message or message[0] != _FRAMES:
                continue  # the connection's HELLO
            else:
                _, frames = parse_message(message)
            for frame in frames:
                if not isinstance(frame, Data) or (c, frame.seq) in seen:
                    continue
                if frame.external:
                    pending = frame
                    continue
                seen.add((c, frame.seq))
                if frame.flags & FLAG_EOS:
                    continue
                key = (frame.session, frame.channel)
                partial[key].append(bytes(frame.payload))
                if frame.flags & FLAG_END:
                    payload = b"".join(partial.pop(key))
                    if not frame.flags & FLAG_RAW:
                        out.append(codec.decode(payload))  # the node's default limits
    return out


@dataclass
class HostView:
    """What a host learns of the trees during training, per tree it hears of.

    ``groups[t]``: the row sets of tree ``t`` the host observed, each as an int array of row
    positions: the sampled rows (when the tree samples), and every node below the root that a
    ``layer`` message created. ``leaves[t]``: for every row, the deepest node the host saw it
    in (-1: a tree the host took no part in). ``informed``: trees whose instance spaces the
    host received (a tree start with an empty feature mask and nothing else tells it nothing).
    """

    n_rows: int
    groups: list[list[I64]] = field(default_factory=list)
    leaves: list[I64] = field(default_factory=list)

    @property
    def informed(self) -> int:
        return sum(1 for g in self.groups if g)


def host_partitions(messages: list[Any], n_rows: int, sent: Sequence[Any] = ()) -> HostView:
    """Rebuild each tree's row sets from a host's received ``tree`` and ``layer`` maps, and
    ``sent``, the maps the host sent (its own ``decided`` answers: a layer that comes before
    the answer leaves out the left sets the host decided itself, which it holds)."""
    view = HostView(n_rows)
    position: I64 | None = None
    n_nodes = 0
    answers = iter([m for m in sent if isinstance(m, dict) and m.get("t") == "decided"])
    own: dict[int, Any] = {}  # node -> the host's own left set (bitmap) of this layer
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        tag = msg.get("t")
        if tag == "decide":
            answer = next(answers, None)
            if answer is not None:
                own = {int(n): b for n, b in zip(msg["nodes"], answer["bitmaps"], strict=False)}
        elif tag == "tree":
            position = np.zeros(n_rows, dtype=np.int64)
            n_nodes = 1
            view.groups.append([])
            view.leaves.append(np.full(n_rows, -1, dtype=np.int64))
            sample = msg.get("sample")
            if sample is not None:
                bits = np.unpackbits(np.asarray(sample, dtype=np.uint8))[:n_rows].astype(bool)
                view.groups[-1].append(np.flatnonzero(bits))
        elif tag == "layer" and position is not None:
            new = position.copy()
            decided = set(np.asarray(msg.get("decided", ()), dtype=np.int64).tolist())
            for node, left, right, bitmap in zip(
                msg["nodes"], msg["left"], msg["right"], msg["bitmaps"], strict=True
            ):
                if int(node) in decided:
                    if int(node) not in own:
                        raise ValueError(
                            f"layer leaves out node {int(node)}'s left set, the host's own "
                            "answer: pass the messages the host sent (sent=)"
                        )
                    bitmap = own[int(node)]
                rows = np.flatnonzero(position == node)
                go_left = np.unpackbits(np.asarray(bitmap, dtype=np.uint8))[: rows.size]
                go_left = go_left.astype(bool)
                new[rows] = np.where(go_left, left, right)
                view.groups[-1] += [rows[go_left], rows[~go_left]]
                n_nodes += 2
            position = new
            view.leaves[-1] = position.copy()
    return view


def guest_bits(messages: list[Any], n_rows: int) -> tuple[I64, I64, B8]:
    """``(tree, node, go_left)`` of every host split the guest's received ``bits`` maps hold:
    ``go_left[s, i]`` for split ``s`` and row ``i`` of the batch."""
    trees: list[I64] = []
    nodes: list[I64] = []
    bits: list[B8] = []
    for msg in messages:
        if isinstance(msg, dict) and msg.get("t") == "bits" and "tree" in msg:
            t = np.asarray(msg["tree"], dtype=np.int64)
            width = (n_rows + 7) // 8
            packed = np.asarray(msg["bits"], dtype=np.uint8).reshape(t.size, width)
            trees.append(t)
            nodes.append(np.asarray(msg["node"], dtype=np.int64))
            bits.append(np.unpackbits(packed, axis=1)[:, :n_rows].astype(bool))
    if not trees:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.zeros((0, n_rows), bool)
    return np.concatenate(trees), np.concatenate(nodes), np.concatenate(bits)
