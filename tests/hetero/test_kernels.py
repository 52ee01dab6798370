"""The host's ciphertext kernels against plaintext sums, and the candidates they keep."""

from __future__ import annotations

import numpy as np
import pytest

from p2pboost.crypto.compress import compress, decompress_split_infos
from p2pboost.crypto.histogram import build_histogram
from p2pboost.crypto.packing import PackingSpec, pack
from p2pboost.gbdt.fixedpoint import choose_grid, quantize, to_fixed
from p2pboost.gbdt.split import candidate_mask
from p2pboost.hetero._kernels import candidate_sums, child_histograms
from tests.hetero.conftest import Keys


def test_candidate_sums_decrypt_to_the_plaintext_left_sums(keys: Keys) -> None:
    public_key, private_key = keys
    rng = np.random.default_rng(5)
    n, n_feat, max_bin = 120, 3, 6
    codes = rng.integers(0, max_bin, size=(n, n_feat)).astype(np.uint8)
    codes[rng.random((n, n_feat)) < 0.2] = max_bin  # missing
    codes[:, 2] = np.where(codes[:, 2] == 3, 2, codes[:, 2])  # bin 3 of feature 2 is empty
    g, h = rng.normal(size=n), rng.random(n)
    gg, hg = choose_grid(g, n), choose_grid(h, n)
    gi, hi = to_fixed(quantize(g, gg), gg), to_fixed(quantize(h, hg), hg)
    spec = PackingSpec.for_grids(n, gg, hg, key_bits=public_key.bits)
    cts = [public_key.encrypt(m) for m in pack(spec, gi, hi)[0]]
    hist = build_histogram(public_key, codes, max_bin + 1, [cts])
    allowed = candidate_mask(np.full(n_feat, max_bin), max_bin)
    cand = candidate_sums(hist, allowed, min_rows=2)

    plain = [private_key.decrypt(c) for c in compress(public_key, spec, [[s] for s in cand.sums])]
    g_sum, h_sum = decompress_split_infos(spec, plain, cand.counts)
    for i, (f, b, dl) in enumerate(
        zip(cand.feature.tolist(), cand.bin.tolist(), cand.default_left.tolist(), strict=True)
    ):
        col = codes[:, f]
        left = (col <= b) | ((col == max_bin) & dl)
        assert cand.counts[i] == left.sum()
        assert g_sum[i, 0] == gi[left].sum()
        assert h_sum[i, 0] == hi[left].sum()
        assert 2 <= left.sum() <= n - 2
    keys_seen = list(
        zip(cand.feature.tolist(), cand.bin.tolist(), cand.default_left.tolist(), strict=True)
    )
    assert keys_seen == sorted(keys_seen, key=lambda k: (k[0], k[1], not k[2]))
    assert (2, 3, True) not in keys_seen  # same left set as bin 2: not sent

    # Sibling by subtraction equals the directly built histogram.
    rows = np.flatnonzero(codes[:, 0] <= 2)
    small, sibling = child_histograms(hist, codes[rows], [cts[i] for i in rows])
    other = np.setdiff1d(np.arange(n), rows)
    direct = build_histogram(public_key, codes[other], max_bin + 1, [[cts[i] for i in other]])
    np.testing.assert_array_equal(sibling.counts, direct.counts)
    dec = [private_key.decrypt(c) for c in sibling.planes[0]]
    assert dec == [private_key.decrypt(c) for c in direct.planes[0]]
    assert small.counts.sum() == rows.size * n_feat


def test_candidate_mask_shape_is_checked(keys: Keys) -> None:
    public_key, _ = keys
    hist = build_histogram(public_key, np.zeros((2, 1), np.uint8), 3, [[public_key.encrypt(1)] * 2])
    with pytest.raises(ValueError, match="mask"):
        candidate_sums(hist, np.ones((1, 5, 2), dtype=np.bool_), 1)
