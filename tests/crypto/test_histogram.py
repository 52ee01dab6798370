"""Encrypted histograms and cipher compression against the plaintext fixed-point histogram."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from gmpy2 import mpz  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2pboost.codec import decode, encode
from p2pboost.crypto.compress import (
    block_size,
    compress,
    compress_parts,
    compressed_count,
    compression_layout,
    cut_points,
    decompress,
    decompress_split_infos,
    open_split_infos,
)
from p2pboost.crypto.histogram import batch_invert, build_histogram, product
from p2pboost.crypto.packing import PackingSpec, pack
from p2pboost.crypto.paillier import CiphertextBatch, FixedBaseTable, PrivateKey, PublicKey
from p2pboost.exceptions import CodecError, CryptoError, InputError
from p2pboost.gbdt.fixedpoint import choose_grid, to_fixed


@pytest.fixture(scope="module")
def table(public_key: PublicKey, private_key: PrivateKey) -> FixedBaseTable:
    return FixedBaseTable(public_key, private_key, window_bits=8)


def _problem(seed: int, n: int, n_features: int, n_bins: int, k: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    g = rng.normal(0, 1, (n, k))  # negative and positive gradients
    h = rng.uniform(0, 0.25, (n, k))
    gg, hg = choose_grid(g, n), choose_grid(h, n)
    bins = rng.integers(0, n_bins, (n, n_features)).astype(np.uint8)
    bins[rng.random((n, n_features)) < 0.5] = 0  # sparse-ish: bin 0 dominates
    return {
        "gi": to_fixed(g, gg),
        "hi": to_fixed(h, hg),
        "gg": gg,
        "hg": hg,
        "bins": bins,
        "rng": rng,
    }


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 60),
    n_features=st.integers(1, 3),
    n_bins=st.integers(2, 6),
    k=st.sampled_from([1, 2, 11]),
)
def test_pipeline_equals_plaintext_histogram(
    public_key: PublicKey,
    private_key: PrivateKey,
    table: FixedBaseTable,
    seed: int,
    n: int,
    n_features: int,
    n_bins: int,
    k: int,
) -> None:
    """pack -> encrypt -> histogram (chunked, sparse) -> subtract -> cumulative -> compress ->
    decrypt -> decompress -> unpack gives exactly the plaintext fixed-point left sums."""
    p = _problem(seed, n, n_features, n_bins, k)
    bins, rng = p["bins"], p["rng"]
    spec = PackingSpec.for_grids(n, p["gg"], p["hg"], key_bits=public_key.bits, n_outputs=k)
    planes = [table.encrypt_many(plane) for plane in pack(spec, p["gi"], p["hi"])]

    # Parent (a node holding a random subset of rows), accumulated in two chunks.
    parent_rows = np.flatnonzero(rng.random(n) < 0.8)
    cut = len(parent_rows) // 2
    zero_bins = np.zeros(n_features, dtype=np.int64)
    parent = build_histogram(
        public_key, bins, n_bins, planes, parent_rows[:cut], zero_bins=zero_bins
    )
    parent = parent.merge(
        build_histogram(public_key, bins, n_bins, planes, parent_rows[cut:], zero_bins=zero_bins)
    )
    child_rows = parent_rows[rng.random(len(parent_rows)) < 0.5]
    child = build_histogram(public_key, bins, n_bins, planes, child_rows)
    sibling_rows = np.setdiff1d(parent_rows, child_rows)
    sibling = parent.subtract(child).cumulative()

    # Every (feature, bin) cut, shuffled, compressed, decrypted, unpacked.
    cands = [(f, b) for f in range(n_features) for b in range(n_bins - 1)]
    cands = [cands[i] for i in rng.permutation(len(cands))]
    counts = np.array([sibling.counts[f, b] for f, b in cands], dtype=np.int64)
    compressed = compress(public_key, spec, [sibling.cell(f, b) for f, b in cands])
    assert len(compressed) == len(compression_layout(spec, len(cands)))
    assert len(compressed) == compressed_count(spec, len(cands))
    plaintexts = [private_key.decrypt(c) for c in compressed]
    G, H = decompress_split_infos(spec, plaintexts, counts)

    for i, (f, b) in enumerate(cands):
        left = sibling_rows[bins[sibling_rows, f] <= b]
        assert counts[i] == len(left)
        np.testing.assert_array_equal(G[i], p["gi"][left].sum(axis=0))
        np.testing.assert_array_equal(H[i], p["hi"][left].sum(axis=0))


def test_histogram_cells_and_counts(
    public_key: PublicKey, private_key: PrivateKey, table: FixedBaseTable
) -> None:
    rng = np.random.default_rng(1)
    n, n_bins = 80, 5
    values = rng.integers(0, 1000, n)
    bins = rng.integers(0, n_bins, (n, 2)).astype(np.uint16)
    cts = table.encrypt_many(values.tolist())
    rows = np.flatnonzero(rng.random(n) < 0.7)
    for zero_bins in (None, np.array([2, -1])):
        hist = build_histogram(public_key, bins, n_bins, [cts], rows, zero_bins=zero_bins)
        for f in range(2):
            for b in range(n_bins):
                sel = rows[bins[rows, f] == b]
                assert hist.counts[f, b] == len(sel)
                assert private_key.decrypt(hist.cell(f, b)[0]) == values[sel].sum()


def test_only_the_given_features_are_accumulated(
    public_key: PublicKey, private_key: PrivateKey, table: FixedBaseTable
) -> None:
    """Column sampling: the sampled features' cells are those of the full build, the others
    stay empty (the encryption of 0, zero counts) and cost no addition."""
    rng = np.random.default_rng(4)
    n, n_bins = 50, 4
    bins = rng.integers(0, n_bins, (n, 4)).astype(np.uint8)
    cts = table.encrypt_many(rng.integers(0, 100, n).tolist())
    rows = np.arange(0, n, 2)
    full = build_histogram(public_key, bins, n_bins, [cts], rows)
    some = build_histogram(public_key, bins, n_bins, [cts], rows, features=np.array([3, 1]))
    for f in range(4):
        for b in range(n_bins):
            if f in (1, 3):
                assert some.cell(f, b) == full.cell(f, b)
                assert some.counts[f, b] == full.counts[f, b]
            else:
                assert some.cell(f, b) == [1]  # E(0) with no randomness: no product made
                assert some.counts[f, b] == 0
    for bad in (np.array([4]), np.array([1, 1]), np.array([-1])):
        with pytest.raises(InputError, match="distinct column indices"):
            build_histogram(public_key, bins, n_bins, [cts], features=bad)


def test_chunks_merge_to_the_whole(public_key: PublicKey, table: FixedBaseTable) -> None:
    rng = np.random.default_rng(2)
    n, n_bins = 60, 4
    bins = rng.integers(0, n_bins, (n, 3)).astype(np.uint8)
    cts = table.encrypt_many(rng.integers(0, 100, n).tolist())
    whole = build_histogram(public_key, bins, n_bins, [cts])
    merged = build_histogram(public_key, bins[:25], n_bins, [cts[:25]]).merge(
        build_histogram(public_key, bins[25:], n_bins, [cts[25:]])
    )
    np.testing.assert_array_equal(whole.counts, merged.counts)
    assert whole.planes == merged.planes  # ciphertext products are exactly equal


def test_bad_histogram_inputs(public_key: PublicKey, table: FixedBaseTable) -> None:
    cts = table.encrypt_many([1, 2, 3])
    bins = np.array([[0], [1], [2]], dtype=np.uint8)
    with pytest.raises(InputError):
        build_histogram(public_key, bins, 2, [cts])  # bin 2 >= n_bins
    with pytest.raises(InputError):
        build_histogram(public_key, bins.astype(np.int64), 3, [cts])
    with pytest.raises(InputError):
        build_histogram(public_key, bins, 3, [cts[:2]])
    with pytest.raises(InputError):
        build_histogram(public_key, bins, 3, [cts], np.array([3]))
    small = build_histogram(public_key, bins, 3, [cts], np.array([0]))
    whole = build_histogram(public_key, bins, 3, [cts])
    with pytest.raises(InputError):
        small.subtract(whole)


def test_batch_invert(public_key: PublicKey) -> None:
    values = [mpz(v) for v in (1, 2, 3, 12345678901234567890, int(public_key.n2) - 1)]
    for v, inv in zip(values, batch_invert(values, public_key.n2), strict=True):
        assert v * inv % public_key.n2 == 1
    assert batch_invert([], public_key.n2) == []


def test_compression_round_trip_of_plain_sums(
    public_key: PublicKey, private_key: PrivateKey, table: FixedBaseTable
) -> None:
    """Compressing arbitrary packed sums below their slot width and decompressing is exact."""
    rng = np.random.default_rng(3)
    grid = choose_grid(np.array([1.0]), 1000)
    spec = PackingSpec.for_grids(1000, grid, grid, key_bits=public_key.bits, n_outputs=7)
    width = spec.row_bits
    n_infos = 5
    sums = [[int(rng.integers(0, 2**62)) << (w - 62) for w in width] for _ in range(n_infos)]
    cts = [table.encrypt_many(row) for row in sums]
    compressed = compress(public_key, spec, cts)
    planes = decompress(spec, [private_key.decrypt(c) for c in compressed], n_infos)
    assert planes == [[sums[i][p] for i in range(n_infos)] for p in range(len(width))]
    with pytest.raises(CryptoError):
        decompress(spec, [1 << public_key.plaintext_bits] * len(compressed), n_infos)
    with pytest.raises(CryptoError):
        decompress(spec, [0], n_infos)


def test_capacity_matches_the_spec(public_key: PublicKey) -> None:
    grid = choose_grid(np.array([1.0]), 1000)
    spec = PackingSpec.for_grids(1000, grid, grid, key_bits=public_key.bits)
    layout = compression_layout(spec, 100)
    assert all(len(items) == spec.split_infos_per_plaintext for items in layout[:-1])
    assert len(layout) == -(-100 // spec.split_infos_per_plaintext)


@pytest.mark.parametrize("k", [1, 11])
def test_byte_kernels_round_trip_and_validate(
    public_key: PublicKey, private_key: PrivateKey, table: FixedBaseTable, k: int
) -> None:
    """Partial sums -> compress_parts -> the wire -> open_split_infos: the exact sums, whole or
    cut at cut_points; foreign, out-of-range or wrongly counted ciphertexts are refused. With
    11 outputs a row takes two plaintexts of a 1024-bit key, and the short second planes of
    several split-infos share ciphertexts."""
    rng = np.random.default_rng(4)
    n, m = 300, 40
    g, h = rng.integers(-1000, 1000, (n, k)), rng.integers(0, 1000, (n, k))
    grid = choose_grid(np.array([1.0]), n)
    spec = PackingSpec.for_grids(n, grid, grid, key_bits=public_key.bits, n_outputs=k)
    planes = spec.plaintexts_per_row
    assert planes == (1 if k == 1 else 2)
    width = public_key.ciphertext_bytes
    rows = [rng.choice(n, size=int(rng.integers(1, n)), replace=False) for _ in range(m)]
    cts = [table.encrypt_many(plane) for plane in pack(spec, g, h)]
    # Two shards: each holds a part of every split-info's rows (a split-info's planes in order).
    halves = [[r[r % 2 == s] for r in rows] for s in (0, 1)]
    parts = [
        CiphertextBatch.from_ciphertexts(
            public_key,
            [product([c[i] for i in r], public_key.n2) for r in half for c in cts],
        ).data
        for half in halves
    ]
    counts = np.array([r.size for r in rows], dtype=np.int64)
    data = compress_parts(public_key, spec, parts)
    assert len(data) == compressed_count(spec, m) * width
    assert len(data) // width == len(compression_layout(spec, m))
    if k > 1:  # the short planes share ciphertexts: fewer than two per split-info
        assert m < len(data) // width < planes * m
    wire = decode(encode(CiphertextBatch(public_key.fingerprint, width, data)))
    assert isinstance(wire, CiphertextBatch)
    G, H = open_split_infos(private_key, spec, wire.data, counts)
    assert G.tolist() == [g[r].sum(axis=0).tolist() for r in rows]
    assert H.tolist() == [h[r].sum(axis=0).tolist() for r in rows]

    cuts = cut_points(spec, m, 3)
    assert cuts[0] == 0
    assert cuts[-1] == m
    assert len(cuts) > 2
    assert all(c % block_size(spec) == 0 for c in cuts[:-1])
    step = planes * width  # one split-info's partial sums
    pieces = [
        compress_parts(public_key, spec, [p[a * step : b * step] for p in parts])
        for a, b in itertools.pairwise(cuts)
    ]
    assert b"".join(pieces) == data
    opened = [
        open_split_infos(
            private_key,
            spec,
            data[compressed_count(spec, a) * width : compressed_count(spec, b) * width],
            counts[a:b],
        )[0]
        for a, b in itertools.pairwise(cuts)
    ]
    np.testing.assert_array_equal(np.concatenate(opened), G)

    with pytest.raises(CodecError):  # a value outside (0, n**2)
        open_split_infos(private_key, spec, int(public_key.n2).to_bytes(width, "big"), counts[:1])
    with pytest.raises(CryptoError):  # fewer ciphertexts than the layout needs
        open_split_infos(private_key, spec, data[:width], counts)
    with pytest.raises(InputError):
        compress_parts(public_key, spec, [parts[0], parts[1][:width]])
    if planes > 1:  # a split-info cut in half
        with pytest.raises(InputError):
            compress_parts(public_key, spec, [parts[0][:width]])
