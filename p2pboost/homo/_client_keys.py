"""A client's side of secure aggregation: its key epochs, the masking of its vectors, and the
rules under which it signs a survivor set, reveals round keys or gives Shamir shares.

:class:`ClientKeys` is the half of the client's state machine
(:class:`~p2pboost.homo.client.Client`) that holds secrets; it is sans-I/O too. What it holds
grows with the run:

- :class:`_EpochState`, from ``epoch``: this epoch's keys, pair keys and the members'
  certificate keys (from ``adverts``), the Shamir shares it holds (from ``shares``), the
  rounds it masked with them, and the one survivor set it signed; a new epoch replaces it;
- :class:`_Rounds`, always: the last round answered and masks computed ahead.

The rules keep the client's vector secret whatever the server asks (see
``docs/explanation/secagg.md``). It reveals anything only after Bonawitz's consistency check:
it signs one survivor set per *epoch* (the epoch ends with a dropout, and its keys mask every
round of it), for a round it masked with the epoch's keys, only with itself among the
survivors, some member dropped and at least ``t`` (and ``min_clients``) survivors; it reveals
that round's keys only when at least ``t`` of those survivors signed exactly the set it
signed. A server that declared a live client dropped to some clients (who then reveal their
pair keys with it, or shares of its mask key) cannot also get its self key from it, or shares
of its self seed from the others, in that round or another of the epoch: both would need ``t``
signatures on a second set. It answers one recovery per epoch, for that set, and never gives
both shares of one client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.asymmetric import ec

from p2pboost.crypto.secagg import (
    KEY_BYTES,
    EpochKeys,
    PairKeys,
    Share,
    decrypt_shares,
    encrypt_shares,
    epoch_context,
    mask,
    mask_streams,
    round_key,
    shamir_split,
    sign_advert,
    sign_survivors,
    to_unsigned,
    verify_advert,
    verify_survivors,
)
from p2pboost.exceptions import CryptoError, InputError, RemoteProtocolError
from p2pboost.homo._messages import (
    Advert,
    Adverts,
    Epoch,
    Masked,
    Ready,
    Recover,
    Recovered,
    Reveal,
    Sealed,
    Shares,
    Signed,
    Survivors,
    Unmask,
)
from p2pboost.homo._vectors import GRID_LENGTH
from p2pboost.homo.config import ClientIdentity, HomoConfig

__all__ = ["ClientKeys"]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
#: ``bad(what)``: the error that ends the run, naming the server (the client adds its phase).
Bad = Callable[[str], RemoteProtocolError]


@dataclass
class _EpochState:
    """One key epoch, from its ``epoch`` message on."""

    number: int
    members: list[str]
    threshold: int
    keys: EpochKeys
    context: bytes  # binds derived keys and sealed shares to the run and epoch
    #: Pair keys with every other member (from ``adverts`` on).
    pairs: dict[str, PairKeys] = field(default_factory=dict)
    #: Every member's certificate key, checked against the CA (from ``adverts`` on): they
    #: check the signatures of survivor sets.
    signers: dict[str, ec.EllipticCurvePublicKey] = field(default_factory=dict)
    #: Shares (of the self seed, of the mask key) per member (ours from ``adverts`` on).
    held: dict[str, tuple[Share, Share]] = field(default_factory=dict)
    #: Rounds whose vector was masked with these keys.
    rounds: set[int] = field(default_factory=set)
    #: The one round this epoch's keys may be revealed for: (round, survivors, dropped) as
    #: signed (the consistency check), and whether its keys were revealed.
    signed: tuple[int, list[str], list[str]] | None = None
    revealed: bool = False
    #: Masks may be made with these keys: shares are held and no survivor set was signed.
    usable: bool = False
    #: This epoch's one recovery was answered.
    recovered: bool = False

    @property
    def public(self) -> bytes:
        """What this client advertises: its mask and channel public keys."""
        return self.keys.mask_public + self.keys.channel_public


@dataclass(frozen=True, slots=True)
class _Ahead:
    """Masks of round ``round`` in epoch ``epoch``, computed before the request came."""

    epoch: int
    round: int
    y: U64
    z: U64


@dataclass
class _Rounds:
    """Aggregation rounds: the last one answered, masks computed ahead."""

    last: int = 0
    last_length: int = 0
    ahead: _Ahead | None = None


class ClientKeys:
    """A client's secrets and the rules under which it reveals any of them.

    ``identity`` signs its key adverts and survivor sets (required in masked runs); ``bad``
    makes the error that ends the run naming the server; ``run`` is set from ``hello``.
    """

    def __init__(
        self, me: str, config: HomoConfig, identity: ClientIdentity | None, bad: Bad
    ) -> None:
        self.me = me
        self.config = config
        self.identity = identity
        self.bad = bad
        self.run = ""
        self.rounds = _Rounds()
        self.epoch: _EpochState | None = None

    # -- keys ---------------------------------------------------------------------------------

    def on_epoch(self, msg: Epoch) -> Advert:
        if not self.config.masking:
            raise self.bad("key setup in an unmasked run")
        if msg.epoch <= (self.epoch.number if self.epoch is not None else 0):
            raise self.bad(f"epoch {msg.epoch!r} is not new")
        members = msg.members
        if members != sorted(set(members)) or self.me not in members:
            raise self.bad("bad member list")
        n, t = len(members), msg.threshold
        if n < self.config.min_clients or not self.config.shamir_threshold(n) <= t <= n:
            raise self.bad(f"threshold {t!r} for {n} members is not acceptable")
        if self.identity is None:
            raise InputError("masked training needs the client's identity (certificate key)")
        ep = _EpochState(msg.epoch, members, t, EpochKeys(), epoch_context(self.run, msg.epoch))
        self.epoch = ep
        sig = sign_advert(self.identity.signing_key, self.run, ep.number, self.me, ep.public)
        return Advert(ep.public, sig, self.identity.cert_pem)

    def on_adverts(self, msg: Adverts) -> Sealed:
        ep = self.epoch
        if ep is None or msg.epoch != ep.number or ep.pairs:
            raise self.bad("adverts out of order")
        if sorted(msg.public) != ep.members:
            raise self.bad("adverts must cover exactly the epoch's members")
        assert self.identity is not None  # an epoch exists only with one
        if msg.public[self.me] != ep.public:
            raise self.bad("our own key advert was altered")
        ep.signers[self.me] = self.identity.signing_key.public_key()
        publics: set[bytes] = {ep.keys.mask_public, ep.keys.channel_public}
        for c in ep.members:
            if c == self.me:
                continue
            pub = msg.public[c]
            try:
                ep.signers[c] = verify_advert(
                    self.identity.ca, msg.cert[c], msg.signature[c], self.run, ep.number, c, pub
                )
            except TypeError as exc:
                raise self.bad(f"malformed advert of {c}: {exc}") from None
            except CryptoError as exc:
                raise RemoteProtocolError(f"key advert rejected: {exc}", peer=c) from None
            m_pub, c_pub = pub[:KEY_BYTES], pub[KEY_BYTES:]
            if m_pub in publics or c_pub in publics:
                raise RemoteProtocolError("key advert repeats another client's key", peer=c)
            publics |= {m_pub, c_pub}
            try:
                ep.pairs[c] = ep.keys.pair_keys(self.me, c, m_pub, c_pub, ep.context)
            except CryptoError as exc:
                raise RemoteProtocolError(f"key advert rejected: {exc}", peer=c) from None
        n = len(ep.members)
        seed_shares = shamir_split(ep.keys.self_seed, n, ep.threshold)
        key_shares = shamir_split(ep.keys.mask_private, n, ep.threshold)
        sealed = {}
        for i, c in enumerate(ep.members):
            pair = (seed_shares[i], key_shares[i])
            if c == self.me:
                ep.held[self.me] = pair
            else:
                sealed[c] = encrypt_shares(ep.pairs[c].share_key, pair, self.me, c, ep.context)
        return Sealed(sealed)

    def on_shares(self, msg: Shares) -> Ready:
        ep = self.epoch
        if ep is None or not ep.pairs or msg.epoch != ep.number or len(ep.held) != 1:
            raise self.bad("shares out of order")
        if sorted(msg.shares) != [m for m in ep.members if m != self.me]:
            raise self.bad("a share from every other member is expected")
        x = ep.members.index(self.me) + 1
        for sender, blob in msg.shares.items():
            try:
                seed_share, key_share = decrypt_shares(
                    ep.pairs[sender].share_key, blob, sender, self.me, ep.context, 2
                )
            except CryptoError as exc:
                raise RemoteProtocolError(f"sealed shares rejected: {exc}", peer=sender) from None
            if seed_share.x != x or key_share.x != x:
                raise RemoteProtocolError("sealed shares are for another holder", peer=sender)
            ep.held[sender] = (seed_share, key_share)
        ep.usable = True
        return Ready()

    # -- rounds -------------------------------------------------------------------------------

    def check_round(self, r: int) -> None:
        """A request for round ``r`` must come after every round answered (no replays)."""
        if r <= self.rounds.last:
            raise self.bad(f"round {r!r} is not after round {self.rounds.last} (replay?)")

    def mask(self, r: int, vector: I64) -> Masked:
        """Our reply to round ``r``: ``vector`` masked (in the clear in unmasked runs)."""
        rounds = self.rounds
        rounds.last = r
        plain = to_unsigned(vector)
        if not self.config.masking:
            return Masked(r, None, plain.copy())
        ep = self.epoch
        if ep is None or not ep.usable:
            raise self.bad("masked input requested before keys were set up")
        ahead, rounds.ahead = rounds.ahead, None
        if (
            ahead is not None
            and (ahead.epoch, ahead.round) == (ep.number, r)
            and ahead.y.size >= plain.size
        ):
            y, z = plain + ahead.y[: plain.size], plain + ahead.z[: plain.size]
        else:
            y, z = mask(plain, self.me, ep.keys.self_seed, ep.pairs, r)
        rounds.last_length = plain.size
        ep.rounds.add(r)
        return Masked(r, y, z)

    def prepare_next(self) -> None:
        """Compute the next round's masks ahead of time (rounds are numbered in sequence),
        long enough for a vector twice the last one or a gradient-grid vector."""
        ep = self.epoch
        if not self.config.masking or ep is None or not ep.usable:
            return
        length = max(2 * self.rounds.last_length, GRID_LENGTH)
        nxt = self.rounds.last + 1
        y_mask, z_mask = mask_streams(self.me, ep.keys.self_seed, ep.pairs, nxt, length)
        self.rounds.ahead = _Ahead(ep.number, nxt, y_mask, z_mask)

    # -- a dropout: consistency check, unmasking, recovery ------------------------------------

    def on_survivors(self, msg: Survivors) -> Signed:
        """Sign the survivor set of a round we masked with this epoch's keys: one set per
        epoch (keys revealed for two rounds, or for two sets, could unmask a client), and only
        a set we could be asked to unmask."""
        r, survivors, dropped = msg.round, msg.survivors, msg.dropped
        ep = self.epoch
        if ep is None or r not in ep.rounds:
            raise self.bad(f"survivors of round {r!r}, in which we sent nothing with these keys")
        if ep.signed is not None:
            raise self.bad(
                f"a second survivor set in epoch {ep.number} (round {r}; we signed round"
                f" {ep.signed[0]}'s): we sign one per epoch"
            )
        if survivors != sorted(set(survivors)) or sorted(survivors + dropped) != ep.members:
            raise self.bad("survivors and dropped must split the epoch's members")
        if self.me not in survivors:
            raise self.bad(f"round {r}: declared dropped, though we sent our vector")
        if not dropped:
            raise self.bad(f"refusing to sign round {r}'s survivors: no dropout")
        if len(survivors) < max(self.config.min_clients, ep.threshold):
            raise self.bad(
                f"refusing to sign round {r}'s survivors: {len(survivors)} survivors, fewer"
                f" than the threshold {ep.threshold} or min_clients {self.config.min_clients}"
            )
        assert self.identity is not None  # an epoch exists only with one
        ep.signed = (r, survivors, dropped)
        ep.usable = False  # the epoch ends with the dropout: no more masks with its keys
        return Signed(sign_survivors(self.identity.signing_key, self.run, ep.number, r, survivors))

    def on_unmask(self, msg: Unmask) -> Reveal:
        r = msg.round
        ep = self.epoch
        if ep is None or ep.signed is None or ep.signed[0] != r or ep.revealed:
            raise self.bad(f"unmasking round {r!r}, whose survivors we did not sign, or again")
        _, survivors, dropped = ep.signed
        if (msg.survivors, msg.dropped) != (survivors, dropped):
            raise self.bad(f"unmasking round {r} with other survivors than those we signed")
        self._check_signatures(ep, r, survivors, msg.signatures)
        ep.revealed = True
        return Reveal(
            r,
            round_key(ep.keys.self_seed, r, "self"),
            {d: round_key(ep.pairs[d].mask_seed, r, "pair") for d in dropped},
        )

    def _check_signatures(
        self, ep: _EpochState, r: int, survivors: list[str], signatures: dict[str, bytes]
    ) -> None:
        """At least ``t`` survivors signed exactly ``survivors`` (every signature relayed must
        be one of a survivor, on that set)."""
        if len(signatures) < ep.threshold:
            raise self.bad(
                f"round {r}: too few survivors signed the survivor set"
                f" ({len(signatures)}, threshold {ep.threshold})"
            )
        outside = sorted(set(signatures) - set(survivors))
        if outside:
            raise self.bad(f"round {r}: signatures of clients outside the survivor set: {outside}")
        for c, signature in sorted(signatures.items()):
            try:
                verify_survivors(ep.signers[c], signature, self.run, ep.number, r, survivors)
            except CryptoError as exc:
                raise self.bad(f"round {r}: the signature of {c}: {exc}") from None

    def on_recover(self, msg: Recover) -> Recovered:
        ep = self.epoch
        if (
            ep is None
            or ep.signed is None
            or ep.signed[0] != msg.round
            or not ep.revealed
            or ep.recovered
        ):
            raise self.bad("recovery for a round we did not unmask, or a second one")
        if not msg.self_of:
            raise self.bad("recovery needs the clients to recover")
        _, survivors, dropped = ep.signed
        # Bonawitz's rule: self seeds only of that round's survivors, mask keys only of its
        # dropped clients; never both for one client.
        if (
            any(u not in survivors or u == self.me for u in msg.self_of)
            or sorted(msg.key_of) != dropped
        ):
            raise self.bad("recovery asks for shares we must not give")
        if not set(msg.self_of) | set(msg.key_of) <= set(ep.held):
            raise self.bad("recovery asks for shares we do not hold")
        ep.recovered = True
        return Recovered(
            {u: ep.held[u][0].to_bytes() for u in msg.self_of},
            {d: ep.held[d][1].to_bytes() for d in msg.key_of},
        )
