"""Okamoto-Uchiyama: keys, encryption tables, homomorphic operations, the wire, packing.

The scheme-neutral code (engine, histograms, compression, codec) must treat an OU key exactly
as a Paillier key, with OU's own sizes: ciphertexts below ``n`` (``key_bytes`` wide),
plaintexts below ``2**plaintext_bits < p``.
"""

from __future__ import annotations

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


async def test_engine_runs_ou_on_its_pool(ou: tuple[OUPublicKey, OUPrivateKey]) -> None:
    pk, sk = ou
    async with CryptoEngine(pk, sk, workers=2) as engine:
        assert await engine.precompute(100) == 100
        values = list(range(500))
        cts = await engine.encrypt_batch(values)
        assert engine.stashed == 0
        assert await engine.decrypt_batch(cts) == values
    assert isinstance(make_table(pk, sk), OUTable)
    with pytest.raises(KeyMismatchError):
        make_table(pk, make_keypair("paillier", 1024, allow_insecure=True)[1])
