"""The server's view of the clients: membership, key epochs, asking, dropping, and secure
aggregation rounds with Bonawitz's consistency check, unmasking and Shamir recovery.

:meth:`Federation.aggregate` is the one thing the training code needs: the exact sum of every
active client's vector for a request. Everything about who is still there lives here:

- a client that does not answer in ``round_timeout``, or whose session fails, is *dropped*
  (its session is aborted); fewer than ``min_clients`` left ends the run with a
  :class:`~p2pboost.exceptions.ProtocolError`;
- a client that answers something invalid ends the run with a
  :class:`~p2pboost.exceptions.RemoteProtocolError` naming it (every reply goes through the
  message kit's :func:`~p2pboost.protocols._messages.decode`);
- masking needs keys among exactly the active clients: after a dropout the round is still
  completed (the survivors sign the survivor set, each checks that ``t`` of them signed the
  same, then they reveal that round's keys; a client that died after sending is recovered
  from ``t`` Shamir shares), then :class:`Restart` tells the caller to start its stage again,
  and the next aggregate renews the keys among the survivors (a new epoch). Fewer than ``t``
  survivors (or signatures) abandon the round unmasked instead: nothing of it is revealed;
- a round every member sent in reveals nothing about anyone: the pairwise masks of the ``z``
  vectors cancel in the sum, so no consistency check, key or share is asked for (the common
  path costs one message each way);
- a client whose process *restarted* (its node says so: a new process that lost its state) is
  not dropped when the server can take it back (``rejoin``): it is set aside, and
  :meth:`Federation.readmit`, called by the training code before each stage, opens its new
  session (waiting up to ``round_timeout`` for it), greets it (hello), replays everything
  broadcast so far (the model header and every finished tree: the client's state) and adds
  it back; the stage then runs again with every client, so the model is the one an
  uninterrupted run grows. Too few clients left to complete a round while one is on its way
  back abandons the round unmasked (nothing of it is revealed) and restarts the stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.secagg import (
    KEY_BYTES,
    Share,
    certificate_key,
    epoch_context,
    from_signed,
    mask_seed,
    round_key,
    shamir_combine,
    unmask,
    verify_survivors,
)
from p2pboost.exceptions import (
    CryptoError,
    P2PBoostError,
    PeerDisconnected,
    ProtocolError,
    RemoteProtocolError,
)
from p2pboost.homo._messages import (
    Advert,
    Adverts,
    Collect,
    Command,
    Epoch,
    FinishedTree,
    Hello,
    Joined,
    Masked,
    Ready,
    Recover,
    Recovered,
    Reply,
    Reveal,
    Sealed,
    Shares,
    Signed,
    Survivors,
    Unmask,
)
from p2pboost.homo.config import CHANNEL, HomoConfig, HomoPhase, Tap
from p2pboost.net.node import Channel, Session
from p2pboost.protocols._messages import decode, send

__all__ = ["Federation", "Rejoin", "Restart"]

logger = logging.getLogger("p2pboost.homo.estimators")

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
R = TypeVar("R", bound=Reply)


#: ``rejoin(client)``: the new session of a client whose process restarted (it waits until the
#: client opens it).
Rejoin = Callable[[str], Awaitable[Session]]


class Restart(Exception):
    """Membership changed: the current stage starts again with the survivors."""


class _Dropped(Exception):
    """A client did not answer in time or its session ended (``args[0]``: why;
    ``restarted``: its process restarted, so it may come back)."""

    def __init__(self, why: str, *, restarted: bool = False) -> None:
        super().__init__(why)
        self.restarted = restarted


class Federation:
    """The server's view of the clients: channels, membership, epochs and aggregation.

    ``run_id`` names the run in every signature and key derivation (see
    :func:`~p2pboost.crypto.secagg.epoch_context`).
    """

    def __init__(
        self,
        sessions: Mapping[str, Session],
        config: HomoConfig,
        tap: Tap | None,
        run_id: str,
        rejoin: Rejoin | None = None,
    ) -> None:
        self.channels: dict[str, Channel] = {c: s.channel(c, CHANNEL) for c, s in sessions.items()}
        self.sessions = dict(sessions)
        self.config = config
        self.tap = tap
        self.run_id = run_id
        self.active = sorted(sessions)
        #: Clients dropped from the run, and why (for the server's result and its operator).
        self.dropped: dict[str, str] = {}
        self.members: list[str] | None = None  # the current epoch's (None: must renew keys)
        self.epoch = 0
        self.round = 0
        self.threshold = 0
        self.phase = HomoPhase.HELLO
        self.mask_publics: dict[str, bytes] = {}
        #: Each member's certificate (PEM) from its advert: checks its survivor signatures.
        self.certs: dict[str, bytes] = {}
        self.rejoin = rejoin
        #: Restarted clients on their way back (readmitted before the next stage).
        self.returning: set[str] = set()
        #: Everything broadcast so far, in order: what a readmitted client is sent.
        self.replay: list[Command] = []

    def _tap(self, kind: str, who: str, obj: object) -> None:
        if self.tap is not None:
            self.tap(kind, who, obj)

    # -- asking -------------------------------------------------------------------------------

    async def _ask(self, client: str, msg: Command, expect: type[R]) -> R:
        ch = self.channels[client]
        try:
            async with asyncio.timeout(self.config.round_timeout):
                await send(ch, msg)
                reply = await ch.recv()
        except TimeoutError:
            raise _Dropped(
                f"no answer within round_timeout {self.config.round_timeout:g} s"
                f" ({self.phase.value})"
            ) from None
        except RemoteProtocolError:
            raise
        except (P2PBoostError, ConnectionError) as exc:
            logger.warning("client %s dropped (%s): %s", client, self.phase.value, exc)
            restarted = isinstance(exc, PeerDisconnected) and exc.restarted
            raise _Dropped(f"{exc} ({self.phase.value})", restarted=restarted) from None
        self._tap("recv", client, reply)
        return decode(reply, expect, client)

    async def ask_all(
        self, clients: Sequence[str], msgs: Mapping[str, Command], expect: type[R]
    ) -> dict[str, R]:
        """Send each client its message and collect replies; silent clients are dropped."""

        async def one(c: str) -> tuple[str, R | _Dropped]:
            try:
                return c, await self._ask(c, msgs[c], expect)
            except _Dropped as why:
                return c, why

        results = await asyncio.gather(*(one(c) for c in clients))
        replies = {c: r for c, r in results if not isinstance(r, _Dropped)}
        for c, r in results:
            if isinstance(r, _Dropped):
                await self.drop(c, str(r), restarted=r.restarted)
        return replies

    async def ask_same(self, clients: Sequence[str], msg: Command, expect: type[R]) -> dict[str, R]:
        """:meth:`ask_all` with one message for everyone."""
        return await self.ask_all(clients, dict.fromkeys(clients, msg), expect)

    async def drop(self, client: str, reason: str, *, restarted: bool = False) -> None:
        """Take ``client`` out of the run (``restarted`` and a ``rejoin``: until it is back)."""
        if client in self.active:
            self.active.remove(client)
            if restarted and self.rejoin is not None:
                logger.warning("client %s restarted (%s): taking it back", client, reason)
                self.returning.add(client)
            else:
                self.dropped[client] = reason
                logger.warning(
                    "client %s dropped out (%s); %d remain", client, reason, len(self.active)
                )
                with contextlib.suppress(Exception):
                    await self.sessions[client].abort("dropped from the federation")
        self._check_quorum()

    def _check_quorum(self) -> None:
        if len(self.active) + len(self.returning) < self.config.min_clients:
            raise ProtocolError(
                f"only {len(self.active)} clients remain, fewer than min_clients "
                f"{self.config.min_clients}"
            )

    async def readmit(self, hello: Hello, n_features: int) -> None:
        """Take back every restarted client whose new session opens within ``round_timeout``:
        ``hello`` (its answer must name ``n_features``), then everything broadcast so far.
        A client that does not come back, or fails on the way, is dropped."""
        for client in sorted(self.returning):
            self.returning.discard(client)
            assert self.rejoin is not None  # only then is a client returning
            with contextlib.suppress(Exception):  # the old process's session: ended, free its id
                await self.sessions[client].close()
            try:
                async with asyncio.timeout(self.config.round_timeout):
                    session = await self.rejoin(client)
                self.sessions[client] = session
                self.channels[client] = session.channel(client, CHANNEL)
                joined = await self._ask(client, hello, Joined)  # RemoteProtocolError: ends
                if joined.n_features != n_features:
                    raise RemoteProtocolError(
                        f"came back with {joined.n_features} features, not {n_features}",
                        peer=client,
                    )
                for msg in self.replay:
                    async with asyncio.timeout(self.config.round_timeout):
                        await send(self.channels[client], msg)
            except RemoteProtocolError:
                raise
            except (TimeoutError, _Dropped, P2PBoostError, ConnectionError) as exc:
                self.dropped[client] = f"restarted and did not come back: {exc or 'timed out'}"
                logger.warning("client %s: %s", client, self.dropped[client])
                self._check_quorum()
                continue
            trees = sum(isinstance(m, FinishedTree) for m in self.replay)
            logger.info("client %s is back (%d finished trees replayed)", client, trees)
            self.active = sorted([*self.active, client])
            self.members = None  # new keys among everyone

    async def broadcast(self, msg: Command) -> None:
        """Send ``msg`` to every active client (one-way: no answer is expected); it is kept
        for clients readmitted later."""
        self.replay.append(msg)

        async def one(c: str) -> None:
            try:
                async with asyncio.timeout(self.config.round_timeout):
                    await send(self.channels[c], msg)
            except (TimeoutError, P2PBoostError, ConnectionError) as exc:
                restarted = isinstance(exc, PeerDisconnected) and exc.restarted
                why = f"{msg.TAG!r} could not be delivered: {exc or 'timed out'}"
                await self.drop(c, why, restarted=restarted)

        await asyncio.gather(*(one(c) for c in list(self.active)))

    # -- keys ---------------------------------------------------------------------------------

    async def renew_keys(self) -> None:
        """AdvertiseKeys and ShareKeys among the active clients (a new epoch); none while a
        restarted client is on its way back (the stage restarts with it first)."""
        self.phase = HomoPhase.KEYS
        while not self.returning:  # a client restarted: keys after it is back
            self.epoch += 1
            members = list(self.active)
            n = len(members)
            t = self.config.shamir_threshold(n)
            adverts = await self.ask_same(members, Epoch(self.epoch, members, t), Advert)
            if len(adverts) < n:
                continue
            for c, a in adverts.items():
                self.mask_publics[c] = a.public[:KEY_BYTES]
                self.certs[c] = a.cert
            relay = Adverts(
                self.epoch,
                public={c: a.public for c, a in adverts.items()},
                signature={c: a.signature for c, a in adverts.items()},
                cert={c: a.cert for c, a in adverts.items()},
            )
            sealed = await self.ask_same(members, relay, Sealed)
            if len(sealed) < n:
                continue
            inbox: dict[str, dict[str, bytes]] = {c: {} for c in members}
            for sender, reply in sealed.items():
                if sorted(reply.shares) != sorted(m for m in members if m != sender):
                    raise RemoteProtocolError("shares must address every other member", peer=sender)
                for holder, blob in reply.shares.items():
                    inbox[holder][sender] = blob
            msgs = {c: Shares(self.epoch, inbox[c]) for c in members}
            ready = await self.ask_all(members, msgs, Ready)
            if len(ready) < n:
                continue
            self.members, self.threshold = members, t
            return

    # -- one aggregation ----------------------------------------------------------------------

    async def aggregate(self, request: Callable[[int], Collect], length: int) -> I64:
        """The sum over the active clients of their vectors of length ``length`` (int64,
        exact) for ``request(round)``.

        Raises :class:`Restart` after completing the round if membership changed, and before
        starting one while a restarted client is on its way back (found here or during the key
        renewal): the stage must run again with it, after :meth:`readmit`.
        """
        if self.config.masking and self.members != self.active and not self.returning:
            await self.renew_keys()
        if self.returning:
            raise Restart("a restarted client is on its way back")
        self.round += 1
        r = self.round
        members = list(self.active)
        msg = request(r)
        replies = await self.ask_same(members, msg, Masked)
        y_vecs: dict[str, U64] = {}
        z_vecs: dict[str, U64] = {}
        for c, reply in replies.items():
            if reply.round != r:
                raise RemoteProtocolError(
                    f"masked vector for round {reply.round!r}, expected round {r}"
                    " (a replayed or stale message)",
                    peer=c,
                )
            y = reply.y
            if reply.z.shape != (length,) or (
                self.config.masking and (y is None or y.shape != (length,))
            ):
                raise RemoteProtocolError(
                    f"round {r} ({msg.TAG}): expected uint64 vectors of length {length}", peer=c
                )
            z_vecs[c] = reply.z
            if y is not None and self.config.masking:
                y_vecs[c] = y
        survivors = sorted(z_vecs)
        if len(survivors) < self.config.min_clients:
            if self.returning:  # abandoned unmasked; again once they are back
                self.members = None
                raise Restart(msg.TAG)
            raise ProtocolError(f"round {r}: only {len(survivors)} clients sent a vector")
        changed = len(survivors) < len(members)
        total = np.zeros(length, dtype=np.uint64)
        if not changed or not self.config.masking:
            for v in z_vecs.values():  # everyone sent: the pairwise masks cancel
                total += v
        else:
            for v in y_vecs.values():
                total += v
            unmasked = await self._unmask(r, total, members, survivors)
            if unmasked is None:  # too few survivors vouch for the set: nothing is revealed
                self.members = None
                raise Restart(msg.TAG)
            total = unmasked
        result = from_signed(total).copy()
        self._tap("aggregate", msg.TAG, {"round": r, "contributors": survivors, "total": result})
        if changed:
            self.members = None
            raise Restart(msg.TAG)
        return result

    async def _consistency(
        self, r: int, survivors: list[str], dropped: list[str]
    ) -> dict[str, bytes] | None:
        """Bonawitz's consistency check: every survivor signs the survivor set of round ``r``;
        the signatures (signer -> signature), or ``None`` if fewer than ``t`` survivors signed
        (the round is then abandoned: no client would reveal anything for it).

        A client that sends a signature that does not verify ends the run, named: relayed, it
        would make every honest client refuse the round and blame the server.
        """
        if len(survivors) < self.threshold:
            return None
        replies = await self.ask_same(survivors, Survivors(r, survivors, dropped), Signed)
        for c, rep in sorted(replies.items()):
            try:
                key = certificate_key(self.certs[c])
                verify_survivors(key, rep.signature, self.run_id, self.epoch, r, survivors)
            except CryptoError as exc:
                raise RemoteProtocolError(
                    f"round {r}: survivor set signature: {exc}", peer=c
                ) from None
        if len(replies) < self.threshold:
            return None
        return {c: rep.signature for c, rep in replies.items()}

    async def _unmask(
        self, r: int, total: U64, members: list[str], survivors: list[str]
    ) -> U64 | None:
        """Bonawitz's unmasking round: some members sent nothing in round ``r``. ``None``: the
        consistency check failed for too few signatures, nothing was revealed."""
        dropped = sorted(set(members) - set(survivors))
        signatures = await self._consistency(r, survivors, dropped)
        if signatures is None:
            logger.warning(
                "round %d: fewer than %d of its %d survivors signed the survivor set;"
                " abandoned unmasked",
                r,
                self.threshold,
                len(survivors),
            )
            return None
        unmasking = Unmask(r, survivors, dropped, signatures)
        reveals = await self.ask_same(sorted(signatures), unmasking, Reveal)
        self_keys: list[bytes] = []
        pair_keys: list[tuple[str, str, bytes]] = []
        for c, rep in reveals.items():
            if rep.round != r or sorted(rep.pair_keys) != dropped:
                raise RemoteProtocolError(f"round {r}: malformed unmasking keys", peer=c)
            self_keys.append(rep.self_key)
            pair_keys += [(c, d, k) for d, k in rep.pair_keys.items()]
        missing = sorted(set(survivors) - set(reveals))
        if missing:
            # They sent, then died: rebuild their self seeds and the dropped clients' mask keys
            # from t Shamir shares (never both for one client).
            holders = sorted(reveals)
            if len(holders) < self.threshold:
                raise ProtocolError(
                    f"round {r}: {missing} died after sending and only {len(holders)} clients"
                    f" answered; {self.threshold} shares are needed"
                )
            recs = await self.ask_same(holders, Recover(r, missing, dropped), Recovered)
            if len(recs) < self.threshold:
                raise ProtocolError(f"round {r}: too few clients answered the recovery")
            seed_shares = {c: rep.self_seeds for c, rep in recs.items()}
            key_shares = {c: rep.mask_keys for c, rep in recs.items()}
            seeds = {u: self._combine(seed_shares, "self", u, r) for u in missing}
            keys = {d: self._combine(key_shares, "key", d, r) for d in dropped}
            ctx = epoch_context(self.run_id, self.epoch)
            for u in missing:
                self_keys.append(round_key(seeds[u], r, "self"))
                for d in dropped:
                    seed = mask_seed(keys[d], d, u, self.mask_publics[u], ctx)
                    pair_keys.append((u, d, round_key(seed, r, "pair")))
        return unmask(total, r, self_keys, pair_keys)

    def _combine(self, shares_of: dict[str, dict[str, bytes]], kind: str, of: str, r: int) -> bytes:
        """``of``'s secret from the holders' shares (``shares_of[holder][of]``)."""
        shares = []
        for c, blobs in shares_of.items():
            blob = blobs.get(of)
            if blob is None:
                raise RemoteProtocolError(f"round {r}: no {kind} share of {of}", peer=c)
            try:
                shares.append(Share.from_bytes(blob))
            except CryptoError as exc:
                raise RemoteProtocolError(f"round {r}: {exc}", peer=c) from None
        try:
            return shamir_combine(shares, self.threshold)
        except CryptoError as exc:
            raise ProtocolError(f"round {r}: cannot recover {of}: {exc}") from None
