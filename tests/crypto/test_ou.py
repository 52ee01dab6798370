"""Okamoto-Uchiyama: keys, encryption tables, homomorphic operations, the wire, packing.

The scheme-neutral code (engine, histograms, compression, codec) must treat an OU key exactly
as a Paillier key, with OU's own sizes: ciphertexts below ``n`` (``key_bytes`` wide),
plaintexts below ``2**plaintext_bits < p``. Keys have Coron, Naccache and Paillier's structure
(``p - 1 = t u``, decryption by ``t``); keys made before it (no ``t``, a random ``g``, saved as
``public || p || q``) must keep loading and decrypting with ``p - 1``.
"""

from __future__ import annotations

import secrets
from typing import Any

import gmpy2  # type: ignore[import-untyped]
import msgpack
import numpy as np
import pytest
from gmpy2 import mpz
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost.codec import ExtCode, decode, encode
from p2pboost.crypto.compress import compress, open_split_infos
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import make_keypair, make_table, public_key_from_bytes
from p2pboost.crypto.ou import OUPrivateKey, OUPublicKey, OUTable, generate_ou_keypair
from p2pboost.crypto.packing import PackingSpec, pack
from p2pboost.crypto.paillier import CiphertextBatch, add, negate, scalar_mul, subtract
from p2pboost.exceptions import CodecError, CryptoError, InputError, KeyMismatchError
from p2pboost.gbdt.fixedpoint import choose_grid, to_fixed


@pytest.fixture(scope="module")
def ou() -> tuple[OUPublicKey, OUPrivateKey]:
    return generate_ou_keypair(1024, allow_insecure=True)


def _old_prime(bits: int) -> mpz:
    return gmpy2.next_prime(mpz(secrets.randbits(bits)) | (mpz(3) << (bits - 2)))


def _legacy_keypair(bits: int) -> tuple[OUPublicKey, bytes]:
    """A key made as before ``t``: random primes, a random ``g`` (only ``p - 1`` clears its
    randomisers), saved as ``public || p || q``; returns the public key and those bytes."""
    p_bits = bits // 3
    while True:
        p, q = _old_prime(p_bits), _old_prime(bits - 2 * p_bits)
        n = p * p * q
        if p.bit_length() == p_bits and n.bit_length() == bits and (q - 1) % p != 0:
            break
    while True:
        g = mpz(secrets.randbelow(int(n) - 2) + 2)
        if gmpy2.gcd(g, n) == 1 and (gmpy2.powmod(g, p - 1, p * p) - 1) // p % p != 0:
            break
    pk = OUPublicKey(n, g, gmpy2.powmod(g, n, n))
    k = pk.key_bytes
    return pk, pk.to_bytes() + p.to_bytes(k, "big") + q.to_bytes(k, "big")


@pytest.fixture(scope="module")
def legacy() -> tuple[OUPublicKey, OUPrivateKey]:
    pk, data = _legacy_keypair(1024)
    return pk, OUPrivateKey.from_bytes(data)


@pytest.fixture(scope="module")
def tables(ou: tuple[OUPublicKey, OUPrivateKey]) -> dict[str, OUTable]:
    pk, sk = ou
    return {
        "public": OUTable(pk),
        "crt": OUTable(pk, sk),
        "crt-odd-window": OUTable(pk, sk, window_bits=5),
    }


def test_keys_have_the_sizes_of_p2q(ou: tuple[OUPublicKey, OUPrivateKey]) -> None:
    pk, sk = ou
    assert pk.bits == 1024
    assert pk.n == sk.p**2 * sk.q
    assert sk.p.bit_length() == pk.prime_bits == 341
    assert pk.plaintext_bits == 340
    assert (1 << pk.plaintext_bits) < sk.p
    assert pk.ciphertext_bytes == pk.key_bytes == 128
    assert pk.modulus == pk.n
    assert pk.scheme == "ou"
    assert pk.exponent_bits == 320  # 4 * lambda, as for Paillier


@pytest.mark.parametrize("bits", [1024, 2048, 3072])
def test_keys_have_the_structure_of_coron_naccache_paillier(bits: int) -> None:
    """``p - 1 = t u`` with ``t`` a ``2 * lambda``-bit prime; ``g`` of order ``t`` modulo ``p``
    and ``p t`` modulo ``p**2``; ``h`` of order ``t`` modulo ``p**2``; sizes as before."""
    pk, sk = generate_ou_keypair(bits, allow_insecure=True)
    p, t = sk.p, sk.t
    assert t is not None
    assert pk.bits == bits
    assert p.bit_length() == bits // 3
    assert p >> (bits // 3 - 2) == 3
    assert t.bit_length() == 2 * pk.security_bits == {1024: 160, 2048: 224, 3072: 256}[bits]
    assert gmpy2.is_prime(t)
    assert gmpy2.is_prime(p)
    assert gmpy2.is_prime(sk.q)
    assert (p - 1) % t == 0
    assert sk.decryption_exponent == t
    assert pk.g % p != 1
    assert gmpy2.powmod(pk.g, t, p) == 1
    gt = gmpy2.powmod(pk.g, t, sk.psquare)
    assert gt != 1
    assert gmpy2.powmod(gt, p, sk.psquare) == 1
    assert pk.h % p != 1
    assert gmpy2.powmod(pk.h, t, sk.psquare) == 1
    assert sk.gp_inverse * ((gt - 1) // p) % p == 1
    assert len(sk.to_bytes()) == 2 + 6 * pk.key_bytes
    assert len(pk.to_bytes()) == 2 + 3 * pk.key_bytes  # the public format is unchanged


def test_decryption_by_t_equals_decryption_by_p_minus_1(
    ou: tuple[OUPublicKey, OUPrivateKey], tables: dict[str, OUTable]
) -> None:
    """The same key without ``t`` decrypts with ``p - 1`` to the same plaintexts (``t``
    divides ``p - 1``), and a ciphertext of a value above ``p`` reduces the same way."""
    pk, sk = ou
    slow = OUPrivateKey(pk, sk.p, sk.q)
    assert slow.t is None
    assert slow.decryption_exponent == sk.p - 1
    assert slow != sk
    values = [0, 1, 2**100 + 7, (1 << pk.plaintext_bits) - 1]
    cts = tables["crt"].encrypt_many(values)
    above = gmpy2.powmod(pk.g, pk.n - 3, pk.n) * tables["public"].random_factors(1)[0] % pk.n
    for c in [*cts, above]:
        assert sk.decrypt(c) == slow.decrypt(c)
    assert [sk.decrypt(c) for c in cts] == values
    assert sk.decrypt(above) == (pk.n - 3) % sk.p
    # The kernels' contract: L(c**e mod p**2) * gp_inverse mod p, e = decryption_exponent.
    # A unit outside the subgroup of g and h tells the exponents apart.
    x = mpz(secrets.randbelow(int(pk.n) - 2) + 2)
    for key in (sk, slow):
        e, p = key.decryption_exponent, key.p
        assert key.decrypt(x) == (gmpy2.powmod(x, e, key.psquare) - 1) // p * key.gp_inverse % p
    assert sk.decrypt(x) != slow.decrypt(x)


def test_keys_made_before_t_still_load_and_decrypt(
    legacy: tuple[OUPublicKey, OUPrivateKey],
) -> None:
    """A key saved as ``public || p || q`` with a random ``g``: exponent ``p - 1``, bytes
    unchanged by a round trip, encryption and homomorphic addition as before."""
    pk, sk = legacy
    k = pk.key_bytes
    assert sk.t is None
    assert sk.decryption_exponent == sk.p - 1
    data = sk.to_bytes()
    assert len(data) == 2 + 5 * k
    assert OUPrivateKey.from_bytes(data) == sk
    assert data == pk.to_bytes() + sk.p.to_bytes(k, "big") + sk.q.to_bytes(k, "big")
    for table in (OUTable(pk), OUTable(pk, sk)):
        ca, cb = table.encrypt_many([123, 456])
        assert (sk.decrypt(ca), sk.decrypt(cb), sk.decrypt(add(pk, ca, cb))) == (123, 456, 579)


@settings(max_examples=15, deadline=None)
@given(
    a=st.integers(min_value=0, max_value=(1 << 340) - 1),
    b=st.integers(min_value=0, max_value=(1 << 340) - 1),
    owner=st.booleans(),
)
def test_legacy_keys_add_and_decrypt(
    legacy: tuple[OUPublicKey, OUPrivateKey], a: int, b: int, owner: bool
) -> None:
    pk, sk = legacy
    ca, cb = OUTable(pk, sk if owner else None).encrypt_many([a, b])
    assert sk.decrypt(ca) == a
    assert sk.decrypt(add(pk, ca, cb)) == (a + b) % int(sk.p)
    assert sk.decrypt(subtract(pk, ca, cb)) == (a - b) % int(sk.p)


def _replace_t(sk: OUPrivateKey, t: int) -> bytes:
    k = sk.public_key.key_bytes
    return sk.to_bytes()[: 2 + 5 * k] + t.to_bytes(k, "big")


@pytest.mark.parametrize(
    ("corrupt", "cause"),
    [
        (lambda t, p: 0, "fewer than 2 \\* security_bits = 160"),
        (lambda t, p: 2, "fewer than"),
        (lambda t, p: t + 2, "t does not divide p - 1"),
        (lambda t, p: int(gmpy2.next_prime(t)), "t does not divide p - 1"),
        (lambda t, p: (1 << 1024) - 1, "t does not divide p - 1"),
        (lambda t, p: 2 * t, "t is not prime"),
        (lambda t, p: (p - 1) // t, "t is not prime"),
    ],
)
def test_a_corrupted_t_is_refused_naming_the_cause(
    ou: tuple[OUPublicKey, OUPrivateKey], corrupt: Any, cause: str
) -> None:
    _, sk = ou
    assert sk.t is not None
    with pytest.raises(InputError, match=cause):
        OUPrivateKey.from_bytes(_replace_t(sk, corrupt(int(sk.t), int(sk.p))))


def test_t_needs_the_structure_in_the_public_key(
    ou: tuple[OUPublicKey, OUPrivateKey], legacy: tuple[OUPublicKey, OUPrivateKey]
) -> None:
    """A right ``t`` with a public key not built around it would decrypt to garbage: refused."""
    pk, sk = ou
    p, q, t, p2 = sk.p, sk.q, sk.t, sk.psquare
    assert t is not None
    n = pk.n
    other_g = legacy[0].g % n
    assert gmpy2.gcd(other_g, n) == 1
    with pytest.raises(InputError, match="g\\*\\*t is not 1 modulo p: the public key lacks"):
        OUPrivateKey(OUPublicKey(n, other_g, gmpy2.powmod(other_g, n, n)), p, q, t)
    with pytest.raises(InputError, match="h\\*\\*t is not 1 modulo p\\*\\*2"):
        OUPrivateKey(OUPublicKey(n, pk.g, other_g), p, q, t)
    one_mod_p = 1 + p2 * (gmpy2.invert(p2, q) % q)  # 1 modulo p**2, 2 modulo q
    with pytest.raises(InputError, match="h is 1 modulo p"):
        OUPrivateKey(OUPublicKey(n, pk.g, one_mod_p), p, q, t)
    g_order_t = gmpy2.powmod(pk.g, p, n)  # g**t is then 1 modulo p**2: L(g**t) = 0
    with pytest.raises(InputError, match="g\\*\\*\\(t\\) has order 1 modulo p\\*\\*2"):
        OUPrivateKey(OUPublicKey(n, g_order_t, pk.h), p, q, t)
    # The bytes of a legacy key with another key's t appended are refused too.
    lpk, lsk = legacy
    k = lpk.key_bytes
    with pytest.raises(InputError, match="t does not divide p - 1"):
        OUPrivateKey.from_bytes(lsk.to_bytes() + t.to_bytes(k, "big"))
    with pytest.raises(InputError, match="length does not match"):
        OUPrivateKey.from_bytes(sk.to_bytes()[:-1])


def test_a_composite_p_is_refused_not_crashed() -> None:
    """``p = 3 b`` passes the size checks; when ``L(g**(p-1))`` shares the factor 3 the
    inverse does not exist: an :class:`InputError`, not a ``ZeroDivisionError``."""
    while True:
        b = gmpy2.next_prime(mpz(secrets.randbits(339)) | (mpz(1) << 338))
        p, q = 3 * b, _old_prime(1024 - 2 * 341)
        n = p * p * q
        if p.bit_length() == 341 and n.bit_length() == 1024:
            break
    for _ in range(200):
        g = mpz(secrets.randbelow(int(n) - 2) + 2)
        lg = (gmpy2.powmod(g, p - 1, p * p) - 1) // p % p
        if gmpy2.gcd(g, n) == 1 and lg % 3 == 0 and lg != 0:
            break
    else:
        pytest.fail("no g with L(g**(p-1)) divisible by 3 in 200 tries")
    with pytest.raises(InputError, match="no inverse modulo p: p is not prime"):
        OUPrivateKey(OUPublicKey(n, g, gmpy2.powmod(g, n, n)), p, q)


def test_small_keys_need_explicit_opt_in() -> None:
    with pytest.raises(InputError, match="allow_insecure"):
        generate_ou_keypair(1024)
    with pytest.raises(InputError, match="unknown encryption scheme"):
        make_keypair("rsa", 2048)


@settings(max_examples=25, deadline=None)
@given(
    a=st.integers(min_value=0, max_value=(1 << 340) - 1),
    b=st.integers(min_value=0, max_value=(1 << 340) - 1),
    which=st.sampled_from(["public", "crt", "crt-odd-window"]),
)
def test_homomorphic_operations(
    ou: tuple[OUPublicKey, OUPrivateKey], tables: dict[str, OUTable], a: int, b: int, which: str
) -> None:
    pk, sk = ou
    p = int(sk.p)
    ca, cb = tables[which].encrypt_many([a, b])
    assert sk.decrypt(ca) == a
    assert sk.decrypt(cb) == b
    assert sk.decrypt(add(pk, ca, cb)) == (a + b) % p
    assert sk.decrypt(subtract(pk, ca, cb)) == (a - b) % p
    assert sk.decrypt(negate(pk, ca)) == (-a) % p
    assert sk.decrypt(scalar_mul(pk, ca, 5)) == 5 * a % p


def test_tables_agree_with_the_definition(
    ou: tuple[OUPublicKey, OUPrivateKey], tables: dict[str, OUTable]
) -> None:
    """``E(m) = g**m * h**r mod n`` for the exponent whose window digits were given."""
    pk, _ = ou
    for table in tables.values():
        digits = table.random_digits(3)
        for d, m in zip(digits, [0, 1, 123456789], strict=True):
            r = sum(int(x) << (table.window_bits * j) for j, x in enumerate(d))
            want = gmpy2.powmod(pk.g, m, pk.n) * gmpy2.powmod(pk.h, r, pk.n) % pk.n
            assert table.encrypt_many([m], [d])[0] == want
            assert table.factor(d) == gmpy2.powmod(pk.h, r, pk.n)


def test_encryption_is_randomised_and_factors_serve_once(
    ou: tuple[OUPublicKey, OUPrivateKey], tables: dict[str, OUTable]
) -> None:
    _, sk = ou
    c1, c2 = tables["crt"].encrypt_many([7, 7])
    assert c1 != c2
    factors = tables["crt"].random_factors(3)
    cts = tables["public"].encrypt_with_factors([4, 5, 6], factors)
    assert [sk.decrypt(c) for c in cts] == [4, 5, 6]
    with pytest.raises(InputError, match="one factor per plaintext"):
        tables["crt"].encrypt_with_factors([1, 2], factors)


def test_plaintexts_beyond_the_budget_are_refused(
    ou: tuple[OUPublicKey, OUPrivateKey], tables: dict[str, OUTable]
) -> None:
    pk, _ = ou
    for bad in (-1, 1 << pk.plaintext_bits):
        with pytest.raises(InputError, match="plaintext outside"):
            tables["crt"].encrypt_many([bad])
        with pytest.raises(InputError, match="plaintext outside"):
            pk.encrypt(bad)


def test_decryption_of_a_value_above_p_is_reduced(ou: tuple[OUPublicKey, OUPrivateKey]) -> None:
    """Why the guest range-checks: a peer's ciphertext of ``m >= p`` decrypts to ``m mod p``
    (which, revealed, would give away ``p``)."""
    pk, sk = ou
    m = pk.n - 12345
    c = gmpy2.powmod(pk.g, m, pk.n) * gmpy2.powmod(pk.h, 99, pk.n) % pk.n
    assert sk.decrypt(c) == m % sk.p != m


def test_key_serialisation_round_trips_and_rejects_tampering(
    ou: tuple[OUPublicKey, OUPrivateKey],
) -> None:
    pk, sk = ou
    assert OUPublicKey.from_bytes(pk.to_bytes()) == pk
    assert public_key_from_bytes("ou", pk.to_bytes()).fingerprint == pk.fingerprint
    assert OUPrivateKey.from_bytes(sk.to_bytes()) == sk
    with pytest.raises(InputError):
        OUPublicKey.from_bytes(pk.to_bytes()[:-1])
    with pytest.raises(InputError, match="does not equal the public modulus"):
        OUPrivateKey(pk, sk.q, sk.p)
    with pytest.raises(InputError, match="not a unit"):
        OUPublicKey(pk.n, mpz(1), pk.h)
    other, _ = generate_ou_keypair(1024, allow_insecure=True)
    assert other.fingerprint != pk.fingerprint


def test_batches_are_bound_to_scheme_key_and_range(
    ou: tuple[OUPublicKey, OUPrivateKey], tables: dict[str, OUTable]
) -> None:
    pk, _ = ou
    cts = tables["public"].encrypt_many([1, 2, 3])
    batch = CiphertextBatch.from_ciphertexts(pk, cts)
    assert batch.scheme == "ou"
    assert batch.width == 128
    assert batch.ciphertexts(pk) == cts
    paillier_pk, _ = make_keypair("paillier", 1024, allow_insecure=True)
    with pytest.raises(KeyMismatchError, match="is ou, the key is paillier"):
        batch.ciphertexts(paillier_pk)
    with pytest.raises(CodecError, match="outside"):
        CiphertextBatch.of(pk, pk.n.to_bytes(128, "big")).ciphertexts(pk)
    with pytest.raises(CodecError, match="outside"):
        CiphertextBatch.of(pk, bytes(128)).ciphertexts(pk)


def test_wire_has_own_ext_types(
    ou: tuple[OUPublicKey, OUPrivateKey], tables: dict[str, OUTable]
) -> None:
    pk, _ = ou
    batch = CiphertextBatch.from_ciphertexts(pk, tables["public"].encrypt_many([5, 6]))
    data = encode({"key": pk, "ct": batch})
    codes: Any = msgpack.unpackb(data[1:], ext_hook=lambda code, _: code)
    assert codes == {"key": ExtCode.OU_PUBLIC_KEY, "ct": ExtCode.OU_CIPHERTEXTS}
    back: Any = decode(data)
    assert back["key"] == pk
    assert isinstance(back["key"], OUPublicKey)
    assert back["ct"] == batch
    assert back["ct"].scheme == "ou"
    # An OU block holds a value below n: key_bytes wide, so at most 8192 / 8 bytes.
    wide = msgpack.ExtType(ExtCode.OU_CIPHERTEXTS, pk.fingerprint + (2048).to_bytes(4, "big"))
    with pytest.raises(CodecError, match="block width"):
        decode(b"\x01" + msgpack.packb(wide))
    paillier_batch: Any = decode(encode(CiphertextBatch(pk.fingerprint, 2048, b"")))
    assert paillier_batch.scheme == "paillier"


def test_packing_and_compression_fit_the_smaller_plaintext(
    ou: tuple[OUPublicKey, OUPrivateKey], tables: dict[str, OUTable]
) -> None:
    """Sums packed under OU's 340-bit budget compress and open to the exact integers."""
    pk, sk = ou
    rng = np.random.default_rng(0)
    n = 300
    g, h = rng.normal(size=n), rng.random(n)
    grid_g, grid_h = choose_grid(np.abs(g), n), choose_grid(h, n)
    spec = PackingSpec.for_grids(n, grid_g, grid_h, plaintext_bits=pk.plaintext_bits)
    assert spec.split_infos_per_plaintext >= 1
    gi, hi = to_fixed(g, grid_g), to_fixed(h, grid_h)
    cts = tables["crt"].encrypt_many(pack(spec, gi, hi)[0])
    cuts = [10, 50, 120, 300]
    sums = [[mpz(1)] for _ in cuts]
    for k, cut in enumerate(cuts):
        for c in cts[:cut]:
            sums[k][0] = sums[k][0] * c % pk.n
    data = CiphertextBatch.from_ciphertexts(pk, compress(pk, spec, sums)).data
    gs, hs = open_split_infos(sk, spec, data, np.array(cuts))
    assert [int(v) for v in gs[:, 0]] == [int(gi[:c].sum()) for c in cuts]
    assert [int(v) for v in hs[:, 0]] == [int(hi[:c].sum()) for c in cuts]
    # A planted value above p opens to bits outside the layout: refused, never used.
    bad = gmpy2.powmod(pk.g, pk.n - 1, pk.n)
    planted = CiphertextBatch.from_ciphertexts(pk, [bad, *compress(pk, spec, sums)[1:]]).data
    with pytest.raises(CryptoError):
        open_split_infos(sk, spec, planted, np.array(cuts))


@pytest.mark.parametrize("kind", ["ou", "legacy"])
async def test_engine_runs_ou_on_its_pool(kind: str, request: pytest.FixtureRequest) -> None:
    """The private key crosses to the worker processes as bytes: with ``t`` and without."""
    pk, sk = request.getfixturevalue(kind)
    async with CryptoEngine(pk, sk, workers=2) as engine:
        assert await engine.precompute(100) == 100
        values = list(range(500))
        cts = await engine.encrypt_batch(values)
        assert engine.stashed == 0
        assert await engine.decrypt_batch(cts) == values
    assert isinstance(make_table(pk, sk), OUTable)
    with pytest.raises(KeyMismatchError):
        make_table(pk, make_keypair("paillier", 1024, allow_insecure=True)[1])
