"""Cipher compressing (SecureBoost+, Alg. 4): many split-infos per ciphertext, and back.

A split-info is the encrypted packed left-sum of one split candidate (feature, bin): about 105
bits of a 2047-bit Paillier plaintext (681 bits under 2048-bit OU). Decryption is the guest's
bottleneck, so the host shifts and adds ``capacity = floor(plaintext_bits / packed bits)`` of
them into one ciphertext (Horner's rule: ``acc = acc * 2**w + c``, i.e. ``acc**(2**w) * c``
modulo the ciphertext modulus), and the guest decrypts once per
``capacity`` candidates. The slot budget of :class:`~p2pboost.crypto.packing.PackingSpec`
guarantees that no packed sum overflows its ``w`` bits, so the shifted sums never overlap.

The layout (which sum sits in which ciphertext at which shift) depends only on the spec and the
number of split-infos, so it is recomputed on both sides and never sent. The order of the
split-infos is the host's to choose: it shuffles them first (:mod:`p2pboost.hetero._host`), so
neither the order nor which sums share a ciphertext says anything about their features.

Two kernels run in worker processes with bytes in and bytes out (fixed-width big-endian
ciphertexts, as :class:`~p2pboost.crypto.additive.CiphertextBatch` carries them), so no list of
big integers ever crosses a process boundary:

* :func:`compress_parts` (host): the product of several partial sums of each split-info (a
  host's row shards each hold part of every histogram), then Horner;
* :func:`open_split_infos` (guest): parse and range-check, decrypt, split the plaintexts and
  unpack them into exact integer sums.

:func:`cut_points` says where a package may be cut so the pieces run in parallel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gmpy2  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey
from p2pboost.crypto.packing import PackingSpec, unpack_sums
from p2pboost.exceptions import CryptoError, InputError

__all__ = [
    "compress",
    "compress_groups",
    "compress_parts",
    "compressed_count",
    "compression_groups",
    "compression_layout",
    "cut_points",
    "decompress",
    "decompress_split_infos",
    "open_split_infos",
]


@dataclass(frozen=True, slots=True)
class _Item:
    """One packed sum inside a compressed ciphertext."""

    info: int
    plane: int
    shift: int
    width: int


def compression_layout(spec: PackingSpec, n_infos: int) -> list[list[_Item]]:
    """Greedy layout of ``n_infos`` split-infos (``plaintexts_per_row`` sums each).

    Each ciphertext takes sums while they fit ``plaintext_bits``; the first sum of a ciphertext
    sits in its highest bits.
    """
    widths = spec.row_bits
    groups: list[list[tuple[int, int, int]]] = []
    current: list[tuple[int, int, int]] = []
    used = 0
    for info in range(n_infos):
        for plane, width in enumerate(widths):
            if used + width > spec.plaintext_bits:
                groups.append(current)
                current, used = [], 0
            current.append((info, plane, width))
            used += width
    if current:
        groups.append(current)
    layout = []
    for group in groups:
        shift = sum(w for _, _, w in group)
        items = []
        for info, plane, width in group:
            shift -= width
            items.append(_Item(info, plane, shift, width))
        layout.append(items)
    return layout


def compressed_count(spec: PackingSpec, n_infos: int) -> int:
    """How many ciphertexts :func:`compression_layout` uses for ``n_infos`` split-infos.

    Closed form for one plaintext per row (what the vertical protocol sends), so a receiver
    can check a package's size without building its layout.
    """
    if spec.plaintexts_per_row == 1:
        return -(-n_infos // spec.split_infos_per_plaintext)
    return len(compression_layout(spec, n_infos))


def cut_points(spec: PackingSpec, n_infos: int, pieces: int) -> list[int]:
    """Split-info indices ``0 = c_0 < c_1 < ... = n_infos`` cutting a package in at most
    ``pieces`` runs of whole ciphertexts.

    A run that starts on a ciphertext boundary is laid out exactly as a package of its own, so
    each run can be compressed or opened by a separate task and the results concatenated. Only
    one-plaintext rows are cut (a split-info of several plaintexts may straddle ciphertexts).
    """
    if n_infos <= 0:
        return [0]
    if spec.plaintexts_per_row != 1 or pieces <= 1:
        return [0, n_infos]
    per_ct = spec.split_infos_per_plaintext
    per_piece = per_ct * math.ceil(compressed_count(spec, n_infos) / pieces)
    return [*range(0, n_infos, per_piece), n_infos]


def compression_groups(
    spec: PackingSpec, sums: Sequence[Sequence[Any]]
) -> list[list[tuple[Any, int]]]:
    """``(ciphertext, width)`` pairs per compressed ciphertext, in Horner order."""
    return [
        [(sums[item.info][item.plane], item.width) for item in items]
        for items in compression_layout(spec, len(sums))
    ]


def compress_groups(n2: Any, groups: Sequence[Sequence[tuple[Any, int]]]) -> list[Any]:
    """Horner's rule per group: ``acc = acc**(2**width) * c mod n2`` (shift, then add)."""
    out = []
    for group in groups:
        acc = group[0][0]
        for c, width in group[1:]:
            acc = gmpy2.powmod(acc, 1 << width, n2) * c % n2
        out.append(acc)
    return out


def compress(
    public_key: AnyPublicKey, spec: PackingSpec, sums: Sequence[Sequence[Any]]
) -> list[Any]:
    """Compress ``sums[i][p]`` (split-info ``i``, plane ``p``) into few ciphertexts."""
    return compress_groups(public_key.modulus, compression_groups(spec, sums))


def compress_parts(public_key: AnyPublicKey, spec: PackingSpec, parts: Sequence[bytes]) -> bytes:
    """Worker kernel: multiply partial sums and compress them, bytes in and out.

    ``parts[k]`` holds one ciphertext per split-info (one plaintext per row), fixed-width
    big-endian, all in the same split-info order; split-info ``i``'s sum is the product of the
    ``i``-th ciphertext of every part. Returns the compressed ciphertexts, same encoding.
    """
    if spec.plaintexts_per_row != 1 or not parts:
        raise InputError("compress_parts takes one or more parts of one-plaintext split-infos")
    n2 = public_key.modulus
    if len({len(part) for part in parts}) != 1:
        raise InputError("partial sums differ in length")
    sums = CiphertextBatch.of(public_key, parts[0]).ciphertexts(public_key)
    for part in parts[1:]:
        other = CiphertextBatch.of(public_key, part).ciphertexts(public_key)
        sums = [a * b % n2 for a, b in zip(sums, other, strict=True)]
    compressed = compress(public_key, spec, [[s] for s in sums])
    return CiphertextBatch.from_ciphertexts(public_key, compressed).data


def decompress(spec: PackingSpec, plaintexts: Sequence[int], n_infos: int) -> list[list[int]]:
    """Split decrypted compressed plaintexts back into ``planes[p][i]`` packed sums."""
    layout = compression_layout(spec, n_infos)
    if len(plaintexts) != len(layout):
        raise CryptoError(f"expected {len(layout)} compressed plaintexts, got {len(plaintexts)}")
    planes: list[list[int]] = [[0] * n_infos for _ in spec.row_bits]
    for value, items in zip(plaintexts, layout, strict=True):
        value = int(value)
        if value >> sum(item.width for item in items):
            raise CryptoError("a compressed plaintext has bits above its packed sums")
        for item in items:
            planes[item.plane][item.info] = (value >> item.shift) & ((1 << item.width) - 1)
    return planes


def decompress_split_infos(
    spec: PackingSpec, plaintexts: Sequence[int], counts: npt.ArrayLike
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Exact integer left-sums ``(g, h)`` of each split-info, shape (m, outputs).

    ``plaintexts`` are the decrypted compressed ciphertexts; ``counts`` the rows of each sum.
    """
    cnt = np.asarray(counts)
    planes = decompress(spec, plaintexts, int(cnt.shape[0]))
    return unpack_sums(spec, planes, cnt)


def open_split_infos(
    private_key: AnyPrivateKey, spec: PackingSpec, data: bytes, counts: npt.ArrayLike
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Worker kernel of the guest: compressed ciphertext bytes in, exact left sums out.

    Parses ``data`` (fixed-width big-endian ciphertexts under ``private_key``'s public key),
    raising :class:`~p2pboost.exceptions.CodecError` for a value outside ``(0, modulus)``;
    decrypts; and unpacks the sums of ``counts`` split-infos
    (:func:`decompress_split_infos`), raising :class:`CryptoError` for a sum that cannot be.
    """
    public_key = private_key.public_key
    batch = CiphertextBatch.of(public_key, data)
    decrypt = private_key.decrypt
    plaintexts = [decrypt(c) for c in batch.ciphertexts(public_key)]
    return decompress_split_infos(spec, plaintexts, counts)
