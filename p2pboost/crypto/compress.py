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
split-infos is the host's to choose: it shuffles them first
(:mod:`p2pboost.hetero.training.host_tree`), so neither the order nor which sums share a ciphertext
says anything about their features.

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

from p2pboost.crypto import kernels
from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey
from p2pboost.crypto.packing import PackingSpec, unpack_sums
from p2pboost.crypto.residues import Residues
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


def block_size(spec: PackingSpec) -> int:
    """Split-infos per block of the layout: the least common multiple of the per-plane
    capacities ``floor(plaintext_bits / row_bits[p])``, so every plane of a block fills whole
    ciphertexts (for one plaintext per row, simply the capacity)."""
    return math.lcm(*(spec.plaintext_bits // bits for bits in spec.row_bits))


def compression_layout(spec: PackingSpec, n_infos: int) -> list[list[_Item]]:
    """Layout of ``n_infos`` split-infos (``plaintexts_per_row`` packed sums each).

    The split-infos are cut in blocks of :func:`block_size`; within a block, plane by plane,
    each ciphertext takes as many of that plane's sums as fit ``plaintext_bits`` (the first
    sum of a ciphertext sits in its highest bits). Plane-major blocks pack a vector row's
    short last plane (a multi-output tree's leftover outputs) with the same plane of other
    split-infos instead of leaving most of a ciphertext empty, and a run of whole blocks is
    laid out as a package of its own (:func:`cut_points`).
    """
    block = block_size(spec)
    layout: list[list[_Item]] = []
    for first in range(0, n_infos, block):
        infos = range(first, min(first + block, n_infos))
        for plane, width in enumerate(spec.row_bits):
            per_ct = spec.plaintext_bits // width
            for start in range(0, len(infos), per_ct):
                group = infos[start : start + per_ct]
                shift = width * len(group)
                items = []
                for info in group:
                    shift -= width
                    items.append(_Item(info, plane, shift, width))
                layout.append(items)
    return layout


def compressed_count(spec: PackingSpec, n_infos: int) -> int:
    """How many ciphertexts :func:`compression_layout` uses for ``n_infos`` split-infos
    (closed form, so a receiver checks a package's size without building its layout)."""
    block = block_size(spec)
    whole, rest = divmod(n_infos, block)
    return sum(
        whole * (block // per_ct) + -(-rest // per_ct)
        for per_ct in (spec.plaintext_bits // bits for bits in spec.row_bits)
    )


def cut_points(spec: PackingSpec, n_infos: int, pieces: int) -> list[int]:
    """Split-info indices ``0 = c_0 < c_1 < ... = n_infos`` cutting a package in at most
    ``pieces`` runs of whole blocks (:func:`block_size`).

    A run that starts on a block boundary is laid out exactly as a package of its own, and
    its ciphertexts are ``compressed_count(c_i) .. compressed_count(c_i+1)`` of the package,
    so each run can be compressed or opened by a separate task and the results concatenated.
    """
    if n_infos <= 0:
        return [0]
    if pieces <= 1:
        return [0, n_infos]
    block = block_size(spec)
    per_piece = block * math.ceil(math.ceil(n_infos / block) / pieces)
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
    """Compress ``sums[i][p]`` (split-info ``i``, plane ``p``) into few ciphertexts (the
    process' kernel: :func:`~p2pboost.crypto.kernels.horner`)."""
    width = public_key.ciphertext_bytes
    flat = Residues.of_values([c for row in sums for c in row], width)
    index, shifts, offsets = horner_plan(spec, len(sums))
    if not len(sums):
        return []
    return kernels.horner(public_key.modulus, flat.take(index), shifts, offsets).values


def horner_plan(spec: PackingSpec, n_infos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compression layout of ``n_infos`` split-infos as kernel arguments: the flat index
    (split-info ``i``, plane ``p`` at ``i * planes + p``) of each sum in Horner order, the
    shift before each sum is added (its width), and the offsets of the compressed
    ciphertexts' groups."""
    planes = spec.plaintexts_per_row
    layout = compression_layout(spec, n_infos)
    index = np.fromiter(
        (item.info * planes + item.plane for items in layout for item in items), dtype=np.int64
    )
    shifts = np.fromiter((item.width for items in layout for item in items), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(items) for items in layout])]).astype(np.int64)
    return index, shifts, offsets


def compress_parts(public_key: AnyPublicKey, spec: PackingSpec, parts: Sequence[bytes]) -> bytes:
    """Worker kernel: multiply partial sums and compress them, bytes in and out.

    ``parts[k]`` holds ``plaintexts_per_row`` ciphertexts per split-info (its planes in
    order), fixed-width big-endian, all in the same split-info order; a sum is the product of
    the same ciphertext of every part. Returns the compressed ciphertexts, same encoding.
    Both steps are kernel calls (:func:`~p2pboost.crypto.kernels.multiply`,
    :func:`~p2pboost.crypto.kernels.horner`).
    """
    planes = spec.plaintexts_per_row
    if not parts:
        raise InputError("compress_parts takes one or more parts")
    n2 = public_key.modulus
    if len({len(part) for part in parts}) != 1:
        raise InputError("partial sums differ in length")
    flat = CiphertextBatch.of(public_key, parts[0]).residues(public_key)
    for part in parts[1:]:
        flat = kernels.multiply(n2, flat, CiphertextBatch.of(public_key, part).residues(public_key))
    if len(flat) % planes:
        raise InputError(f"partial sums must hold {planes} ciphertexts per split-info")
    index, shifts, offsets = horner_plan(spec, len(flat) // planes)
    return kernels.horner(n2, flat.take(index), shifts, offsets).data


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
    cts = CiphertextBatch.of(public_key, data).residues(public_key)
    plaintexts = kernels.decrypt(private_key, cts)
    return decompress_split_infos(spec, plaintexts, counts)
