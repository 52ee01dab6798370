"""The secure-aggregation math: masked sums are exact, dropouts are recoverable, masks look
uniform, and forged keys or shares are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost import certs
from p2pboost.crypto.secagg import (
    EpochKeys,
    Share,
    decrypt_share,
    derive_pair_keys,
    encrypt_share,
    from_signed,
    mask,
    prg,
    round_key,
    shamir_combine,
    shamir_split,
    sign_advert,
    to_unsigned,
    unmask,
    verify_advert,
)
from p2pboost.exceptions import CryptoError, InputError

SESSION = "s-1"


def _epoch(ids: list[str]) -> tuple[dict[str, EpochKeys], dict[str, dict[str, bytes]]]:
    keys = {c: EpochKeys() for c in ids}
    seeds = {
        u: {
            v: derive_pair_keys(keys[u], u, v, keys[v].public, SESSION, 0).mask_seed
            for v in ids
            if v != u
        }
        for u in ids
    }
    return keys, seeds


def test_pair_keys_agree_and_differ_by_context() -> None:
    a, b = EpochKeys(), EpochKeys()
    ab = derive_pair_keys(a, "a", "b", b.public, SESSION, 0)
    ba = derive_pair_keys(b, "b", "a", a.public, SESSION, 0)
    assert ab == ba
    assert ab.mask_seed != ab.share_key
    assert derive_pair_keys(a, "a", "b", b.public, SESSION, 1) != ab  # another epoch
    with pytest.raises(CryptoError):
        a.agree(bytes(32), b"")  # low-order point: all-zero shared secret


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
    keys, seeds = _epoch(ids)
    rng = np.random.default_rng(seed)
    xs = {c: rng.integers(-(2**52), 2**52, size=length, dtype=np.int64) for c in ids}
    total = np.zeros(length, dtype=np.uint64)
    for c in ids:
        y = mask(to_unsigned(xs[c]), c, keys[c].self_seed, seeds[c], round_id)
        assert not np.array_equal(y, to_unsigned(xs[c]))
        total += y
    self_keys = [round_key(keys[c].self_seed, round_id, "self") for c in ids]
    clear = from_signed(unmask(total, round_id, self_keys, []))
    np.testing.assert_array_equal(clear, sum(xs.values()))


def test_dropped_client_masks_are_removed_with_survivor_round_keys() -> None:
    ids = ["a", "b", "c", "d"]
    keys, seeds = _epoch(ids)
    r = 7
    rng = np.random.default_rng(0)
    xs = {c: rng.integers(-1000, 1000, size=50, dtype=np.int64) for c in ids}
    survivors, dropped = ["a", "b", "c"], ["d"]
    total = np.zeros(50, dtype=np.uint64)
    for c in survivors:
        total += mask(to_unsigned(xs[c]), c, keys[c].self_seed, seeds[c], r)
    self_keys = [round_key(keys[c].self_seed, r, "self") for c in survivors]
    pair_keys = [(s, d, round_key(seeds[s][d], r, "pair")) for s in survivors for d in dropped]
    clear = from_signed(unmask(total, r, self_keys, pair_keys))
    np.testing.assert_array_equal(clear, xs["a"] + xs["b"] + xs["c"])


def test_client_that_dies_after_sending_is_recovered_from_t_shares() -> None:
    ids = ["a", "b", "c", "d"]
    keys, seeds = _epoch(ids)
    t, r = 3, 11
    shares = {c: shamir_split(keys[c].self_seed, len(ids), t) for c in ids}
    xs = {c: np.arange(20, dtype=np.int64) * (i + 1) for i, c in enumerate(ids)}
    total = np.zeros(20, dtype=np.uint64)
    for c in ids:  # everybody sent; "d" dies before revealing its round self key
        total += mask(to_unsigned(xs[c]), c, keys[c].self_seed, seeds[c], r)
    recovered = shamir_combine([shares["d"][i] for i in (0, 1, 2)], t)  # held by a, b, c
    assert recovered == keys["d"].self_seed
    self_keys = [round_key(keys[c].self_seed, r, "self") for c in "abc"]
    self_keys.append(round_key(recovered, r, "self"))
    np.testing.assert_array_equal(from_signed(unmask(total, r, self_keys, [])), sum(xs.values()))


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
    assert not np.array_equal(prg(k, 3, 100)[:50], prg(k, 3, 50))  # length is in the nonce
    with pytest.raises(InputError):
        prg(b"short", 0, 10)
    with pytest.raises(InputError):
        round_key(k, -1, "self")


def test_masked_vector_low_bytes_are_uniform() -> None:
    """Chi-square on the low byte of a masked vector whose plaintext is all zeros."""
    ids = ["a", "b", "c"]
    keys, seeds = _epoch(ids)
    x = np.zeros(1 << 16, dtype=np.uint64)  # the worst case: a constant histogram
    y = mask(x, "a", keys["a"].self_seed, seeds["a"], 1)
    for shift in (0, 8, 56):
        observed = np.bincount(
            ((y >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.intp), minlength=256
        )
        expected = y.size / 256
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        # 255 degrees of freedom: P(chi2 > 350) < 1e-4 for a uniform source.
        assert 150 < chi2 < 350, (shift, chi2)


def test_shares_are_sealed_to_their_holder() -> None:
    a, b = EpochKeys(), EpochKeys()
    key = derive_pair_keys(a, "a", "b", b.public, SESSION, 0).share_key
    share = shamir_split(a.self_seed, 2, 2)[1]
    blob = encrypt_share(key, share, "a", "b", b"ctx")
    assert decrypt_share(key, blob, "a", "b", b"ctx") == share
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(CryptoError, match="'a'"):
        decrypt_share(key, tampered, "a", "b", b"ctx")
    with pytest.raises(CryptoError):
        decrypt_share(key, blob, "c", "b", b"ctx")  # claimed by another sender
    with pytest.raises(CryptoError):
        decrypt_share(b"w" * 32, blob, "a", "b", b"ctx")  # wrong key


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
    pub = EpochKeys().public
    sig = sign_advert(key_a, SESSION, 0, "a", pub)  # type: ignore[arg-type]
    verify_advert(ca, cert_a, sig, SESSION, 0, "a", pub)
    with pytest.raises(CryptoError, match="bad signature"):
        verify_advert(ca, cert_a, sig, SESSION, 0, "a", EpochKeys().public)  # swapped key
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
