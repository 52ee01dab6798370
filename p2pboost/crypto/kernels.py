"""The ciphertext kernels, native or gmpy2, behind one checked face.

Every hot loop of a party's ciphertext work goes through here: the products of histogram
accumulation (:func:`segment_products`), cell by cell products (:func:`multiply`), prefix
products over bins (:func:`prefix_products`), batched division (:func:`divide`), compression
by Horner's rule (:func:`horner`), decryption (:func:`decrypt`) and fixed-base encryption
(:func:`encryptor`).

**Two kernels.** ``native`` is the C extension :mod:`p2pboost.crypto._native` over GMP: the
loops run over contiguous fixed-width big-endian buffers with the GIL released (Montgomery
products on GMP's mpn layer, or with AVX-512 IFMA where the CPU has it: :func:`native_product`;
decryption with ``mpz_powm_sec`` or, on the IFMA product, a constant-time fixed-window
exponentiation). ``gmpy2`` is the reference
(:mod:`p2pboost.crypto._kernel_gmpy2`), pure Python over gmpy2, always available. The choice
is made once per process, at import, from the environment variable ``P2PBOOST_KERNEL``:
``auto`` (the default: native when the extension was built), ``native`` (an error if it was
not) or ``gmpy2``. Worker processes inherit the variable, so a whole party runs one kernel.
Both give the same results bit for bit; the tests hold them to it.

**Checks before C.** The native functions receive only what this module has checked: widths
equal to the modulus' width, whole blocks, index and offset arrays of the right type, length
and range. Ciphertexts from a peer are range-checked where they enter
(:meth:`~p2pboost.crypto.additive.CiphertextBatch.residues`, :func:`~p2pboost.crypto.residues.
check_range`), so values outside ``(0, modulus)`` never reach C; the C side checks again and
raises ``ValueError``, which this module reports as :class:`~p2pboost.exceptions.CodecError`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto import _kernel_gmpy2 as _py
from p2pboost.crypto.residues import Residues
from p2pboost.exceptions import CodecError, CryptoError, InputError

__all__ = [
    "KERNELS",
    "KERNEL_ENV",
    "active",
    "decrypt",
    "divide",
    "empty",
    "horner",
    "multiply",
    "native_available",
    "native_modulus",
    "native_product",
    "prefer",
    "prefix_products",
    "releases_gil",
    "segment_products",
    "use",
    "values_of",
]

#: The environment variable that picks the kernel of a process: auto, native or gmpy2.
KERNEL_ENV = "P2PBOOST_KERNEL"
#: The kernels' names.
KERNELS = ("native", "gmpy2")

_native: Any
try:  # built by setup.py when a C compiler and GMP's headers were there
    from p2pboost.crypto import _native as _built  # type: ignore[attr-defined, unused-ignore]

    _native = _built
except ImportError:  # pragma: no cover - exercised by the CI job without a compiler
    _native = None

I64 = npt.NDArray[np.int64]


def native_available() -> bool:
    """Whether the native extension was built and imports."""
    return _native is not None


def native_product() -> str | None:
    """The Montgomery product the native kernel uses in this process for the library's key
    sizes: ``"ifma"`` (AVX-512 IFMA, radix 2**52) where the CPU has it, else ``"mpn"`` (GMP's
    mpn layer); ``None`` without the extension. ``P2PBOOST_IFMA=0`` in the environment (read
    once per process, inherited by workers) forces ``"mpn"``; results are the same bytes."""
    return None if _native is None else str(_native.product_kind())


def _from_env() -> str:
    wanted = os.environ.get(KERNEL_ENV, "auto").strip().lower() or "auto"
    if wanted == "auto":
        return "native" if _native is not None else "gmpy2"
    if wanted not in KERNELS:
        raise InputError(f"{KERNEL_ENV}={wanted!r}: choose auto, native or gmpy2")
    if wanted == "native" and _native is None:
        raise InputError(
            f"{KERNEL_ENV}=native but the native kernel was not built (reinstall with a C "
            "compiler and GMP's headers, e.g. apt-get install gcc libgmp-dev)"
        )
    return wanted


_ACTIVE = [_from_env()]


def active() -> str:
    """The kernel this process uses: ``"native"`` or ``"gmpy2"``."""
    return _ACTIVE[0]


def use(name: str) -> str:
    """Switch this process (and the worker processes it starts from now on) to kernel
    ``name``; returns the previous one. For tests and benchmarks that compare the two."""
    if name not in KERNELS:
        raise InputError(f"unknown kernel {name!r}; choose one of {list(KERNELS)}")
    if name == "native" and _native is None:
        raise InputError("the native kernel was not built")
    previous = _ACTIVE[0]
    _ACTIVE[0] = name
    os.environ[KERNEL_ENV] = name
    return previous


def releases_gil() -> bool:
    """Whether this process's kernel runs its loops with the GIL released (the native one):
    then a party's crypto workers may be threads of its own process
    (:func:`~p2pboost.workers.pool_kind`); gmpy2's loops are Python and hold it."""
    return _is_native()


def _is_native() -> bool:
    return _ACTIVE[0] == "native"


@functools.lru_cache(maxsize=32)
def native_modulus(mod: int) -> Any:
    """The native Modulus (Montgomery constants) of ``mod``, made once per process."""
    assert _native is not None
    return _native.Modulus(int(mod).to_bytes((int(mod).bit_length() + 7) // 8, "big"))


def _call(fn: Any, *args: Any) -> bytes:
    """A native call; its ValueError (a value outside its range) as CodecError."""
    try:
        return bytes(fn(*args))
    except ValueError as exc:
        raise CodecError(f"native kernel refused its input: {exc}") from exc


# --- checks ---------------------------------------------------------------------------------
def _width(mod: Any) -> int:
    return (int(mod).bit_length() + 7) // 8


def _check(mod: Any, *parts: Residues) -> int:
    """The modulus' width, which every part must have."""
    width = _width(mod)
    for part in parts:
        if part.width != width:
            raise InputError(f"residues of width {part.width}, the modulus needs {width}")
    return width


def _int64(values: npt.ArrayLike, name: str) -> I64:
    arr = np.ascontiguousarray(np.asarray(values), dtype=np.int64).reshape(-1)
    if np.asarray(values).dtype.kind not in "iu" and np.asarray(values).size:
        raise InputError(f"{name} must be integers")
    return arr


def _offsets(offsets: npt.ArrayLike, total: int) -> I64:
    off = _int64(offsets, "offsets")
    if off.size == 0 or off[0] != 0 or off[-1] != total or np.any(np.diff(off) < 0):
        raise InputError("offsets must rise from 0 to the number of items")
    return off


# --- kernels --------------------------------------------------------------------------------
def multiply(mod: Any, a: Residues, b: Residues) -> Residues:
    """``a[i] * b[i] mod mod`` (ciphertext additions, cell by cell)."""
    width = _check(mod, a, b)
    if a.count != b.count:
        raise InputError("operands differ in length")
    if not a.count:
        return Residues.of_bytes(b"", width)
    if _is_native():
        return Residues.of_bytes(_call(_native.mul, native_modulus(mod), a.data, b.data), width)
    return Residues.of_values(_py.multiply(mod, a.values, b.values), width)


def segment_products(
    mod: Any, cts: Residues, index: npt.ArrayLike, offsets: npt.ArrayLike
) -> Residues:
    """For each segment ``s``: the product of ``cts[index[k]]`` for ``offsets[s] <= k <
    offsets[s + 1]`` (1 for an empty segment): the sums of a histogram's cells."""
    width = _check(mod, cts)
    idx = _int64(index, "index")
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= cts.count):
        raise InputError("index out of range")
    off = _offsets(offsets, int(idx.size))
    if _is_native():
        out = _call(_native.segment_products, native_modulus(mod), cts.data, idx, off)
        return Residues.of_bytes(out, width)
    return Residues.of_values(_py.segment_products(mod, cts.values, idx, off), width)


def prefix_products(mod: Any, cts: Residues, run: int) -> Residues:
    """Running products within each run of ``run`` consecutive residues (cumulative sums of
    a histogram's bins, feature by feature)."""
    width = _check(mod, cts)
    if run <= 0 or cts.count % run:
        raise InputError("run must be positive and divide the number of residues")
    if not cts.count:
        return cts
    if _is_native():
        out = _call(_native.prefix_products, native_modulus(mod), cts.data, run)
        return Residues.of_bytes(out, width)
    return Residues.of_values(_py.prefix_products(mod, cts.values, run), width)


def divide(mod: Any, a: Residues, b: Residues) -> Residues:
    """``a[i] * b[i]**-1 mod mod`` with one inversion for the batch (ciphertext subtraction).
    :class:`CryptoError` when a divisor has no inverse (it shares a factor with the modulus)."""
    width = _check(mod, a, b)
    if a.count != b.count:
        raise InputError("operands differ in length")
    if not a.count:
        return Residues.of_bytes(b"", width)
    if _is_native():
        try:
            out = bytes(_native.divide(native_modulus(mod), a.data, b.data))
        except ValueError as exc:
            if "inverse" in str(exc):
                raise CryptoError("a ciphertext has no inverse modulo the modulus") from exc
            raise CodecError(f"native kernel refused its input: {exc}") from exc
        return Residues.of_bytes(out, width)
    try:
        return Residues.of_values(_py.divide(mod, a.values, b.values), width)
    except ZeroDivisionError as exc:
        raise CryptoError("a ciphertext has no inverse modulo the modulus") from exc


def horner(mod: Any, cts: Residues, shifts: npt.ArrayLike, offsets: npt.ArrayLike) -> Residues:
    """Per group, ``acc = cts[first]``, then ``acc = acc**(2**shifts[k]) * cts[k]`` for the
    group's other residues: SecureBoost+ cipher compression (shift, then add)."""
    width = _check(mod, cts)
    sh = _int64(shifts, "shifts")
    if sh.size != cts.count or (sh.size and (int(sh.min()) < 0 or int(sh.max()) > 1 << 16)):
        raise InputError("need one shift in [0, 65536] per residue")
    off = _offsets(offsets, cts.count)
    if off.size > 1 and np.any(np.diff(off) == 0):
        raise InputError("every group needs at least one residue")
    if _is_native():
        out = _call(_native.horner, native_modulus(mod), cts.data, sh, off)
        return Residues.of_bytes(out, width)
    return Residues.of_values(_py.horner(mod, cts.values, sh, off), width)


def decrypt(private_key: Any, cts: Residues) -> list[int]:
    """Decrypt ciphertexts (checked residues of the key's modulus) to plaintext integers.

    Native: the key owner's exponentiations with the secret exponent (Paillier: ``p - 1`` and
    ``q - 1`` modulo ``p**2`` and ``q**2``, by CRT; OU: the key's decryption exponent modulo
    ``p**2``) are constant-time: ``mpz_powm_sec`` on GMP's mpn product, a fixed-window
    exponentiation with full table scans on the AVX-512 IFMA product (:func:`native_product`;
    docs/explanation/native-kernel.md says what each leaves visible).
    """
    pk = private_key.public_key
    _check(pk.modulus, cts)
    if not cts.count:
        return []
    if not _is_native():
        dec = private_key.decrypt
        return [int(dec(c)) for c in cts.values]
    be = _be
    if pk.scheme == "ou":
        p = private_key.p
        exponent = getattr(private_key, "decryption_exponent", p - 1)
        pw = _width(p)
        out = _call(
            _native.ou_decrypt,
            native_modulus(pk.modulus),
            cts.data,
            be(p),
            be(private_key.psquare),
            be(exponent),
            be(private_key.gp_inverse),
            pw,
        )
    else:
        pw = _width(pk.n)
        k = private_key
        out = _call(
            _native.paillier_decrypt,
            native_modulus(pk.modulus),
            cts.data,
            *(be(v) for v in (k.p, k.q, k.psquare, k.qsquare, k.hp, k.hq, k.p_inverse)),
            pw,
        )
    return [int.from_bytes(out[i : i + pw], "big") for i in range(0, len(out), pw)]


def _be(value: Any) -> bytes:
    v = int(value)
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


def empty(width: int) -> Residues:
    """No residues, in the form the process' kernel works on."""
    return Residues.of_bytes(b"", width) if _is_native() else Residues.of_values([], width)


def prefer(cts: Residues) -> Residues:
    """``cts`` with the form the process' kernel works on made now (parsed once for gmpy2),
    so that residues kept for many kernel calls are converted once."""
    if not _is_native():
        cts.values  # noqa: B018 - parsed and cached
    return cts


def values_of(cts: Residues | Sequence[Any], width: int) -> Residues:
    """``cts`` as residues (a list of integers is wrapped as it is)."""
    return cts if isinstance(cts, Residues) else Residues.of_values(cts, width)
