"""Secure aggregation (Bonawitz et al., CCS 2017) as pure functions on bytes and uint64 arrays.

The server learns the *sum* of the clients' vectors and nothing else. In round ``r`` client
``u`` holds ``x_u`` (fixed-point integers as ``uint64``, so sums wrap mod 2**64) and sends two
vectors (:func:`mask`)::

    y_u = x_u + P_u + S_u        P_u = PRG(k_u,r)                       self mask
    z_u = x_u + S_u + T_u        S_u = sum_v +-PRG(s_uv,r)  (v != u)    pairwise masks
                                 T_u = sum_v +-PRG(t_uv,r)              pairwise cancel masks

(the client with the smaller id adds a pair's mask, the other subtracts it). If every client
of the epoch sent, the server adds the ``z``: ``S`` and ``T`` cancel and *no key is revealed*,
so a round costs one message each way. If some did not, the server adds the ``y`` of those
that did and runs Bonawitz's unmasking round: each survivor reveals this round's self key
``k_u,r`` and its round keys ``s_uv,r`` with the missing clients (:func:`unmask`). A survivor
that dies before revealing is recovered from ``t`` Shamir shares: of its self seed ``b_u``, and
of the missing clients' mask private keys (never both for one client). A late vector of a
missing client stays hidden: its ``y`` behind ``P`` (never revealed), its ``z`` behind ``T``
(made from the *channel* keys, which are never revealed nor shared).

Before a survivor reveals anything it runs Bonawitz's consistency check: it signs the round's
survivor set with its certificate key (:func:`sign_survivors`) and goes on only when at least
``t`` survivors signed exactly that set (:func:`verify_survivors`). Each client signs one set
per epoch (the epoch's keys mask all its rounds), so with ``t`` above half the members no two
sets can both gather ``t`` signatures: a server cannot declare a client dropped to some (to
get their pair keys with it, or shares of its mask key) while it is a survivor to others (to
get its self key, or shares of its self seed), in one round or across two.

Keys, once per *epoch* (a fixed set of clients; a new epoch starts after any dropout):

* every client makes two X25519 key pairs, *mask* and *channel*, and signs both public keys
  with its certificate's ECDSA key (:func:`sign_advert` / :func:`verify_advert`), so a server
  relaying them cannot swap them;
* HKDF-SHA256 turns the mask agreement into ``s_uv`` and the channel agreement into ``t_uv``
  and a share-encryption key (:meth:`EpochKeys.pair_keys`);
* every client draws a self seed ``b_u`` and Shamir-shares (threshold ``t``, GF(2**521 - 1))
  ``b_u`` and its mask private key among the epoch's clients, each share sealed with
  ChaCha20-Poly1305 to its holder (:func:`encrypt_shares`).

Per round, seeds become round keys by HKDF (:func:`round_key`), and round keys become masks by
ChaCha20 (:func:`prg`): one keystream per (key, round, length), read as little-endian uint64.
Revealing a round key shows nothing about any other round.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from p2pboost.certs import party_id_from_certificate
from p2pboost.exceptions import CryptoError, InputError

__all__ = [
    "KEY_BYTES",
    "MAX_ROUND",
    "SHAMIR_PRIME",
    "EpochKeys",
    "PairKeys",
    "Share",
    "add_masks",
    "advert_message",
    "certificate_key",
    "decrypt_shares",
    "encrypt_shares",
    "epoch_context",
    "fingerprint",
    "from_signed",
    "mask",
    "mask_seed",
    "mask_streams",
    "pair_sign",
    "prg",
    "round_key",
    "shamir_combine",
    "shamir_split",
    "sign_advert",
    "sign_survivors",
    "survivors_message",
    "to_unsigned",
    "unmask",
    "verify_advert",
    "verify_survivors",
]

U64 = npt.NDArray[np.uint64]
#: Seeds, round keys and X25519 public keys are 32 bytes.
KEY_BYTES = 32
#: Rounds and vector lengths go into the ChaCha20 nonce as 32-bit fields.
MAX_ROUND = 2**32 - 1
MAX_LENGTH = 2**32 - 1
#: A Mersenne prime above every 256-bit secret: the Shamir field.
SHAMIR_PRIME = 2**521 - 1
_FIELD_BYTES = (SHAMIR_PRIME.bit_length() + 7) // 8  # 66
_LABEL = b"p2pboost/secagg/v1/"


# -- fixed-point vectors ------------------------------------------------------------------------


def to_unsigned(values: npt.NDArray[np.int64]) -> U64:
    """int64 -> uint64 two's complement (a view when possible): sums then wrap mod 2**64."""
    return np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)


def from_signed(total: U64) -> npt.NDArray[np.int64]:
    """uint64 sum -> int64: exact whenever the true sum lies in [-2**63, 2**63)."""
    return np.ascontiguousarray(total, dtype=np.uint64).view(np.int64)


# -- keys ---------------------------------------------------------------------------------------


def _hkdf(secret: bytes, info: bytes, length: int = KEY_BYTES) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=_LABEL + info).derive(
        secret
    )


def _context(*parts: str | int) -> bytes:
    """Unambiguous encoding of context strings: each part length-prefixed."""
    out = bytearray()
    for part in parts:
        raw = str(part).encode()
        out += struct.pack(">I", len(raw)) + raw
    return bytes(out)


def _exchange(private: X25519PrivateKey, peer_public: bytes) -> bytes:
    if len(peer_public) != KEY_BYTES:
        raise CryptoError("an X25519 public key must be 32 bytes")
    try:
        return private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:  # all-zero shared secret: a low-order point
        raise CryptoError(f"bad X25519 public key: {exc}") from None


def _raw_public(private: X25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


@dataclass(frozen=True, slots=True)
class PairKeys:
    """What two clients share in an epoch.

    ``mask_seed`` (from the *mask* key pair, whose private half is Shamir-shared so a dropped
    client's masks can be removed) makes the masks ``S``; ``cancel_seed`` and ``share_key``
    come from the *channel* key pair, which is never revealed.
    """

    mask_seed: bytes
    cancel_seed: bytes
    share_key: bytes


class EpochKeys:
    """One client's secrets for one epoch: two X25519 key pairs and a self-mask seed."""

    def __init__(self) -> None:
        self._mask = X25519PrivateKey.generate()
        self._channel = X25519PrivateKey.generate()
        self.mask_public = _raw_public(self._mask)
        self.channel_public = _raw_public(self._channel)
        self.self_seed = secrets.token_bytes(KEY_BYTES)

    @property
    def mask_private(self) -> bytes:
        """The mask key's private half (32 bytes): what gets Shamir-shared."""
        return self._mask.private_bytes_raw()

    def pair_keys(
        self, me: str, peer: str, mask_public: bytes, channel_public: bytes, context: bytes
    ) -> PairKeys:
        return PairKeys(
            mask_seed=mask_seed(self.mask_private, me, peer, mask_public, context),
            cancel_seed=_hkdf(
                _exchange(self._channel, channel_public), b"cancel" + _pair_ctx(me, peer, context)
            ),
            share_key=_hkdf(
                _exchange(self._channel, channel_public), b"share" + _pair_ctx(me, peer, context)
            ),
        )


def _pair_ctx(me: str, peer: str, context: bytes) -> bytes:
    a, b = sorted((me, peer))
    return _context(a, b) + context


def epoch_context(session: str, epoch: int) -> bytes:
    """Binds every derived key to one run and epoch."""
    return _context("epoch", session, epoch)


def mask_seed(
    mask_private: bytes, me: str, peer: str, peer_mask_public: bytes, context: bytes
) -> bytes:
    """The pair's mask seed from either side's mask private key (the server uses this after
    reconstructing a dropped client's key from Shamir shares)."""
    private = X25519PrivateKey.from_private_bytes(mask_private)
    return _hkdf(_exchange(private, peer_mask_public), b"mask" + _pair_ctx(me, peer, context))


def round_key(seed: bytes, round_id: int, purpose: str) -> bytes:
    """The key of one round, derived from an epoch seed: revealing it shows no other round."""
    if not 0 <= round_id <= MAX_ROUND:
        raise InputError(f"round id must be in [0, {MAX_ROUND}], got {round_id}")
    return _hkdf(seed, _context("round", purpose, round_id))


def pair_sign(me: str, peer: str) -> int:
    """+1 if ``me`` adds the pair's mask, -1 if it subtracts it (the smaller id adds)."""
    if me == peer:
        raise InputError("a client has no pairwise mask with itself")
    return 1 if me < peer else -1


# -- masks --------------------------------------------------------------------------------------


def prg(key: bytes, round_id: int, length: int) -> U64:
    """The first ``length`` uniform uint64 words of the ChaCha20 keystream of ``key``.

    Keys are round keys (:func:`round_key`), each masking one vector, so a shorter vector
    simply takes a prefix: masks can be computed ahead of time for a longer length. The round
    is in the nonce as well, for separation should a key ever be reused.
    """
    if len(key) != KEY_BYTES:
        raise InputError("a mask key must be 32 bytes")
    if not 0 <= round_id <= MAX_ROUND or not 0 <= length <= MAX_LENGTH:
        raise InputError("round id and length must fit in 32 bits")
    nonce = struct.pack("<QQ", 0, round_id)  # 64-bit block counter 0, then the nonce
    encryptor = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
    out = np.zeros(length, dtype="<u8")
    encryptor.update_into(out.view(np.uint8), out.view(np.uint8))  # type: ignore[arg-type]
    return out.view(np.uint64)


def add_masks(
    vector: U64, keys: Iterable[tuple[bytes, int]], round_id: int, *, out: U64 | None = None
) -> U64:
    """``vector + sum(sign * PRG(key))`` mod 2**64 for ``(key, sign)`` pairs."""
    acc = np.array(vector, dtype=np.uint64, copy=True) if out is None else out
    n = acc.size
    for key, sign in keys:
        stream = prg(key, round_id, n)
        if sign > 0:
            acc += stream
        else:
            acc -= stream
    return acc


def mask(
    vector: U64,
    me: str,
    self_seed: bytes,
    pairs: Mapping[str, PairKeys],
    round_id: int,
) -> tuple[U64, U64]:
    """The two vectors client ``me`` sends in ``round_id``: ``(y, z)``.

    ``y = x + P + S`` (self mask ``P``, pairwise masks ``S``) and ``z = x + S + T`` (pairwise
    *cancel* masks ``T`` from the never-revealed channel keys). If every client of the epoch
    sends, the server adds the ``z``: ``S`` and ``T`` cancel and no key is revealed. If some
    did not, it adds the ``y`` of those that did and asks them for this round's self keys and
    their ``S`` keys with the missing ones (:func:`unmask`). A late ``y`` then still hides
    behind ``P`` and its ``z`` behind ``T``.
    """
    arr = np.ascontiguousarray(vector)
    if arr.dtype != np.uint64 or arr.ndim != 1:
        raise InputError("secure aggregation masks 1-D uint64 vectors")
    y_mask, z_mask = mask_streams(me, self_seed, pairs, round_id, arr.size)
    return arr + y_mask, arr + z_mask


def mask_streams(
    me: str, self_seed: bytes, pairs: Mapping[str, PairKeys], round_id: int, length: int
) -> tuple[U64, U64]:
    """The masks ``(P + S, S + T)`` of :func:`mask`, for vectors of up to ``length`` words.

    A client may compute them before it knows its vector (while the server works) and add a
    prefix once the vector is ready: masking then costs two additions.
    """
    pair = [
        (round_key(k.mask_seed, round_id, "pair"), pair_sign(me, peer))
        for peer, k in sorted(pairs.items())
    ]
    cancel = [
        (round_key(k.cancel_seed, round_id, "cancel"), pair_sign(me, peer))
        for peer, k in sorted(pairs.items())
    ]
    base = add_masks(np.zeros(length, dtype=np.uint64), pair, round_id)
    y_mask = add_masks(base, [(round_key(self_seed, round_id, "self"), 1)], round_id)
    z_mask = add_masks(base, cancel, round_id, out=base)
    return y_mask, z_mask


def unmask(
    total: U64,
    round_id: int,
    self_keys: Iterable[bytes],
    pair_keys: Iterable[tuple[str, str, bytes]],
) -> U64:
    """Remove masks from the sum of the survivors' vectors.

    ``self_keys`` are the survivors' round self keys; ``pair_keys`` are ``(survivor,
    dropped, round pairwise key)``: the masks the survivors added for clients that sent
    nothing, which did not cancel.
    """
    keys = [(k, -1) for k in self_keys]
    keys += [(k, -pair_sign(s, d)) for s, d, k in pair_keys]
    return add_masks(total, keys, round_id)


# -- Shamir secret sharing ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Share:
    """Point ``(x, y)`` of a degree ``t-1`` polynomial over GF(SHAMIR_PRIME) with f(0) = secret."""

    x: int
    y: int

    def to_bytes(self) -> bytes:
        return struct.pack(">I", self.x) + self.y.to_bytes(_FIELD_BYTES, "big")

    @classmethod
    def from_bytes(cls, data: bytes) -> Share:
        if len(data) != 4 + _FIELD_BYTES:
            raise CryptoError("a Shamir share has the wrong length")
        x = struct.unpack(">I", data[:4])[0]
        y = int.from_bytes(data[4:], "big")
        if x == 0 or y >= SHAMIR_PRIME:
            raise CryptoError("a Shamir share is out of range")
        return cls(x, y)


def shamir_split(secret: bytes, n: int, t: int) -> list[Share]:
    """Split ``secret`` (at most 64 bytes) into ``n`` shares, any ``t`` of which recover it.

    Shares are at ``x = 1..n``; the coefficients come from :mod:`secrets`.
    """
    if not 1 <= t <= n:
        raise InputError(f"need 1 <= t <= n, got t={t}, n={n}")
    if len(secret) > 64:
        raise InputError("secrets are at most 64 bytes")
    coeffs = [int.from_bytes(secret, "big")] + [
        secrets.randbelow(SHAMIR_PRIME) for _ in range(t - 1)
    ]
    shares = []
    for x in range(1, n + 1):
        y = 0
        for c in reversed(coeffs):  # Horner
            y = (y * x + c) % SHAMIR_PRIME
        shares.append(Share(x, y))
    return shares


def shamir_combine(shares: Sequence[Share], t: int, size: int = KEY_BYTES) -> bytes:
    """The secret from at least ``t`` shares (distinct x); Lagrange interpolation at 0."""
    pts = list({s.x: s for s in shares}.values())
    if len(pts) != len(shares):
        raise CryptoError("Shamir shares repeat an x coordinate")
    if len(pts) < t:
        raise CryptoError(f"need {t} shares to recover a secret, have {len(pts)}")
    pts = pts[:t]
    p = SHAMIR_PRIME
    secret = 0
    for i, si in enumerate(pts):
        num, den = 1, 1
        for j, sj in enumerate(pts):
            if i != j:
                num = num * (-sj.x) % p
                den = den * (si.x - sj.x) % p
        secret = (secret + si.y * num * pow(den, -1, p)) % p
    if secret.bit_length() > 8 * size:
        raise CryptoError("Shamir shares do not recover a valid secret")
    return secret.to_bytes(size, "big")


def encrypt_shares(
    share_key: bytes, shares: Sequence[Share], sender: str, holder: str, ctx: bytes
) -> bytes:
    """``sender``'s shares for ``holder``, sealed so the relaying server cannot read them."""
    nonce = secrets.token_bytes(12)
    aad = _context(sender, holder) + ctx
    plain = b"".join(share.to_bytes() for share in shares)
    return nonce + ChaCha20Poly1305(share_key).encrypt(nonce, plain, aad)


def decrypt_shares(
    share_key: bytes, blob: bytes, sender: str, holder: str, ctx: bytes, count: int
) -> list[Share]:
    """Open ``count`` shares from ``sender``; :class:`CryptoError` if forged or altered."""
    if len(blob) < 12 + 16:
        raise CryptoError(f"shares from {sender!r} are truncated")
    aad = _context(sender, holder) + ctx
    try:
        plain = ChaCha20Poly1305(share_key).decrypt(blob[:12], blob[12:], aad)
    except InvalidTag:
        raise CryptoError(f"shares from {sender!r} fail authentication") from None
    size = 4 + _FIELD_BYTES
    if len(plain) != count * size:
        raise CryptoError(f"shares from {sender!r} have the wrong length")
    return [Share.from_bytes(plain[i * size : (i + 1) * size]) for i in range(count)]


# -- authenticated key adverts ------------------------------------------------------------------


def advert_message(session: str, epoch: int, client: str, public: bytes) -> bytes:
    """The bytes a client signs: its X25519 key bound to the session, epoch and its id."""
    return _LABEL + b"advert" + _context(session, epoch, client) + public


def sign_advert(
    signing_key: ec.EllipticCurvePrivateKey, session: str, epoch: int, client: str, public: bytes
) -> bytes:
    """ECDSA-SHA256 signature of :func:`advert_message` with the client's certificate key."""
    msg = advert_message(session, epoch, client, public)
    return signing_key.sign(msg, ec.ECDSA(hashes.SHA256()))


def verify_advert(
    ca: x509.Certificate,
    cert_pem: bytes,
    signature: bytes,
    session: str,
    epoch: int,
    client: str,
    public: bytes,
) -> ec.EllipticCurvePublicKey:
    """Check that ``client`` (per a CA-issued certificate) signed ``public`` for this epoch;
    returns the certificate's key, which checks the client's other signatures of the epoch
    (:func:`verify_survivors`).

    Raises :class:`CryptoError` naming what failed: not issued by the CA, expired, issued to
    another party, or a bad signature.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise CryptoError(f"{client}: advert certificate does not parse") from None
    ca_key = ca.public_key()
    algo = cert.signature_hash_algorithm
    if not isinstance(ca_key, ec.EllipticCurvePublicKey) or algo is None:
        raise CryptoError("the federation CA must be an ECDSA CA")
    try:
        ca_key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(algo))
    except InvalidSignature:
        raise CryptoError(f"{client}: advert certificate is not issued by the CA") from None
    if cert.issuer != ca.subject:
        raise CryptoError(f"{client}: advert certificate names another issuer")
    now = dt.datetime.now(dt.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise CryptoError(f"{client}: advert certificate is not valid now")
    try:
        owner = party_id_from_certificate(cert)
    except InputError as exc:
        raise CryptoError(f"{client}: {exc}") from None
    if owner != client:
        raise CryptoError(f"{client}: advert certificate belongs to {owner!r}")
    key = cert.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise CryptoError(f"{client}: advert certificate key is not ECDSA")
    try:
        key.verify(
            signature, advert_message(session, epoch, client, public), ec.ECDSA(hashes.SHA256())
        )
    except InvalidSignature:
        raise CryptoError(f"{client}: bad signature on its key advert") from None
    return key


def certificate_key(cert_pem: bytes) -> ec.EllipticCurvePublicKey:
    """The ECDSA key of a certificate (PEM), unchecked against any CA: the server uses it to
    tell which client sent a bad signature (the clients check the certificates themselves)."""
    try:
        key = x509.load_pem_x509_certificate(cert_pem).public_key()
    except ValueError:
        raise CryptoError("certificate does not parse") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise CryptoError("certificate key is not ECDSA")
    return key


# -- Bonawitz's consistency check ---------------------------------------------------------------


def survivors_message(session: str, epoch: int, round_id: int, survivors: Iterable[str]) -> bytes:
    """The bytes a survivor signs before anything of a round is unmasked: the round's
    survivor set (sorted), bound to the run, the epoch and the round."""
    ids = sorted(survivors)
    return _LABEL + b"survivors" + _context(session, epoch, round_id, len(ids), *ids)


def sign_survivors(
    signing_key: ec.EllipticCurvePrivateKey,
    session: str,
    epoch: int,
    round_id: int,
    survivors: Iterable[str],
) -> bytes:
    """ECDSA-SHA256 signature of :func:`survivors_message` with the client's certificate key."""
    msg = survivors_message(session, epoch, round_id, survivors)
    return signing_key.sign(msg, ec.ECDSA(hashes.SHA256()))


def verify_survivors(
    key: ec.EllipticCurvePublicKey,
    signature: bytes,
    session: str,
    epoch: int,
    round_id: int,
    survivors: Iterable[str],
) -> None:
    """Check a signature of :func:`sign_survivors` with the signer's certificate key (the one
    :func:`verify_advert` returned); :class:`CryptoError` if it signs anything else."""
    try:
        key.verify(
            signature,
            survivors_message(session, epoch, round_id, survivors),
            ec.ECDSA(hashes.SHA256()),
        )
    except InvalidSignature:
        raise CryptoError("the signature does not match this survivor set") from None


def fingerprint(data: bytes) -> str:
    """Short hex digest for logs."""
    return hashlib.sha256(data).hexdigest()[:16]
