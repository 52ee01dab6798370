"""Keys, raw homomorphic operations, fixed-base tables and ciphertext batches."""

from __future__ import annotations

import gmpy2  # type: ignore[import-untyped]
import pytest
from gmpy2 import mpz
from hypothesis import given, settings
from hypothesis import strategies as st
from phe import paillier as phe_paillier

from p2pboost.crypto.paillier import (
    CiphertextBatch,
    FixedBaseTable,
    PrivateKey,
    PublicKey,
    add,
    generate_keypair,
    negate,
    scalar_mul,
    subtract,
)
from p2pboost.exceptions import CodecError, InputError, KeyMismatchError


@pytest.fixture(scope="module")
def tables(public_key: PublicKey, private_key: PrivateKey) -> dict[str, FixedBaseTable]:
    return {
        "public": FixedBaseTable(public_key),
        "crt": FixedBaseTable(public_key, private_key),
        "crt-odd-window": FixedBaseTable(public_key, private_key, window_bits=5),
        "djn-length": FixedBaseTable(public_key, exponent_bits=public_key.bits // 2),
    }


@pytest.mark.parametrize("bits", [1024, 1536])
def test_small_keys_need_explicit_opt_in(bits: int) -> None:
    with pytest.raises(InputError, match="allow_insecure"):
        generate_keypair(bits)


@pytest.mark.parametrize("bits", [512, 1000, 16384])
def test_key_sizes_outside_the_range_are_refused(bits: int) -> None:
    with pytest.raises(InputError):
        generate_keypair(bits, allow_insecure=True)


def test_key_is_the_requested_size(public_key: PublicKey) -> None:
    assert public_key.bits == 1024
    assert public_key.ciphertext_bytes == 256
    assert public_key.security_bits == 80
    assert public_key.exponent_bits == 320  # 4 * lambda


@settings(max_examples=30, deadline=None)
@given(
    a=st.integers(min_value=0),
    b=st.integers(min_value=0),
    which=st.sampled_from(["public", "crt", "crt-odd-window", "djn-length"]),
)
def test_sum_of_encryptions_decrypts_to_the_sum(
    public_key: PublicKey,
    private_key: PrivateKey,
    tables: dict[str, FixedBaseTable],
    a: int,
    b: int,
    which: str,
) -> None:
    a, b = a % public_key.n, b % public_key.n
    ca, cb = tables[which].encrypt_many([a, b])
    assert private_key.decrypt(add(public_key, ca, cb)) == (a + b) % public_key.n
    assert private_key.decrypt(subtract(public_key, ca, cb)) == (a - b) % public_key.n
    assert private_key.decrypt(negate(public_key, ca)) == (-a) % public_key.n


@settings(max_examples=20, deadline=None)
@given(m=st.integers(min_value=0, max_value=2**200), k=st.integers(min_value=0, max_value=2**64))
def test_scalar_multiplication(
    public_key: PublicKey, private_key: PrivateKey, m: int, k: int
) -> None:
    c = public_key.encrypt(m)
    assert private_key.decrypt(scalar_mul(public_key, c, k)) == m * k % public_key.n


def test_encryption_is_randomised(tables: dict[str, FixedBaseTable]) -> None:
    for table in tables.values():
        c1, c2 = table.encrypt_many([7, 7])
        assert c1 != c2


def test_interoperates_with_phe(
    public_key: PublicKey, private_key: PrivateKey, tables: dict[str, FixedBaseTable]
) -> None:
    """phe's own CRT decryption opens our ciphertexts, and ours opens phe's."""
    phe_pub = phe_paillier.PaillierPublicKey(int(public_key.n))
    phe_priv = phe_paillier.PaillierPrivateKey(phe_pub, int(private_key.p), int(private_key.q))
    (c,) = tables["crt"].encrypt_many([123456789])
    assert phe_priv.raw_decrypt(int(c)) == 123456789
    theirs = phe_pub.encrypt(987654321).ciphertext()
    assert private_key.decrypt(mpz(theirs)) == 987654321


@pytest.mark.parametrize("which", ["public", "crt", "crt-odd-window", "djn-length"])
def test_table_factor_is_the_fixed_base_power(
    public_key: PublicKey, tables: dict[str, FixedBaseTable], which: str
) -> None:
    table = tables[which]
    w = table.window_bits
    for a in (0, 1, 2**table.exponent_bits - 1, 0x1234567890ABCDEF << 200):
        digits = [(a >> (w * j)) & ((1 << w) - 1) for j in range(table.windows)]
        assert table.factor(digits) == gmpy2.powmod(public_key.hs, a, public_key.n2)


def test_exponent_length_is_bounded(public_key: PublicKey) -> None:
    with pytest.raises(InputError):
        FixedBaseTable(public_key, exponent_bits=2 * public_key.security_bits - 1)
    with pytest.raises(InputError):
        FixedBaseTable(public_key, exponent_bits=public_key.bits + 1)


def test_random_digits_stay_in_range(tables: dict[str, FixedBaseTable]) -> None:
    table = tables["crt-odd-window"]
    digits = table.random_digits(200)
    assert len(digits) == 200
    top = table.exponent_bits - (table.windows - 1) * table.window_bits
    for row in digits:
        assert len(row) == table.windows
        assert max(row[:-1]) < 2**table.window_bits
        assert row[-1] < 2**top


def test_plaintext_outside_range_is_refused(
    public_key: PublicKey, tables: dict[str, FixedBaseTable]
) -> None:
    with pytest.raises(InputError):
        tables["crt"].encrypt_many([public_key.n])
    with pytest.raises(InputError):
        public_key.encrypt(-1)


def test_key_serialisation_round_trip(public_key: PublicKey, private_key: PrivateKey) -> None:
    assert PublicKey.from_bytes(public_key.to_bytes()) == public_key
    assert PrivateKey.from_bytes(private_key.to_bytes()) == private_key
    assert "p=" not in repr(private_key)


def test_malformed_keys_are_refused(public_key: PublicKey, private_key: PrivateKey) -> None:
    data = public_key.to_bytes()
    for bad in (b"", data[:-1], data + b"\0", b"\x00\x80" + b"\0" * 384):
        with pytest.raises(InputError):
            PublicKey.from_bytes(bad)
    with pytest.raises(InputError):
        PublicKey(public_key.n + 1, public_key.hs)  # even modulus
    with pytest.raises(InputError):
        PublicKey(public_key.n, public_key.n2)  # hs out of range
    with pytest.raises(InputError):
        PrivateKey(public_key, private_key.p, private_key.p)


def test_ciphertext_batch_binds_to_its_key(
    public_key: PublicKey, tables: dict[str, FixedBaseTable]
) -> None:
    cts = tables["public"].encrypt_many(range(5))
    batch = CiphertextBatch.from_ciphertexts(public_key, cts)
    assert len(batch) == 5
    assert len(batch.data) == 5 * public_key.ciphertext_bytes
    assert batch.ciphertexts(public_key) == cts
    other, _ = generate_keypair(1024, allow_insecure=True)
    with pytest.raises(KeyMismatchError):
        batch.ciphertexts(other)


@pytest.mark.parametrize("fill", [0x00, 0xFF])
def test_ciphertext_batch_rejects_values_outside_the_group(
    public_key: PublicKey, fill: int
) -> None:
    """0 and 2**(8*width) - 1 >= n**2 are both outside (0, n**2)."""
    width = public_key.ciphertext_bytes
    batch = CiphertextBatch(public_key.fingerprint, width, bytes([fill]) * width)
    with pytest.raises(CodecError):
        batch.ciphertexts(public_key)
