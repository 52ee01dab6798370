"""The native kernel against the gmpy2 reference, its checked entry points, and its memory
safety under AddressSanitizer.

Every kernel is run on both paths with the same inputs and must give the same bytes; the
checked face (:mod:`p2pboost.crypto.kernels`) must let only documented exceptions escape for
wrong lengths, zero, values at and above the modulus and absurd counts. The native tests need
the extension: CI builds it (``P2PBOOST_NATIVE=1``) and runs this file, and runs the suite a
second time on a copy installed without a compiler, where they are skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path
from shutil import which

import gmpy2  # type: ignore[import-untyped]
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2pboost.crypto import kernels
from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.encryptors import make_encryptor
from p2pboost.crypto.keys import make_keypair
from p2pboost.crypto.residues import Residues, check_range
from p2pboost.exceptions import CodecError, CryptoError, InputError

native = pytest.mark.skipif(
    not kernels.native_available(), reason="native kernel not built (no compiler or GMP headers)"
)

_MOD = int(gmpy2.next_prime(gmpy2.mpz(2) ** 1023 + 12345)) * int(
    gmpy2.next_prime(gmpy2.mpz(2) ** 1022 + 999)
)
_WIDTH = (_MOD.bit_length() + 7) // 8


@pytest.fixture
def each_kernel() -> Iterator[None]:
    previous = kernels.active()
    yield
    kernels.use(previous)


def _residues(values: list[int]) -> Residues:
    return Residues.of_bytes(b"".join(v.to_bytes(_WIDTH, "big") for v in values), _WIDTH)


def _both(fn, *args):
    """``fn(*args)`` under each kernel, as bytes (args rebuilt each time: no shared caches)."""
    out = {}
    for name in kernels.KERNELS:
        kernels.use(name)
        fresh = [Residues.of_bytes(a.data, a.width) if isinstance(a, Residues) else a for a in args]
        out[name] = fn(*fresh).data
    return out["native"], out["gmpy2"]


_values = st.lists(st.integers(1, _MOD - 1), min_size=1, max_size=24)


@native
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(a=_values, data=st.data())
def test_kernels_agree_with_gmpy2(each_kernel: None, a: list[int], data: st.DataObject) -> None:
    b = data.draw(st.lists(st.integers(1, _MOD - 1), min_size=len(a), max_size=len(a)))
    ra, rb = _residues(a), _residues(b)
    nat, ref = _both(lambda x, y: kernels.multiply(_MOD, x, y), ra, rb)
    assert nat == ref
    assert ref == _residues([x * y % _MOD for x, y in zip(a, b, strict=True)]).data
    nat, ref = _both(lambda x, y: kernels.divide(_MOD, x, y), ra, rb)
    assert nat == ref
    index = np.array(data.draw(st.lists(st.integers(0, len(a) - 1), max_size=40)), dtype=np.int64)
    cuts = sorted(data.draw(st.lists(st.integers(0, index.size), max_size=5)))
    offsets = np.array([0, *cuts, index.size], dtype=np.int64)
    nat, ref = _both(lambda x: kernels.segment_products(_MOD, x, index, offsets), ra)
    assert nat == ref
    run = data.draw(st.sampled_from([d for d in range(1, len(a) + 1) if len(a) % d == 0]))
    nat, ref = _both(lambda x: kernels.prefix_products(_MOD, x, run), ra)
    assert nat == ref
    shifts = np.array(data.draw(st.lists(st.integers(0, 300), min_size=len(a), max_size=len(a))))
    groups = (
        sorted(set(data.draw(st.lists(st.integers(1, len(a) - 1), max_size=4))))
        if len(a) > 1
        else []
    )
    goff = np.array([0, *groups, len(a)], dtype=np.int64)
    nat, ref = _both(lambda x: kernels.horner(_MOD, x, shifts, goff), ra)
    assert nat == ref


@native
def test_segment_products_of_long_segments(each_kernel: None) -> None:
    """Long products: the Montgomery factors put back (R to the power of the segment)."""
    rng = np.random.default_rng(1)
    values = [int.from_bytes(rng.bytes(_WIDTH), "big") % _MOD or 1 for _ in range(3000)]
    index = rng.permutation(3000).astype(np.int64)
    offsets = np.array([0, 1, 2, 1025, 2048, 3000], dtype=np.int64)
    nat, ref = _both(lambda x: kernels.segment_products(_MOD, x, index, offsets), _residues(values))
    assert nat == ref


@pytest.mark.parametrize("kernel", kernels.KERNELS)
@pytest.mark.parametrize("scheme", ["ou", "paillier"])
def test_encryptors_round_trip(each_kernel: None, kernel: str, scheme: str) -> None:
    if kernel == "native" and not kernels.native_available():
        pytest.skip("native kernel not built")
    kernels.use(kernel)
    pk, sk = make_keypair(scheme, 1024, allow_insecure=True)
    plain = [0, 1, 2**60 + 7, 2**100 - 1, 12345]
    for owner in (sk, None):
        enc = make_encryptor(pk, owner)
        data = enc.encrypt(plain)
        assert len(data) == len(plain) * pk.ciphertext_bytes
        cts = CiphertextBatch.of(pk, data).residues(pk)
        assert kernels.decrypt(sk, cts) == plain
        factors = enc.factors(3)
        with_factors = enc.encrypt(plain, factors)
        assert kernels.decrypt(sk, CiphertextBatch.of(pk, with_factors).residues(pk)) == plain
        assert with_factors[: 3 * pk.ciphertext_bytes] != data[: 3 * pk.ciphertext_bytes]
        with pytest.raises(InputError):
            enc.encrypt(plain[:2], factors)  # more randomisers than plaintexts


@native
@pytest.mark.parametrize("scheme", ["ou", "paillier"])
def test_native_decryption_equals_the_keys_own(each_kernel: None, scheme: str) -> None:
    pk, sk = make_keypair(scheme, 1024, allow_insecure=True)
    rng = np.random.default_rng(3)
    values = [int(v) for v in rng.integers(0, 2**62, 20)]
    kernels.use("gmpy2")
    data = make_encryptor(pk, sk).encrypt(values)
    cts = CiphertextBatch.of(pk, data).residues(pk)
    kernels.use("native")
    assert kernels.decrypt(sk, cts) == [int(sk.decrypt(c)) for c in cts.values] == values


def test_check_range_rejects_zero_and_the_modulus() -> None:
    ok = [1, 2, _MOD - 1]
    check_range(_residues(ok).data, _WIDTH, _MOD)
    for bad in (0, _MOD, 2 ** (8 * _WIDTH) - 1):
        data = _residues([*ok, bad]).data
        with pytest.raises(CodecError):
            check_range(data, _WIDTH, _MOD)
    with pytest.raises(CodecError):
        check_range(b"\x01" * (_WIDTH + 1), _WIDTH, _MOD)


@pytest.mark.parametrize("kernel", kernels.KERNELS)
def test_only_documented_exceptions_escape(each_kernel: None, kernel: str) -> None:
    """Wrong lengths, widths, indices, offsets and shifts are InputError; a value outside
    (0, modulus) fed past the checks is CodecError; a divisor without inverse CryptoError."""
    if kernel == "native" and not kernels.native_available():
        pytest.skip("native kernel not built")
    kernels.use(kernel)
    good = _residues([3, 5, 7, 11])
    short = Residues.of_bytes(good.data[: 2 * _WIDTH], _WIDTH)
    narrow = Residues.of_bytes(b"\x01" * 8, 4)
    cases = [
        lambda: kernels.multiply(_MOD, good, short),
        lambda: kernels.multiply(_MOD, narrow, narrow),
        lambda: kernels.segment_products(_MOD, good, [0, 9], [0, 2]),
        lambda: kernels.segment_products(_MOD, good, [0, 1], [0, 3]),
        lambda: kernels.segment_products(_MOD, good, [0, 1], [1, 2]),
        lambda: kernels.segment_products(_MOD, good, [-1], [0, 1]),
        lambda: kernels.prefix_products(_MOD, good, 3),
        lambda: kernels.prefix_products(_MOD, good, 0),
        lambda: kernels.horner(_MOD, good, [0, 1], [0, 4]),
        lambda: kernels.horner(_MOD, good, [0, 1, 2, 1 << 20], [0, 4]),
        lambda: kernels.horner(_MOD, good, [0, 1, 2, 3], [0, 0, 4]),
        lambda: kernels.divide(_MOD, good, short),
    ]
    for case in cases:
        with pytest.raises(InputError):
            case()
    if kernel == "native":  # unchecked bytes reach the C checks, which refuse them
        zero = _residues([3, 5]).replace([1], Residues.of_bytes(bytes(_WIDTH), _WIDTH))
        at_mod = Residues.of_bytes(_MOD.to_bytes(_WIDTH, "big") * 2, _WIDTH)
        for bad in (zero, at_mod):
            with pytest.raises(CodecError):
                kernels.multiply(_MOD, bad, _residues([1, 1]))
    p = int(gmpy2.next_prime(gmpy2.mpz(2) ** 1023 + 12345))
    with pytest.raises(CryptoError):
        kernels.divide(_MOD, _residues([1]), _residues([p]))


@native
def test_native_entry_points_refuse_bad_calls() -> None:
    """The C functions themselves (behind the checks) raise ValueError or TypeError, never
    read out of bounds, for what the checks would have refused."""
    n = kernels._native
    m = kernels.native_modulus(_MOD)
    one = (1).to_bytes(_WIDTH, "big")
    idx = np.zeros(1, dtype=np.int64)
    calls = [
        lambda: n.mul(m, one, one + one),
        lambda: n.mul(m, one[:-1], one[:-1]),
        lambda: n.mul("not a modulus", one, one),
        lambda: n.segment_products(m, one, np.array([5], dtype=np.int64), np.array([0, 1])),
        lambda: n.segment_products(m, one, idx.astype(np.int32), np.array([0, 1])),
        lambda: n.segment_products(m, one, idx, np.array([0, 2], dtype=np.int64)),
        lambda: n.prefix_products(m, one * 3, 2),
        lambda: n.horner(m, one, np.array([0, 0]), np.array([0, 1])),
        lambda: n.divide(m, one, bytes(_WIDTH)),
        lambda: n.Modulus(b"\x02" * 16),
        lambda: n.Modulus(b"\x01"),
        lambda: n.FixedBase(m, one, 17, 2),
        lambda: n.FixedBase(m, one, 8, 1 << 40),
        lambda: n.fixed_base((n.FixedBase(m, one, 4, 2),), (b"\xff" * 4,), 1),
        lambda: n.fixed_base((), (), 1),
        lambda: n.fixed_base((n.FixedBase(m, one, 4, 2),), (b"\x01" * 3,), 2),
        lambda: n.crt(one, one, m, m, b"\x01", 1),
        lambda: n.ou_decrypt(m, one, b"\x00", b"\x03", b"\x03", b"\x01", 8),
    ]
    for call in calls:
        with pytest.raises((ValueError, TypeError, OverflowError, MemoryError)):
            call()


_ASAN_SCRIPT = textwrap.dedent(
    """
    import importlib.util, os, sys
    import numpy as np
    spec = importlib.util.spec_from_file_location("p2pboost.crypto._native", sys.argv[1])
    n = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(n)


    def be(v):
        return v.to_bytes((v.bit_length() + 7) // 8, "big")


    def check(m, mod, w):
        vals = [int.from_bytes(os.urandom(w), "big") % mod or 3 for _ in range(200)]
        data = b"".join(v.to_bytes(w, "big") for v in vals)
        idx = np.random.default_rng(0).permutation(200).astype(np.int64)
        assert n.segment_products(m, data, idx, np.array([0, 0, 7, 200], dtype=np.int64))
        assert n.prefix_products(m, data, 50) and n.mul(m, data, data)
        assert n.divide(m, data[: 3 * w], data[w : 4 * w])
        assert n.horner(m, data, np.full(200, 9, dtype=np.int64), np.array([0, 3, 200]))
        t = n.FixedBase(m, data[:w], 5, 10)
        assert n.fixed_base((t, t), (os.urandom(6 * 20), bytes(6 * 20)), 20)
        assert n.crt(data[:w], data[w : 2 * w], m, m, (5).to_bytes(1, "big"), 2 * w + 1)
        for bad in (lambda: n.mul(m, data, data[:-1]), lambda: n.mul(m, bytes(w), data[:w]),
                    lambda: n.segment_products(m, data, np.array([200]), np.array([0, 1])),
                    lambda: n.fixed_base((t,), (b"\\xff" * 7,), 1)):
            try:
                bad()
            except (ValueError, TypeError):
                pass
            else:
                raise SystemExit("accepted a bad call")


    # every product this CPU has: AVX-512 IFMA (where it has it) and GMP's mpn layer
    products = ["ifma", "mpn"] if n.ifma_supported() else ["mpn"]
    mod = (1 << 1023) + 1155  # odd
    for product in products:
        check(n.Modulus(mod.to_bytes(128, "big"), product=product), mod, 128)
    p, q = (1 << 511) + 187, (1 << 510) + 321  # odd; decryption's formula needs no primes
    for product in products:
        nn = n.Modulus((p * p * q).to_bytes(192, "big"), product=product)
        c = (12345).to_bytes(192, "big") * 3
        assert n.ou_decrypt(nn, c, be(p), be(p * p), be((1 << 223) + 5), be(7), 64)
        n2 = n.Modulus((p * q * p * q).to_bytes(256, "big"), product=product)
        keys = [be(v) for v in (p, q, p * p, q * q, 3, 5, 7)]
        assert n.paillier_decrypt(n2, (99).to_bytes(256, "big") * 2, *keys, 128)
    print("asan-ok")
    """
)


@native
@pytest.mark.slow
def test_native_kernel_under_address_sanitizer(tmp_path: Path) -> None:
    """Build the kernel with -fsanitize=address and run its entry points, good and bad."""
    cc = which("gcc") or which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the sanitizer build")
    libasan = subprocess.run(
        [cc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(libasan) or not os.path.exists(libasan):
        pytest.skip("the compiler has no AddressSanitizer runtime")
    sources = sorted(str(p) for p in Path(kernels.__file__).with_name("_native_src").glob("*.c"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = tmp_path / f"_native{suffix}"
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O1",
            "-g",
            "-fsanitize=address",
            "-fno-omit-frame-pointer",
            f"-I{include}",
            *sources,
            "-lgmp",
            "-o",
            str(out),
        ],
        check=True,
    )
    script = tmp_path / "run.py"
    script.write_text(_ASAN_SCRIPT)
    env = dict(os.environ, LD_PRELOAD=libasan, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1")
    run = subprocess.run(
        [sys.executable, str(script), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "asan-ok" in run.stdout
