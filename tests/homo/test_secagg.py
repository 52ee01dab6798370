"""The secure-aggregation math: masked sums are exact, dropouts are recoverable, masks look
uniform, and forged keys or shares are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost import certs
from p2pboost.crypto.secagg import (
    EpochKeys,
    PairKeys,
    Share,
    decrypt_shares,
    encrypt_shares,
    epoch_context,
    from_signed,
    mask,
    mask_seed,
    mask_streams,
    prg,
    round_key,
    shamir_combine,
    shamir_split,
    sign_advert,
    sign_survivors,
    to_unsigned,
    unmask,
    verify_advert,
    verify_survivors,
)
from p2pboost.exceptions import CryptoError, InputError

SESSION = "s-1"


CTX = epoch_context(SESSION, 0)


def _epoch(ids: list[str]) -> tuple[dict[str, EpochKeys], dict[str, dict[str, PairKeys]]]:
    keys = {c: EpochKeys() for c in ids}
    pairs = {
        u: {
            v: keys[u].pair_keys(u, v, keys[v].mask_public, keys[v].channel_public, CTX)
            for v in ids
            if v != u
        }
        for u in ids
    }
    return keys, pairs


def _send(
    keys: dict[str, EpochKeys],
    pairs: dict[str, dict[str, PairKeys]],
    x: dict[str, np.ndarray],
    r: int,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {c: mask(to_unsigned(x[c]), c, keys[c].self_seed, pairs[c], r) for c in x}


def test_pair_keys_agree_and_differ_by_context() -> None:
    a, b = EpochKeys(), EpochKeys()
    ab = a.pair_keys("a", "b", b.mask_public, b.channel_public, CTX)
    ba = b.pair_keys("b", "a", a.mask_public, a.channel_public, CTX)
    assert ab == ba
    assert len({ab.mask_seed, ab.cancel_seed, ab.share_key}) == 3
    other = a.pair_keys("a", "b", b.mask_public, b.channel_public, epoch_context(SESSION, 1))
    assert other.mask_seed != ab.mask_seed
    # The server, given a's mask private key (from Shamir shares), derives the same seed.
    assert mask_seed(a.mask_private, "a", "b", b.mask_public, CTX) == ab.mask_seed
    with pytest.raises(CryptoError):
        a.pair_keys("a", "b", bytes(32), b.channel_public, CTX)  # low-order point


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 5),
    length=st.integers(1, 300),
    round_id=st.integers(0, 2**32 - 1),
    seed=st.integers(0, 2**32 - 1),
)
def test_masked_sum_equals_plain_sum_mod_2_64(
    n: int, length: int, round_id: int, seed: int
) -> None:
    ids = [f"c{i}" for i in range(n)]
    keys, pairs = _epoch(ids)
    rng = np.random.default_rng(seed)
    xs = {c: rng.integers(-(2**52), 2**52, size=length, dtype=np.int64) for c in ids}
    sent = _send(keys, pairs, xs, round_id)
    # Everybody sent: the z vectors sum to the plain sum, no key revealed.
    z_total = np.zeros(length, dtype=np.uint64)
    y_total = np.zeros(length, dtype=np.uint64)
    for c, (y, z) in sent.items():
        assert not np.array_equal(y, to_unsigned(xs[c]))
        assert not np.array_equal(z, to_unsigned(xs[c]))
        z_total += z
        y_total += y
    np.testing.assert_array_equal(from_signed(z_total), sum(xs.values()))
    # The y vectors need the round self keys.
    self_keys = [round_key(keys[c].self_seed, round_id, "self") for c in ids]
    clear = from_signed(unmask(y_total, round_id, self_keys, []))
    np.testing.assert_array_equal(clear, sum(xs.values()))


def test_dropped_client_masks_are_removed_with_survivor_round_keys() -> None:
    ids = ["a", "b", "c", "d"]
    keys, pairs = _epoch(ids)
    r = 7
    rng = np.random.default_rng(0)
    xs = {c: rng.integers(-1000, 1000, size=50, dtype=np.int64) for c in ids}
    survivors, dropped = ["a", "b", "c"], ["d"]
    sent = _send(keys, pairs, xs, r)
    total = np.zeros(50, dtype=np.uint64)
    for c in survivors:
        total += sent[c][0]
    self_keys = [round_key(keys[c].self_seed, r, "self") for c in survivors]
    pair_keys = [
        (s, d, round_key(pairs[s][d].mask_seed, r, "pair")) for s in survivors for d in dropped
    ]
    clear = from_signed(unmask(total, r, self_keys, pair_keys))
    np.testing.assert_array_equal(clear, xs["a"] + xs["b"] + xs["c"])
    # d's late y, even with every revealed key removed, still hides behind its self mask.
    late = unmask(sent["d"][0], r, [], [(s, "d", k) for s, _, k in pair_keys])
    assert not np.array_equal(from_signed(late), xs["d"])


def test_dropouts_before_and_after_sending_are_recovered_from_t_shares() -> None:
    """e never sends; d sends, then dies before revealing: a, b, c hold enough shares."""
    ids = ["a", "b", "c", "d", "e"]
    keys, pairs = _epoch(ids)
    t, r = 3, 11
    self_shares = {c: shamir_split(keys[c].self_seed, len(ids), t) for c in ids}
    key_shares = {c: shamir_split(keys[c].mask_private, len(ids), t) for c in ids}
    xs = {c: np.arange(20, dtype=np.int64) * (i + 1) for i, c in enumerate(ids)}
    sent = _send(keys, pairs, {c: xs[c] for c in "abcd"}, r)
    total = np.zeros(20, dtype=np.uint64)
    for y, _ in sent.values():
        total += y
    holders = (0, 1, 2)  # a, b, c
    seed_d = shamir_combine([self_shares["d"][i] for i in holders], t)
    private_e = shamir_combine([key_shares["e"][i] for i in holders], t)
    assert seed_d == keys["d"].self_seed
    self_keys = [round_key(keys[c].self_seed, r, "self") for c in "abc"]
    self_keys.append(round_key(seed_d, r, "self"))
    pair_keys = [(s, "e", round_key(pairs[s]["e"].mask_seed, r, "pair")) for s in "abc"]
    seed_de = mask_seed(private_e, "e", "d", keys["d"].mask_public, CTX)
    pair_keys.append(("d", "e", round_key(seed_de, r, "pair")))
    clear = from_signed(unmask(total, r, self_keys, pair_keys))
    np.testing.assert_array_equal(clear, xs["a"] + xs["b"] + xs["c"] + xs["d"])


@settings(max_examples=30, deadline=None)
@given(secret=st.binary(min_size=32, max_size=32), n=st.integers(1, 8), data=st.data())
def test_shamir_any_t_shares_recover_fewer_do_not(
    secret: bytes, n: int, data: st.DataObject
) -> None:
    t = data.draw(st.integers(1, n))
    shares = shamir_split(secret, n, t)
    subset = data.draw(st.permutations(shares)).copy()[:t]
    assert shamir_combine(subset, t) == secret
    if t > 1:
        with pytest.raises(CryptoError, match="need"):
            shamir_combine(subset[: t - 1], t)
        # t-1 shares plus a forged one give something else (or an invalid secret).
        forged = [*subset[: t - 1], Share(subset[-1].x, (subset[-1].y + 1) % (2**521 - 1))]
        try:
            assert shamir_combine(forged, t) != secret
        except CryptoError:
            pass


def test_shamir_rejects_bad_parameters() -> None:
    with pytest.raises(InputError):
        shamir_split(b"x" * 32, 3, 4)
    s = shamir_split(b"x" * 32, 3, 2)
    with pytest.raises(CryptoError, match="repeat"):
        shamir_combine([s[0], s[0]], 2)
    with pytest.raises(CryptoError):
        Share.from_bytes(b"\x00" * 10)


def test_prg_is_deterministic_per_round_and_length() -> None:
    k = b"k" * 32
    np.testing.assert_array_equal(prg(k, 3, 100), prg(k, 3, 100))
    assert not np.array_equal(prg(k, 3, 100), prg(k, 4, 100))
    np.testing.assert_array_equal(prg(k, 3, 100)[:50], prg(k, 3, 50))  # prefixes: see mask_streams
    with pytest.raises(InputError):
        prg(b"short", 0, 10)
    with pytest.raises(InputError):
        round_key(k, -1, "self")


def test_masks_computed_ahead_for_a_longer_vector_match() -> None:
    keys, pairs = _epoch(["a", "b"])
    x = np.arange(10, dtype=np.uint64)
    y_mask, z_mask = mask_streams("a", keys["a"].self_seed, pairs["a"], 4, 64)
    y, z = mask(x, "a", keys["a"].self_seed, pairs["a"], 4)
    np.testing.assert_array_equal(y, x + y_mask[:10])
    np.testing.assert_array_equal(z, x + z_mask[:10])


def test_masked_vector_low_bytes_are_uniform() -> None:
    """Chi-square on the low byte of a masked vector whose plaintext is all zeros."""
    ids = ["a", "b", "c"]
    keys, pairs = _epoch(ids)
    x = np.zeros(1 << 16, dtype=np.uint64)  # the worst case: a constant histogram
    y, z = mask(x, "a", keys["a"].self_seed, pairs["a"], 1)
    for vec, shift in ((y, 0), (y, 8), (y, 56), (z, 0)):
        observed = np.bincount(
            ((y >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.intp), minlength=256
        )
        expected = vec.size / 256
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        # 255 degrees of freedom: P(chi2 > 400) is about 2e-8 for a uniform source.
        assert 150 < chi2 < 400, (shift, chi2)


def test_shares_are_sealed_to_their_holder() -> None:
    a, b = EpochKeys(), EpochKeys()
    key = a.pair_keys("a", "b", b.mask_public, b.channel_public, CTX).share_key
    shares = [shamir_split(a.self_seed, 2, 2)[1], shamir_split(a.mask_private, 2, 2)[1]]
    blob = encrypt_shares(key, shares, "a", "b", b"ctx")
    assert decrypt_shares(key, blob, "a", "b", b"ctx", 2) == shares
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(CryptoError, match="'a'"):
        decrypt_shares(key, tampered, "a", "b", b"ctx", 2)
    with pytest.raises(CryptoError):
        decrypt_shares(key, blob, "c", "b", b"ctx", 2)  # claimed by another sender
    with pytest.raises(CryptoError):
        decrypt_shares(b"w" * 32, blob, "a", "b", b"ctx", 2)  # wrong key
    with pytest.raises(CryptoError, match="length"):
        decrypt_shares(key, blob, "a", "b", b"ctx", 1)


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("secagg-federation")
    certs.init(out, ["a", "b"])
    return out


def _load(federation: Path, party: str) -> tuple[object, bytes, x509.Certificate]:
    key = serialization.load_pem_private_key((federation / party / "key.pem").read_bytes(), None)
    cert = (federation / party / "cert.pem").read_bytes()
    ca = x509.load_pem_x509_certificate((federation / party / "ca.pem").read_bytes())
    return key, cert, ca


def test_signed_adverts_verify_and_forgeries_fail(federation: Path, tmp_path: Path) -> None:
    key_a, cert_a, ca = _load(federation, "a")
    key_b, cert_b, _ = _load(federation, "b")
    pub = EpochKeys().mask_public
    sig = sign_advert(key_a, SESSION, 0, "a", pub)  # type: ignore[arg-type]
    verify_advert(ca, cert_a, sig, SESSION, 0, "a", pub)
    with pytest.raises(CryptoError, match="bad signature"):
        verify_advert(ca, cert_a, sig, SESSION, 0, "a", EpochKeys().mask_public)  # swapped key
    with pytest.raises(CryptoError, match="bad signature"):
        verify_advert(ca, cert_a, sig, SESSION, 1, "a", pub)  # replayed into another epoch
    sig_b = sign_advert(key_b, SESSION, 0, "a", pub)  # type: ignore[arg-type]
    with pytest.raises(CryptoError, match="belongs to 'b'"):
        verify_advert(ca, cert_b, sig_b, SESSION, 0, "a", pub)
    other = tmp_path / "other"
    certs.init(other, ["a"])  # same party id, another CA
    key_x, cert_x, _ = _load(other, "a")
    sig_x = sign_advert(key_x, SESSION, 0, "a", pub)  # type: ignore[arg-type]
    with pytest.raises(CryptoError, match="not issued by the CA"):
        verify_advert(ca, cert_x, sig_x, SESSION, 0, "a", pub)


def test_survivor_sets_are_signed_for_one_run_epoch_and_round(federation: Path) -> None:
    key_a, cert_a, ca = _load(federation, "a")
    key_b, _, _ = _load(federation, "b")
    assert isinstance(key_a, ec.EllipticCurvePrivateKey)
    assert isinstance(key_b, ec.EllipticCurvePrivateKey)
    pub = EpochKeys().mask_public
    # The key that checks a's survivor signatures is the one its advert was checked with.
    advert = sign_advert(key_a, SESSION, 3, "a", pub)
    verified = verify_advert(ca, cert_a, advert, SESSION, 3, "a", pub)
    assert verified.public_numbers() == key_a.public_key().public_numbers()
    sig = sign_survivors(key_a, SESSION, 3, 9, ["b", "a"])
    verify_survivors(verified, sig, SESSION, 3, 9, ["a", "b"])  # the set, in any order
    for session, epoch, round_id, survivors in [
        (SESSION, 3, 9, ["a"]),  # another set
        (SESSION, 3, 9, ["a", "b", "c"]),
        (SESSION, 3, 10, ["a", "b"]),  # another round
        (SESSION, 4, 9, ["a", "b"]),  # another epoch
        ("s-2", 3, 9, ["a", "b"]),  # another run
    ]:
        with pytest.raises(CryptoError, match="survivor set"):
            verify_survivors(verified, sig, session, epoch, round_id, survivors)
    forged = sign_survivors(key_b, SESSION, 3, 9, ["a", "b"])
    with pytest.raises(CryptoError, match="survivor set"):
        verify_survivors(verified, forged, SESSION, 3, 9, ["a", "b"])  # b's key, not a's
    with pytest.raises(CryptoError, match="survivor set"):
        verify_survivors(verified, sig[:-1] + bytes([sig[-1] ^ 1]), SESSION, 3, 9, ["a", "b"])
