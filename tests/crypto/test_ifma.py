"""The native kernel's two Montgomery products agree: AVX-512 IFMA (radix 2**52) against GMP's
mpn layer against plain integer arithmetic, bit for bit.

A Modulus chooses its product when it is made (``product="auto"``, ``"mpn"`` or ``"ifma"``);
every kernel must give the same bytes on either. The sizes are the library's: OU's n at 1024,
2048 and 3072 bits and the key owner's p**2 and q, Paillier's n**2 and p**2, and moduli at the
edges of the 52-bit digit count (the product needs 4 m < 2**(52 k), so m of 52 k - 2 and
52 k - 1 bits fall on either side of a step). The values include 1, m - 1 and numbers next to
2**(52 j). The IFMA tests need a CPU with AVX-512 IFMA and are skipped, with that reason, on
one without; the others (the switch, the choice, the refusals, whole encryptors and
decryption on the process' product against gmpy2) run everywhere the native kernel is built.
"""

from __future__ import annotations

import functools
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost.crypto import kernels
from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.encryptors import make_encryptor
from p2pboost.crypto.keys import make_keypair

native = pytest.mark.skipif(
    not kernels.native_available(), reason="native kernel not built (no compiler or GMP headers)"
)
_N: Any = kernels._native
ifma = pytest.mark.skipif(
    _N is None or not _N.ifma_supported(),
    reason="this CPU has no AVX-512 IFMA (or the native kernel is not built)",
)

#: bits of the moduli: OU's q at 1024 bits, q / p**2 / n at 2048 and 3072, Paillier's n**2, the
#: largest size with paired products (4160) and the smallest without (4576), the edges of 52 k
_SIZES = [
    256,
    341,
    512,
    683,
    1024,
    1366,
    1536,
    2048,
    3072,
    4096,
    4160,
    4576,
    6144,
    52 * 20 - 2,
    52 * 20 - 1,
    52 * 40 - 2,
    52 * 40 - 1,
    52 * 40,
]


@functools.cache
def _modulus(bits: int, top: bool = False) -> int:
    """An odd modulus of exactly ``bits`` bits; ``top``: all ones (the largest of its size)."""
    if top:
        return (1 << bits) - 1
    rng = random.Random(bits)
    return rng.getrandbits(bits) | (1 << (bits - 1)) | 1


def _both(m: int) -> tuple[Any, Any]:
    raw = m.to_bytes((m.bit_length() + 7) // 8, "big")
    return _N.Modulus(raw, product="ifma"), _N.Modulus(raw, product="mpn")


def _edge_values(m: int) -> list[int]:
    """1, 2, m - 1, m - 2 and the numbers next to 2**(52 j) below m."""
    out = [1, 2, m - 1, m - 2]
    for j in range(1, m.bit_length() // 52 + 1):
        out += [v for v in ((1 << (52 * j)) - 1, 1 << (52 * j), (1 << (52 * j)) + 1) if v < m]
    return out


def _invertible(v: int, m: int) -> bool:
    try:
        pow(v, -1, m)
    except ValueError:
        return False
    return True


def _pack(values: list[int], m: int) -> bytes:
    w = (m.bit_length() + 7) // 8
    return b"".join(v.to_bytes(w, "big") for v in values)


def _groups(count: int) -> Any:
    cut = count // 2
    return np.array([0, cut, count] if cut else [0, count], dtype=np.int64)


def _run_all(mod: Any, m: int, a: list[int], b: list[int]) -> list[bytes]:
    """Every product kernel on ``mod`` over values a and b (equal lengths)."""
    da, db = _pack(a, m), _pack(b, m)
    count = len(a)
    idx = np.arange(count, dtype=np.int64)[::-1].copy()
    cut = count // 2
    out = [
        bytes(_N.mul(mod, da, db)),
        bytes(_N.divide(mod, da, db)),
        bytes(_N.segment_products(mod, da, idx, np.array([0, cut, cut, count], dtype=np.int64))),
        bytes(_N.prefix_products(mod, da, count)),
        bytes(_N.horner(mod, da, np.arange(count, dtype=np.int64) % 7, _groups(count))),
    ]
    table = _N.FixedBase(mod, _pack([a[0]], m), 4, 3)
    exps = bytes(random.Random(count).getrandbits(8) for _ in range(count))
    out.append(bytes(_N.fixed_base((table,), (exps,), count)))
    return out


def _expected(m: int, a: list[int], b: list[int]) -> list[bytes]:
    count, cut = len(a), len(a) // 2
    seg = [1, 1, 1]
    for k, i in enumerate(reversed(range(count))):
        seg[0 if k < cut else 2] = seg[0 if k < cut else 2] * a[i] % m
    prefix, acc = [], 1
    for v in a:
        acc = acc * v % m
        prefix.append(acc)
    horner = []
    for lo, hi in ((0, cut), (cut, count)):
        if lo == hi:
            continue
        h = a[lo]
        for k in range(lo + 1, hi):
            h = pow(h, 2 ** (k % 7), m) * a[k] % m
        horner.append(h)
    exps = bytes(random.Random(count).getrandbits(8) for _ in range(count))
    return [
        _pack([x * y % m for x, y in zip(a, b, strict=True)], m),
        _pack([x * pow(y, -1, m) % m for x, y in zip(a, b, strict=True)], m),
        _pack(seg, m),
        _pack(prefix, m),
        _pack(horner, m),
        _pack([pow(a[0], e, m) for e in exps], m),
    ]


@ifma
@pytest.mark.parametrize("top", [False, True])
@pytest.mark.parametrize("bits", _SIZES)
def test_every_kernel_agrees_on_both_products_at_the_edges(bits: int, top: bool) -> None:
    m = _modulus(bits, top)
    fast, ref = _both(m)
    assert (fast.product, ref.product) == ("ifma", "mpn")
    a = _edge_values(m)
    # divide needs invertible divisors; the all-ones moduli share factors with some values
    b = [v if _invertible(v, m) else 1 for v in reversed(a)]
    got, want = _run_all(fast, m, a, b), _run_all(ref, m, a, b)
    assert got == want == _expected(m, a, b)


@ifma
@settings(max_examples=40, deadline=None)
@given(bits=st.sampled_from(_SIZES), data=st.data())
def test_kernels_agree_on_random_values(bits: int, data: st.DataObject) -> None:
    m = _modulus(bits)
    values = st.integers(1, m - 1)
    a = data.draw(st.lists(values, min_size=1, max_size=12))
    b = data.draw(st.lists(values, min_size=len(a), max_size=len(a)))
    b = [v if _invertible(v, m) else 1 for v in b]
    fast, ref = _both(m)
    assert _run_all(fast, m, a, b) == _run_all(ref, m, a, b) == _expected(m, a, b)


@ifma
def test_long_segments_put_back_the_ifma_radix() -> None:
    """A segment of 3,000 factors leaves R'**-2999 to put back (R' = 2**(52 k))."""
    m = _modulus(2048)
    rng = random.Random(5)
    values = [rng.randrange(1, m) for _ in range(3000)]
    idx = np.arange(3000, dtype=np.int64)
    off = np.array([0, 1, 1025, 3000], dtype=np.int64)
    fast, ref = _both(m)
    data = _pack(values, m)
    got = bytes(_N.segment_products(fast, data, idx, off))
    assert got == bytes(_N.segment_products(ref, data, idx, off))
    want = [values[0], 1, 1]
    for k in range(1, 3000):
        j = 1 if k < 1025 else 2
        want[j] = want[j] * values[k] % m
    assert got == _pack(want, m)


def _l(x: int, p: int) -> int:
    """L(x) = (x - 1) / p as the kernel computes it (GMP's division truncates: L(0) = 0)."""
    return (x - 1) // p if x else 0


def _odd(bits: int, seed: int) -> int:
    return random.Random(seed).getrandbits(bits) | (1 << (bits - 1)) | 1


@ifma
@pytest.mark.parametrize("p_bits", [128, 256, 342, 512, 683, 1024])
def test_ou_decryption_agrees_on_both_products(p_bits: int) -> None:
    """ou_decrypt's formula, L(c**e mod p**2) inv mod p, for OU keys of 384 to 3072 bits
    (p**2 exponentiated on the IFMA product from 500 bits, with mpz_powm_sec below), with a
    short and a full-length exponent."""
    p, q = _odd(p_bits, 1), _odd(p_bits, 2)
    p2, n = p * p, p * p * q
    inv = _odd(p_bits - 8, 3) % p
    rng = random.Random(p_bits)
    cts = [1, 2, n - 1, p2, p2 + 1, *(rng.randrange(1, n) for _ in range(6))]
    fast, ref = _both(n)
    be = kernels._be
    pw = (p_bits + 7) // 8
    for e in (_odd(224, 4), p - 1, 1):
        args = (_pack(cts, n), be(p), be(p2), be(e), be(inv), pw)
        got = bytes(_N.ou_decrypt(fast, *args))
        assert got == bytes(_N.ou_decrypt(ref, *args))
        want = [_l(pow(c % p2, e, p2), p) * inv % p for c in cts]
        assert got == b"".join(v.to_bytes(pw, "big") for v in want)


@ifma
@pytest.mark.parametrize("p_bits", [256, 512, 1024, 1536])
def test_paillier_decryption_agrees_on_both_products(p_bits: int) -> None:
    """paillier_decrypt's CRT formula for Paillier keys of 512 to 3072 bits."""
    p, q = _odd(p_bits, 5), _odd(p_bits, 6)
    n = p * q
    n2 = n * n
    hp, hq, p_inv = _odd(p_bits - 4, 7) % p, _odd(p_bits - 4, 8) % q, _odd(p_bits - 4, 9) % q
    rng = random.Random(p_bits)
    cts = [1, n2 - 1, p * p, *(rng.randrange(1, n2) for _ in range(4))]  # odd: a pair and one
    fast, ref = _both(n2)
    be = kernels._be
    pw = (n.bit_length() + 7) // 8
    args = (_pack(cts, n2), *(be(v) for v in (p, q, p * p, q * q, hp, hq, p_inv)), pw)
    got = bytes(_N.paillier_decrypt(fast, *args))
    assert got == bytes(_N.paillier_decrypt(ref, *args))
    want = []
    for c in cts:
        mp = _l(pow(c % (p * p), p - 1, p * p), p) * hp % p
        mq = _l(pow(c % (q * q), q - 1, q * q), q) * hq % q
        want.append(mp + (mq - mp) * p_inv % q * p)
    assert got == b"".join(v.to_bytes(pw, "big") for v in want)


@native
def test_the_product_is_chosen_by_cpu_size_and_request() -> None:
    small, big = _modulus(128), _modulus(2048)
    assert _N.Modulus(big.to_bytes(256, "big"), product="mpn").product == "mpn"
    assert _N.Modulus(small.to_bytes(16, "big")).product == "mpn"  # mpn is faster there
    auto = _N.Modulus(big.to_bytes(256, "big")).product
    assert auto == _N.product_kind() == kernels.native_product()
    assert auto == (
        "ifma" if _N.ifma_supported() and os.environ.get("P2PBOOST_IFMA") != "0" else "mpn"
    )
    with pytest.raises(ValueError, match="product"):
        _N.Modulus(big.to_bytes(256, "big"), product="fast")
    if not _N.ifma_supported():
        with pytest.raises(ValueError, match="IFMA"):
            _N.Modulus(big.to_bytes(256, "big"), product="ifma")
    else:
        huge = _modulus(7000)
        with pytest.raises(ValueError, match="too large"):
            _N.Modulus(huge.to_bytes(875, "big"), product="ifma")
        assert _N.Modulus(huge.to_bytes(875, "big")).product == "mpn"


@native
def test_the_environment_switch_forces_mpn() -> None:
    code = (
        "from p2pboost.crypto import _native as n, kernels; "
        "m = n.Modulus(((1 << 2047) + 1).to_bytes(256, 'big')); "
        "print(n.product_kind(), m.product, kernels.native_product())"
    )
    env = dict(os.environ, P2PBOOST_IFMA="0")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["mpn", "mpn", "mpn"]


@pytest.fixture
def restore_kernel() -> Iterator[None]:
    previous = kernels.active()
    yield
    kernels.use(previous)


@native
@pytest.mark.parametrize("bits", [1024, 2048])
@pytest.mark.parametrize("scheme", ["ou", "paillier"])
def test_encryption_and_decryption_match_gmpy2(
    restore_kernel: None, scheme: str, bits: int
) -> None:
    """Whole encryptors and decryption on the process' product (IFMA where the CPU has it)
    against the gmpy2 kernel: the same randomisers give the same ciphertext bytes, and both
    decrypt them to the plaintexts."""
    pk, sk = make_keypair(scheme, bits, allow_insecure=True)
    plain = [0, 1, 2**60 + 7]
    kernels.use("native")
    factors = make_encryptor(pk, sk).factors(len(plain))
    out = {}
    for kernel in ("native", "gmpy2"):
        kernels.use(kernel)
        for owner in (sk, None):
            out[kernel, owner is None] = make_encryptor(pk, owner).encrypt(plain, factors)
    assert len(set(out.values())) == 1
    cts = CiphertextBatch.of(pk, out["native", False]).residues(pk)
    for kernel in ("native", "gmpy2"):
        kernels.use(kernel)
        assert kernels.decrypt(sk, cts) == plain
