"""A chunk's encryption in pieces across the workers: sizes, randomisers, identical results.

The sizes are checked on an executor that records its tasks and encrypts nothing (a 16,384-row
chunk at eight workers costs nothing to cut); what the pieces compute is checked on real pools
(a process pool and a pinned pool) against the chunk encrypted in one task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2pboost.crypto import engine as engine_module
from p2pboost.crypto._workers import encrypt_packed_task
from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.packing import PackingSpec, pack
from p2pboost.crypto.paillier import PrivateKey, PublicKey
from p2pboost.crypto.pieces import MIN_CIPHERTEXTS, cut, floor_for, task_bound
from p2pboost.gbdt.fixedpoint import choose_grid
from p2pboost.workers import ClusterPool, pinned_pool

#: The tree of the synth150k benchmark: 100,000 training rows.
TREE_ROWS = 100_000


class Recorder(Executor):
    """An executor that runs no task: it records each one's rows and randomisers and answers an
    encryption with as many zero-filled ciphertexts as it was given plaintexts."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.rows: list[int] = []
        self.factors: list[bytes] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        assert fn is encrypt_packed_task
        _, _, spec, g, _, factors = args
        self.rows.append(len(g))
        self.factors.append(factors)
        future: Future[Any] = Future()
        future.set_result(bytes(len(g) * spec.plaintexts_per_row * self.width))
        return future


def _spec(rows: int, bits: int, outputs: int = 1) -> PackingSpec:
    grid = choose_grid(np.array([2.0**20]), rows)
    return PackingSpec.for_grids(rows, grid, grid, key_bits=bits, n_outputs=outputs)


def _gradients(rows: int, outputs: int = 1, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    shape = (rows,) if outputs == 1 else (rows, outputs)
    return rng.integers(-(2**19), 2**19, shape), rng.integers(0, 2**19, shape)


@pytest.fixture
def recorded(public_key: PublicKey) -> Iterator[tuple[CryptoEngine, Recorder]]:
    recorder = Recorder(public_key.ciphertext_bytes)
    with CryptoEngine(public_key, executor=recorder, workers=8) as eng:
        yield eng, recorder


# -- cutting ---------------------------------------------------------------------------------


@given(
    n=st.integers(0, 200_000),
    workers=st.integers(1, 128),
    minimum=st.integers(1, 5000),
    largest=st.none() | st.integers(1, 50_000),
)
def test_cut_is_contiguous_balanced_and_bounded(
    n: int, workers: int, minimum: int, largest: int | None
) -> None:
    cuts = cut(n, workers, minimum=minimum, largest=largest)
    assert cuts[0] == 0
    assert cuts[-1] == n
    sizes = np.diff(cuts)
    if n == 0:
        assert cuts == [0]
        return
    assert sizes.min() >= 1
    assert sizes.max() - sizes.min() <= 1
    count = sizes.size
    assert count <= max(workers, -(-n // max(minimum, largest or 0)))
    if count > 1:
        assert sizes.min() >= min(minimum, largest or minimum) // 2  # never shredded
    if largest is not None:
        assert sizes.max() <= max(largest, minimum)  # the bound, unless the floor says no
    if n >= workers * minimum and largest is None:
        assert count == workers  # one piece per worker when each is worth a task


def test_task_bound_is_a_quarter_of_a_workers_share() -> None:
    assert task_bound(TREE_ROWS, 8) == 3125
    assert task_bound(TREE_ROWS, 7) == 3572
    assert task_bound(3, 8) == 1
    assert task_bound(0, 4) == 1


def test_a_cluster_asks_for_larger_tasks() -> None:
    cluster = ClusterPool.__new__(ClusterPool)  # only its type is looked at
    assert floor_for(None, MIN_CIPHERTEXTS) == MIN_CIPHERTEXTS
    assert floor_for(cluster, MIN_CIPHERTEXTS) > MIN_CIPHERTEXTS


# -- the sizes of a chunk's tasks --------------------------------------------------------------


async def test_a_large_chunk_is_spread_over_every_worker_within_the_bound(
    recorded: tuple[CryptoEngine, Recorder], public_key: PublicKey
) -> None:
    """16,384 rows of a 100,000-row tree at W = 8: eight pieces of 2,048 rows, none above
    1/(4W) of the tree (3,125 rows); bytes back in the chunk's size."""
    eng, recorder = recorded
    g, h = _gradients(16_384)
    spec = _spec(TREE_ROWS, public_key.bits)
    data = await eng.encrypt_packed(spec, g, h, stream_rows=TREE_ROWS)
    assert recorder.rows == [2048] * 8
    assert max(recorder.rows) <= task_bound(TREE_ROWS, 8)
    assert len(data) == 16_384 * public_key.ciphertext_bytes


async def test_a_chunk_larger_than_a_quarter_of_the_tree_is_cut_finer(
    recorded: tuple[CryptoEngine, Recorder], public_key: PublicKey
) -> None:
    """Whatever chunks the wire uses: the whole tree in one chunk still gives no task above
    1/(4W) of it."""
    eng, recorder = recorded
    g, h = _gradients(TREE_ROWS)
    data = await eng.encrypt_packed(_spec(TREE_ROWS, public_key.bits), g, h, stream_rows=TREE_ROWS)
    assert sum(recorder.rows) == TREE_ROWS
    assert len(recorder.rows) == 32
    assert max(recorder.rows) <= task_bound(TREE_ROWS, 8)
    assert len(data) == TREE_ROWS * public_key.ciphertext_bytes


async def test_a_small_chunk_is_not_shredded(
    recorded: tuple[CryptoEngine, Recorder], public_key: PublicKey
) -> None:
    eng, recorder = recorded
    spec = _spec(TREE_ROWS, public_key.bits)
    await eng.encrypt_packed(spec, *_gradients(300), stream_rows=TREE_ROWS)
    assert recorder.rows == [300]  # below two pieces' worth of ciphertexts
    recorder.rows.clear()
    await eng.encrypt_packed(spec, *_gradients(2048), stream_rows=TREE_ROWS)
    assert recorder.rows == [256] * 8
    assert min(recorder.rows) >= MIN_CIPHERTEXTS


async def test_multi_output_rows_count_their_ciphertexts(
    recorded: tuple[CryptoEngine, Recorder], public_key: PublicKey
) -> None:
    """Rows of two ciphertexts: the floor is half as many rows, and every row stays whole."""
    eng, recorder = recorded
    spec = _spec(TREE_ROWS, public_key.bits, outputs=11)
    assert spec.plaintexts_per_row == 2
    data = await eng.encrypt_packed(spec, *_gradients(1024, 11), stream_rows=TREE_ROWS)
    assert recorder.rows == [128] * 8
    assert len(data) == 2 * 1024 * public_key.ciphertext_bytes


async def test_an_empty_chunk_is_one_task(
    recorded: tuple[CryptoEngine, Recorder], public_key: PublicKey
) -> None:
    eng, recorder = recorded
    g = np.zeros(0, dtype=np.int64)
    assert await eng.encrypt_packed(_spec(10, public_key.bits), g, g) == b""
    assert recorder.rows == [0]


# -- the stash, dealt over the pieces -----------------------------------------------------------


def _stash(eng: CryptoEngine, count: int, first: int = 1) -> set[bytes]:
    """Put ``count`` distinct marked factors in the stash; returns them."""
    width = eng.public_key.ciphertext_bytes
    factors = [(first + i).to_bytes(width, "big") for i in range(count)]
    assert eng._put(b"".join(factors)) == count
    return set(factors)


def _factors(recorder: Recorder, width: int) -> list[bytes]:
    return [blob[i : i + width] for blob in recorder.factors for i in range(0, len(blob), width)]


async def test_a_short_stash_is_dealt_in_proportion_and_each_factor_used_once(
    recorded: tuple[CryptoEngine, Recorder], public_key: PublicKey
) -> None:
    eng, recorder = recorded
    width = public_key.ciphertext_bytes
    stashed = _stash(eng, 1000)
    spec = _spec(TREE_ROWS, public_key.bits)
    await eng.encrypt_packed(spec, *_gradients(16_384), stream_rows=TREE_ROWS)
    shares = [len(f) // width for f in recorder.factors]
    assert sum(shares) == 1000
    assert max(shares) - min(shares) <= 1
    used = _factors(recorder, width)
    assert len(used) == len(set(used)) == 1000
    assert set(used) == stashed
    assert eng.stashed == 0
    # The next chunk finds the stash empty: no factor is handed out twice.
    await eng.encrypt_packed(spec, *_gradients(4096), stream_rows=TREE_ROWS)
    assert all(f == b"" for f in recorder.factors[8:])


async def test_a_full_stash_gives_each_piece_its_own_factors(
    recorded: tuple[CryptoEngine, Recorder], public_key: PublicKey
) -> None:
    eng, recorder = recorded
    width = public_key.ciphertext_bytes
    stashed = _stash(eng, 20_000)
    spec = _spec(TREE_ROWS, public_key.bits)
    for _ in range(2):
        await eng.encrypt_packed(spec, *_gradients(8192), stream_rows=TREE_ROWS)
    assert [len(f) // width for f in recorder.factors] == recorder.rows == [1024] * 16
    used = _factors(recorder, width)
    assert len(set(used)) == len(used) == 16_384
    assert set(used) <= stashed
    assert eng.stashed == 20_000 - 16_384


# -- what the pieces compute ------------------------------------------------------------------


def _plaintexts(private_key: PrivateKey, data: bytes) -> list[int]:
    pk = private_key.public_key
    return [private_key.decrypt(c) for c in CiphertextBatch.of(pk, data).ciphertexts(pk)]


async def _pieces_against_one_task(
    eng: CryptoEngine,
    private_key: PrivateKey,
    monkeypatch: pytest.MonkeyPatch,
    outputs: int,
    stashed: int,
) -> None:
    rows = 400
    spec = _spec(rows, private_key.public_key.bits, outputs)
    g, h = _gradients(rows, outputs, seed=outputs)
    planes = pack(spec, g, h)
    expected = [v for row in zip(*planes, strict=True) for v in row]  # a row's planes in order
    monkeypatch.setattr(engine_module, "MIN_CIPHERTEXTS", 10**9)
    assert len(eng.piece_cuts(rows, spec.plaintexts_per_row, rows)) == 2
    whole = await eng.encrypt_packed(spec, g, h, stream_rows=rows)
    monkeypatch.setattr(engine_module, "MIN_CIPHERTEXTS", 16)
    assert len(eng.piece_cuts(rows, spec.plaintexts_per_row, rows)) > 4
    if stashed:
        assert await eng.precompute(stashed) == stashed
    before = eng.stashed
    pieces = await eng.encrypt_packed(spec, g, h, stream_rows=rows)
    assert eng.stashed == max(0, before - len(expected))
    assert len(pieces) == len(whole) == len(expected) * private_key.public_key.ciphertext_bytes
    assert _plaintexts(private_key, pieces) == _plaintexts(private_key, whole) == expected
    width = private_key.public_key.ciphertext_bytes
    cts = {pieces[i : i + width] for i in range(0, len(pieces), width)}
    assert len(cts) == len(expected)  # every ciphertext its own randomiser


@pytest.mark.parametrize(("outputs", "stashed"), [(1, 0), (1, 150), (11, 300)])
async def test_pieces_decrypt_as_one_task_does(
    engine: CryptoEngine,
    private_key: PrivateKey,
    monkeypatch: pytest.MonkeyPatch,
    outputs: int,
    stashed: int,
) -> None:
    await _pieces_against_one_task(engine, private_key, monkeypatch, outputs, stashed)


async def test_pieces_run_on_a_pinned_pool(
    public_key: PublicKey, private_key: PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor a cluster or a host hands the engine: pieces go to its least busy place."""
    pool = pinned_pool(2)
    try:
        eng = CryptoEngine(public_key, private_key, executor=pool, workers=2)
        await _pieces_against_one_task(eng, private_key, monkeypatch, 1, 100)
    finally:
        await asyncio.to_thread(pool.shutdown)
