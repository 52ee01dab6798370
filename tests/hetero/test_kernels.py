"""The host's shard kernels against plaintext sums, and the candidates they keep.

The kernels run here in the test process (their state registry is this module's), exactly as
a pinned worker runs them: chunks cut by :func:`chunk_parts`, partial sums multiplied and
compressed by :func:`compress_parts`, opened by :func:`open_split_infos` as the guest does.
"""

from __future__ import annotations

import itertools
import secrets
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2pboost.crypto.compress import compress_parts, open_split_infos
from p2pboost.crypto.keys import AnyPublicKey, AnyTable, make_table
from p2pboost.crypto.packing import PackingSpec, pack
from p2pboost.crypto.paillier import CiphertextBatch
from p2pboost.exceptions import CodecError, InputError, WorkerStateLost
from p2pboost.gbdt.fixedpoint import choose_grid, quantize, to_fixed
from p2pboost.gbdt.split import candidate_mask
from p2pboost.hetero.training import candidates, layout
from p2pboost.hetero.training import shards as k
from tests.hetero.conftest import Keys


@pytest.fixture(scope="module")
def table(keys: Keys) -> AnyTable:
    return make_table(keys[0], keys[1], window_bits=8)


class _Run:
    """``shards`` row shards of one host run, in this process."""

    def __init__(
        self, public_key: AnyPublicKey, codes: np.ndarray, n_slots: int, min_rows: int, shards: int
    ) -> None:
        self.tokens = [secrets.token_hex(8) for _ in range(shards)]
        self.public_key = public_key
        self.codes, self.n_slots = codes, n_slots
        for i, token in enumerate(self.tokens):
            k.shard_open(
                token, public_key.scheme, public_key.to_bytes(), codes, n_slots, min_rows, i, shards
            )

    def each(self, fn: Any, *args: Any) -> list[Any]:
        return [fn(token, *args) for token in self.tokens]

    def root(self, sample: np.ndarray, *args: Any) -> list[Any]:
        """Every shard's root candidates, with the sample's counts as the host hands them."""
        counts = candidates.node_counts(self.codes[sample], self.n_slots)
        return self.each(k.shard_root, counts, *args)

    def stream(self, data: bytes, chunk: int, block: int = 1) -> None:
        width = self.public_key.ciphertext_bytes
        n = len(data) // width
        shards = len(self.tokens)
        for start in range(0, n, chunk):
            piece = data[start * width : min(n, start + chunk) * width]
            for shard, first, part in layout.chunk_parts(start, piece, width, shards, block):
                k.shard_chunk(self.tokens[shard], first, part)

    def close(self) -> None:
        self.each(k.shard_close)


def _problem(seed: int, n: int, n_feat: int, max_bin: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, max_bin, size=(n, n_feat)).astype(np.uint8)
    codes[rng.random((n, n_feat)) < 0.2] = max_bin  # missing
    g, h = rng.normal(size=n), rng.random(n)
    gg, hg = choose_grid(g, n), choose_grid(h, n)
    return {
        "rng": rng,
        "codes": codes,
        "gi": to_fixed(quantize(g, gg), gg),
        "hi": to_fixed(quantize(h, hg), hg),
        "gg": gg,
        "hg": hg,
    }


def _check(
    cands: list[candidates.NodeCandidates],
    rows: np.ndarray,
    p: dict[str, Any],
    spec: PackingSpec,
    keys: Keys,
    max_bin: int,
    min_rows: int,
) -> None:
    """The shards agree on the candidates, and their partial sums multiply to the plaintext
    left sums of ``rows`` (through compression, decryption and unpacking)."""
    public_key, private_key = keys
    head = cands[0]
    for other in cands[1:]:
        for mine, theirs in ((head.feature, other.feature), (head.bin, other.bin)):
            np.testing.assert_array_equal(mine, theirs)
    # Shuffle as the host does, then multiply, compress, open.
    width = public_key.ciphertext_bytes
    order = np.random.default_rng(len(head)).permutation(len(head))
    parts = [
        np.frombuffer(c.sums, np.uint8).reshape(len(head), width)[order].tobytes() for c in cands
    ]
    data = compress_parts(public_key, spec, parts) if len(head) else b""
    g_sum, h_sum = open_split_infos(private_key, spec, data, head.counts[order])
    codes = p["codes"][rows]
    for j, i in enumerate(order.tolist()):
        f, b, dl = int(head.feature[i]), int(head.bin[i]), bool(head.default_left[i])
        col = codes[:, f]
        left = (col <= b) | ((col == max_bin) & dl)
        assert head.counts[i] == left.sum()
        assert g_sum[j, 0] == p["gi"][rows][left].sum()
        assert h_sum[j, 0] == p["hi"][rows][left].sum()
        assert min_rows <= left.sum() <= rows.size - min_rows
    seen = list(
        zip(head.feature.tolist(), head.bin.tolist(), head.default_left.tolist(), strict=True)
    )
    assert seen == sorted(seen, key=lambda c: (c[0], c[1], not c[2]))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(3, 80),
    n_feat=st.integers(1, 3),
    max_bin=st.integers(2, 6),
    shards=st.integers(1, 3),
    chunk=st.integers(1, 40),
    min_rows=st.integers(1, 3),
    block=st.integers(1, 9),
)
def test_shards_give_the_plaintext_left_sums(
    keys: Keys,
    table: AnyTable,
    seed: int,
    n: int,
    n_feat: int,
    max_bin: int,
    shards: int,
    chunk: int,
    min_rows: int,
    block: int,
) -> None:
    """Root over a streamed sample, then a split (smaller child built, sibling subtracted):
    every candidate's sums equal the plaintext fixed-point left sums, whatever the shards,
    the chunks and the layout's blocks."""
    public_key = keys[0]
    p = _problem(seed, n, n_feat, max_bin)
    rng = p["rng"]
    sample = np.flatnonzero(rng.random(n) < 0.9)
    if sample.size < 2:
        sample = np.arange(n)
    spec = PackingSpec.for_grids(int(sample.size), p["gg"], p["hg"], key_bits=public_key.bits)
    plain = pack(spec, p["gi"][sample], p["hi"][sample])[0]
    data = CiphertextBatch.from_ciphertexts(public_key, table.encrypt_many(plain)).data
    allowed = candidate_mask(np.full(n_feat, max_bin), max_bin)
    run = _Run(public_key, p["codes"], max_bin + 1, min_rows, shards)
    try:
        run.each(k.shard_tree, sample, allowed, 1, None, block)
        run.stream(data, chunk, block)
        _check(run.root(sample), sample, p, spec, keys, max_bin, min_rows)
        left = sample[p["codes"][sample, 0] <= rng.integers(0, max_bin)]
        right = np.setdiff1d(sample, left)
        small, big = (1, 2) if left.size <= right.size else (2, 1)
        small_rows, big_rows = (left, right) if small == 1 else (right, left)
        results = run.each(k.shard_split, 0, small, big, small_rows)
        _check([r[0] for r in results], small_rows, p, spec, keys, max_bin, min_rows)
        _check([r[1] for r in results], big_rows, p, spec, keys, max_bin, min_rows)
        run.each(k.shard_retain, [big])
        run.each(k.shard_end_tree)
    finally:
        run.close()


def _encrypted(
    p: dict[str, Any], n: int, public_key: AnyPublicKey, table: AnyTable
) -> tuple[PackingSpec, bytes]:
    """The packing of ``n`` rows of problem ``p`` and their ciphertexts as the guest streams
    them (every row, in order)."""
    spec = PackingSpec.for_grids(n, p["gg"], p["hg"], key_bits=public_key.bits)
    cts = table.encrypt_many(pack(spec, p["gi"], p["hi"])[0])
    return spec, CiphertextBatch.from_ciphertexts(public_key, cts).data


def test_shards_accumulate_only_the_features_a_tree_samples(keys: Keys, table: AnyTable) -> None:
    """Column sampling saves the host's additions: a feature without candidates in this tree
    (not sampled) keeps empty cells in every shard's histograms, root and children alike, and
    the sampled features' candidates are unchanged."""
    public_key = keys[0]
    n, n_feat, max_bin = 90, 3, 5
    p = _problem(7, n, n_feat, max_bin)
    sample = np.arange(n)
    spec, data = _encrypted(p, n, public_key, table)
    allowed = candidate_mask(np.full(n_feat, max_bin), max_bin)
    allowed[1] = False  # feature 1 is not sampled for this tree
    run = _Run(public_key, p["codes"], max_bin + 1, 1, 2)
    try:
        run.each(k.shard_tree, sample, allowed)
        run.stream(data, 25)
        roots = run.root(sample)
        assert all(1 not in r.feature for r in roots)
        small = sample[p["codes"][:, 0] == 0]
        run.each(k.shard_split, 0, 1, 2, small)
        for token in run.tokens:
            for hist, _ in k._SHARDS[token].hists.values():
                assert hist is not None
                assert all(
                    c == 1
                    for plane in hist.planes
                    for c in plane.values[max_bin + 1 : 2 * (max_bin + 1)]
                )
                assert hist.counts[1].sum() == 0
                assert any(c != 1 for plane in hist.planes for c in plane.values[: max_bin + 1])
        _check(roots, sample, p, spec, keys, max_bin, 1)
    finally:
        run.close()


def test_sparse_features_derive_their_common_bin_with_the_same_sums(
    keys: Keys, table: AnyTable
) -> None:
    """Features that are mostly one bin (sparse data) get that bin from the node total minus
    the other bins: every candidate's sums are still the plaintext left sums, root and split."""
    public_key = keys[0]
    n, n_feat, max_bin = 120, 3, 5
    p = _problem(11, n, n_feat, max_bin)
    rng = p["rng"]
    codes = p["codes"]
    codes[rng.random((n, n_feat)) < 0.8] = 0  # 80 % in bin 0, like zeros of sparse data
    zero = candidates.sparse_zero_bins(codes, max_bin + 1)
    np.testing.assert_array_equal(zero, [0, 0, 0])
    assert (
        candidates.sparse_zero_bins(p["codes"][:, :1], max_bin + 1) == -1
    ).all()  # one: not worth it
    sample = np.arange(n)
    spec, data = _encrypted(p, n, public_key, table)
    allowed = candidate_mask(np.full(n_feat, max_bin), max_bin)
    run = _Run(public_key, codes, max_bin + 1, 1, 2)
    try:
        run.each(k.shard_tree, sample, allowed)
        run.stream(data, 40)
        _check(run.root(sample), sample, p, spec, keys, max_bin, 1)
        left = sample[codes[:, 1] == 0]
        right = np.setdiff1d(sample, left)
        small, small_rows, big_rows = (
            (1, left, right) if left.size <= right.size else (2, right, left)
        )
        results = run.each(k.shard_split, 0, small, 3 - small, small_rows)
        _check([r[0] for r in results], small_rows, p, spec, keys, max_bin, 1)
        _check([r[1] for r in results], big_rows, p, spec, keys, max_bin, 1)
    finally:
        run.close()


def test_candidates_skip_what_cannot_win(keys: Keys, table: AnyTable) -> None:
    """No "missing right" without missing values; no empty bin above 0; min_rows both sides."""
    public_key = keys[0]
    n, max_bin = 120, 6
    p = _problem(5, n, 3, max_bin)
    codes = p["codes"]
    codes[:, 1] = np.where(codes[:, 1] == max_bin, 0, codes[:, 1])  # feature 1: none missing
    codes[:, 2] = np.where(codes[:, 2] == 3, 2, codes[:, 2])  # bin 3 of feature 2 is empty
    spec, data = _encrypted(p, n, public_key, table)
    run = _Run(public_key, codes, max_bin + 1, 2, 2)
    try:
        run.each(k.shard_tree, np.arange(n), candidate_mask(np.full(3, max_bin), max_bin))
        run.stream(data, 50)
        cands = run.root(np.arange(n))
        _check(cands, np.arange(n), p, spec, keys, max_bin, 2)
        head = cands[0]
        seen = set(
            zip(head.feature.tolist(), head.bin.tolist(), head.default_left.tolist(), strict=True)
        )
        assert not any(f == 1 and not dl for f, _, dl in seen)
        assert (2, 3, True) not in seen
        assert (0, 0, True) in seen
    finally:
        run.close()


def test_shards_refuse_bad_input(keys: Keys, table: AnyTable) -> None:
    public_key = keys[0]
    codes = np.zeros((4, 1), np.uint8)
    run = _Run(public_key, codes, 3, 1, 2)
    width = public_key.ciphertext_bytes
    try:
        run.each(k.shard_tree, np.arange(4), candidate_mask(np.array([2]), 2))
        with pytest.raises(InputError, match="out of order"):
            k.shard_chunk(run.tokens[0], 1, bytes(width))
        too_big = int(public_key.modulus).to_bytes(width, "big")
        with pytest.raises(CodecError):
            k.shard_chunk(run.tokens[0], 0, too_big)
        with pytest.raises(InputError, match="no histogram"):
            k.shard_split(run.tokens[0], 5, 1, 2, np.arange(2))
        k.shard_tree(run.tokens[1], np.arange(2), candidate_mask(np.array([2]), 2))
        with pytest.raises(InputError, match="outside the tree's sample"):
            k.shard_split(run.tokens[1], 0, 1, 2, np.array([3]))
        with pytest.raises(ValueError, match="mask"):
            candidates.node_candidates(np.zeros((1, 3), np.int64), np.ones((1, 5, 2), np.bool_), 1)
    finally:
        run.close()
    with pytest.raises(WorkerStateLost, match="no shard"):  # a cluster rebuilds it
        k.shard_root(run.tokens[0], np.zeros((1, 3), np.int64))


def test_chunk_parts_cover_every_slot_once() -> None:
    width = 3
    for shards, start, n, block in itertools.product((1, 2, 3), (0, 1, 5), (1, 2, 7), (1, 2, 3)):
        data = bytes(itertools.chain.from_iterable([s] * width for s in range(start, start + n)))
        got: dict[int, int] = {}
        for shard, first, part in layout.chunk_parts(start, data, width, shards, block):
            slots = list(part[::width])
            # The shard's slots of the chunk, in order: blocks of `block` dealt in turn.
            assert slots == [
                s for s in range(start, start + n) if shards == 1 or (s // block) % shards == shard
            ]
            assert slots[0] == first
            got.update(dict.fromkeys(slots, shard))
        assert sorted(got) == list(range(start, start + n))
        parts = layout.chunk_parts(start, data, width, shards, block)
        assert len(parts) == layout.shards_reached(start, start + n, block, shards)


def test_a_chunk_reaches_only_the_shards_of_the_blocks_it_spans() -> None:
    """128 shards, a million rows: a 16,384-row chunk is 20 parts, not 128; every shard still
    holds blocks from all over the sample."""
    block = layout.shard_block(1_000_000, 128)
    assert block == 869  # 9 rounds of 128 blocks, the last block short
    parts = layout.chunk_parts(30_720, bytes(16_384), 1, 128, block)
    assert len(parts) == 20  # 18 whole blocks and a part of one at each end
    assert layout.shard_block(240, 2) == 15
    assert layout.shard_block(10, 4) == 1
    assert layout.shard_block(10**8, 2) == layout.MAX_BLOCK


@pytest.mark.parametrize(
    ("rows", "shards"),
    [(100_000, 8), (100_000, 7), (100_000, 64), (150_000, 16), (1_000_000, 128), (6_667, 8)],
)
def test_every_shard_gets_a_whole_number_of_blocks(rows: int, shards: int) -> None:
    """The busiest shard holds at most a few rows more than the mean (the old layout: up to
    an eighth more), within the layout's limits on a block."""
    block = layout.shard_block(rows, shards)
    assert 1 <= block <= min(layout.MAX_BLOCK, rows // (8 * shards))
    held = np.bincount((np.arange(rows) // block) % shards, minlength=shards)
    assert held.max() - held.min() <= block
    assert held.max() <= rows / shards * 1.005


def test_a_trees_fewest_rows_per_child_leaves_out_more_candidates(
    keys: Keys, table: AnyTable
) -> None:
    """A tree may ask for more rows per child than the run (the hessian bound of
    ``min_child_weight``): every candidate left has that many on both sides, and fewer are
    sent than with the run's own minimum."""
    public_key = keys[0]
    n, max_bin = 120, 6
    p = _problem(11, n, 3, max_bin)
    spec, data = _encrypted(p, n, public_key, table)
    run = _Run(public_key, p["codes"], max_bin + 1, 1, 2)
    mask = candidate_mask(np.full(3, max_bin), max_bin)
    try:
        sent = {}
        for min_rows in (None, 30):
            run.each(k.shard_tree, np.arange(n), mask, 1, min_rows)
            run.stream(data, 50)
            cands = run.root(np.arange(n))
            _check(cands, np.arange(n), p, spec, keys, max_bin, min_rows or 1)
            sent[min_rows] = cands[0].feature.size
            run.each(k.shard_end_tree)
        assert 0 < sent[30] < sent[None]
    finally:
        run.close()


def test_shards_offer_the_root_candidates_the_host_counted(keys: Keys, table: AnyTable) -> None:
    """shard_root offers candidates by the counts the host hands it (counted once for every
    shard), not by its own rows: a feature the counts say is empty offers none, the others are
    unchanged; counts of the wrong shape are refused."""
    public_key = keys[0]
    n, n_feat, max_bin = 60, 2, 4
    p = _problem(3, n, n_feat, max_bin)
    sample = np.arange(n)
    _, data = _encrypted(p, n, public_key, table)
    allowed = candidate_mask(np.full(n_feat, max_bin), max_bin)
    true_counts = candidates.node_counts(p["codes"], max_bin + 1)
    empty_first = true_counts.copy()
    empty_first[0] = 0
    offered = []
    for counts in (true_counts, empty_first):
        run = _Run(public_key, p["codes"], max_bin + 1, 1, 2)
        try:
            run.each(k.shard_tree, sample, allowed)
            run.stream(data, 16)
            offered.append(run.each(k.shard_root, counts))
        finally:
            run.close()
    for full, without in zip(*offered, strict=True):
        assert 0 in full.feature
        assert 0 not in without.feature
        assert np.array_equal(full.bin[full.feature == 1], without.bin)
    run = _Run(public_key, p["codes"], max_bin + 1, 1, 1)
    try:
        run.each(k.shard_tree, sample, allowed)
        run.stream(data, 16)
        with pytest.raises(InputError, match="root counts of the wrong shape"):
            run.each(k.shard_root, np.zeros((n_feat, max_bin), np.int64))
        assert run.root(sample)  # the refusal took nothing: the right counts still work
    finally:
        run.close()
