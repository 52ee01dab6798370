"""Packing specs: slot budgets, exact unpacking, and the largest n a budget allows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost.crypto.packing import Component, PackingSpec, encode_precision, pack, unpack_sums
from p2pboost.crypto.paillier import PrivateKey, PublicKey, scalar_mul
from p2pboost.exceptions import CryptoError, InputError
from p2pboost.gbdt.fixedpoint import Grid, choose_grid, to_fixed


def _logloss_like(n: int, k: int = 1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, (n, k))
    return p - rng.integers(0, 2, (n, k)), p * (1 - p)


def test_binary_spec_for_150k_rows() -> None:
    """The figures the benchmark reports: 105-bit rows, 9 (1024) and 19 (2048) per plaintext."""
    g, h = _logloss_like(1000)
    n = 150_000
    for key_bits, capacity in ((1024, 9), (2048, 19)):
        spec = PackingSpec.for_grids(n, choose_grid(g, n), choose_grid(h, n), key_bits=key_bits)
        assert spec.plaintexts_per_row == 1
        assert spec.row_bits == (105,)
        assert spec.split_infos_per_plaintext == capacity


def test_paper_precision_spec_meets_the_published_capacity() -> None:
    """r = 53 bits, |g| <= 1, 0 <= h <= 1/4, n = 150,000 (SecureBoost+ setting)."""
    for key_bits, at_least in ((1024, 6), (2048, 13)):
        spec = PackingSpec.for_precision(150_000, key_bits=key_bits, g_max=1.0, h_max=0.25)
        assert spec.split_infos_per_plaintext >= at_least


def test_slot_width_is_the_bound_of_a_full_sum() -> None:
    comp = Component(bound=2**10, offset=2**10, scale_bits=0)
    assert comp.slot_width(1) == 12  # values + offset in [0, 2**11]
    assert comp.slot_width(1000) == (1000 * 2**11).bit_length()


def test_multiclass_layout_spans_several_plaintexts() -> None:
    grid = Grid(bits=30, magnitude_bits=0, max_rows=1000)
    spec = PackingSpec.for_grids(1000, grid, grid, key_bits=1024, n_outputs=20)
    slots = [s for plane in spec.layout for s in plane]
    assert sorted((s.output, s.is_hessian) for s in slots) == [
        (k, h) for k in range(20) for h in (False, True)
    ]
    assert spec.plaintexts_per_row > 1
    assert all(bits <= spec.plaintext_bits for bits in spec.row_bits)


def test_values_beyond_the_bound_are_refused() -> None:
    grid = Grid(bits=10, magnitude_bits=0, max_rows=8)
    spec = PackingSpec.for_grids(8, grid, grid, key_bits=1024)
    with pytest.raises(InputError, match="overflow"):
        pack(spec, np.array([2**10 + 1]), np.array([0]))
    with pytest.raises(InputError, match="overflow"):
        pack(spec, np.array([0]), np.array([-1]))  # h has no offset
    with pytest.raises(InputError, match="budget"):
        pack(spec, np.zeros(9, dtype=np.int64), np.zeros(9, dtype=np.int64))
    with pytest.raises(InputError):
        pack(spec, np.array([0.5]), np.array([0]))


def test_grid_too_small_for_the_rows_is_refused() -> None:
    grid = Grid(bits=10, magnitude_bits=0, max_rows=8)
    with pytest.raises(InputError):
        PackingSpec.for_grids(9, grid, grid, key_bits=1024)


def _subset_sums(
    spec: PackingSpec, planes: list[list[int]], subsets: list[np.ndarray]
) -> list[list[int]]:
    return [[sum(plane[i] for i in subset.tolist()) for subset in subsets] for plane in planes]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 200),
    k=st.sampled_from([1, 3, 12]),
    seed=st.integers(0, 2**32 - 1),
    h_nonnegative=st.booleans(),
)
def test_unpacked_subset_sums_are_exact(n: int, k: int, seed: int, h_nonnegative: bool) -> None:
    rng = np.random.default_rng(seed)
    g = rng.normal(0, rng.uniform(0.01, 100), (n, k))
    h = rng.uniform(0, 3, (n, k)) * (1 if h_nonnegative else rng.choice([-1, 1], (n, k)))
    gg, hg = choose_grid(g, n), choose_grid(h, n)
    gi, hi = to_fixed(g, gg), to_fixed(h, hg)
    spec = PackingSpec.for_grids(n, gg, hg, key_bits=1024, n_outputs=k, h_nonnegative=h_nonnegative)
    planes = pack(spec, gi, hi)
    subsets = [np.flatnonzero(rng.random(n) < q) for q in (0.0, 0.3, 1.0)]
    G, H = unpack_sums(spec, _subset_sums(spec, planes, subsets), [len(s) for s in subsets])
    for j, subset in enumerate(subsets):
        np.testing.assert_array_equal(G[j], gi[subset].sum(axis=0))
        np.testing.assert_array_equal(H[j], hi[subset].sum(axis=0))


def test_largest_n_with_extreme_values_under_encryption(
    public_key: PublicKey, private_key: PrivateKey
) -> None:
    """The biggest sums the budget admits, made by scalar multiplication of one ciphertext.

    For the largest n whose 8 slots (4 outputs) still fit one 1023-bit plaintext, n rows all at
    the extreme (g = +-bound, h = bound) decrypt and unpack exactly; n + 1 would not fit.
    """
    g_comp = Component(bound=2**100, offset=2**100, scale_bits=100)
    h_comp = Component(bound=2**100, offset=0, scale_bits=100)

    def fits(n: int) -> bool:
        spec = PackingSpec.build(n, g_comp, h_comp, n_outputs=4, plaintext_bits=1023)
        return spec.plaintexts_per_row == 1

    lo, hi = 1, 2**200
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    n = lo
    spec = PackingSpec.build(n, g_comp, h_comp, n_outputs=4, plaintext_bits=1023)
    assert sum(spec.row_bits) <= 1023
    assert not fits(n + 1)
    assert not spec.sum_fits_int64
    bound = g_comp.bound
    for sign in (1, -1):
        g = np.full((1, 4), sign * bound, dtype=object)
        h = np.full((1, 4), bound, dtype=object)
        (plane,) = pack(spec, g, h)
        c = scalar_mul(public_key, public_key.encrypt(plane[0]), n)
        G, H = unpack_sums(spec, [[private_key.decrypt(c)]], [n])
        assert G[0].tolist() == [sign * bound * n] * 4
        assert H[0].tolist() == [bound * n] * 4


def test_precision_encoding_round_trip() -> None:
    spec = PackingSpec.for_precision(10, key_bits=1024, g_max=1.0, h_max=0.25)
    g = np.array([-1.0, -0.5, 0.0, 0.123456789, 1.0])
    h = np.array([0.0, 0.25, 0.1, 0.2, 0.05])
    gi, hi = encode_precision(g, spec, hessian=False), encode_precision(h, spec, hessian=True)
    (plane,) = pack(spec, gi, hi)
    G, H = unpack_sums(spec, [[sum(plane)]], [5])
    assert G[0, 0] == sum(np.asarray(gi).tolist())
    assert H[0, 0] == sum(np.asarray(hi).tolist())
    assert abs(float(G[0, 0]) * 2.0**-53 - g.sum()) < 1e-12


def test_impossible_sums_are_detected() -> None:
    grid = Grid(bits=10, magnitude_bits=0, max_rows=8)
    spec = PackingSpec.for_grids(8, grid, grid, key_bits=1024)
    (plane,) = pack(spec, np.array([5, -3]), np.array([7, 1]))
    with pytest.raises(CryptoError):
        unpack_sums(spec, [[sum(plane)]], [0])  # count too small for the offset
    with pytest.raises(CryptoError):
        unpack_sums(spec, [[1 << 200]], [2])
    with pytest.raises(CryptoError):
        unpack_sums(spec, [[0]], [9])
