"""The guest's gradient stream: a small first chunk, then chunks that double up to a cap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2pboost.exceptions import InputError
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.training.common import chunk_bounds


@given(
    n=st.integers(0, 200_000),
    first=st.integers(64, 5000),
    factor=st.integers(1, 16),
)
def test_chunks_cover_the_rows_in_order_and_double_up_to_the_cap(
    n: int, first: int, factor: int
) -> None:
    largest = first * factor
    bounds = chunk_bounds(n, first, largest)
    assert [a for a, _ in bounds] == ([0] if n else []) + [b for _, b in bounds[:-1]]
    assert (bounds[-1][1] if bounds else 0) == n
    sizes = [b - a for a, b in bounds]
    assert all(0 < s <= largest for s in sizes)
    full = sizes[:-1]  # every chunk but the last is as large as the schedule allows
    assert full == [min(first * 2**i, largest) for i in range(len(full))]


def test_a_stream_of_100000_rows_is_a_handful_of_tasks() -> None:
    bounds = chunk_bounds(100_000, 2048, 16384)
    assert [b - a for a, b in bounds][:4] == [2048, 4096, 8192, 16384]
    assert len(bounds) == 9  # 49 at a fixed 2,048


def test_the_cap_cannot_be_below_the_first_chunk() -> None:
    with pytest.raises(InputError, match="max_chunk_rows"):
        HeteroConfig(chunk_rows=4096, max_chunk_rows=2048)
    assert HeteroConfig(chunk_rows=4096, max_chunk_rows=4096).max_chunk_rows == 4096
