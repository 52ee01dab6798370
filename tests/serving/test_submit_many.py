"""``GuestPredictor.submit_many``: a group of requests with one future, which must answer
exactly what the same requests submitted one by one answer, in order, errors per request."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from p2pboost.exceptions import InputError, P2PBoostError, SessionClosed, UnknownIdError
from p2pboost.hetero.inference.feature_store import ArrayStore
from p2pboost.testing import Fabric, local_federation
from tests.serving.conftest import HOST_COLS, Trained
from tests.serving.test_serving import CONFIG, serving


def _outcome(result: Any) -> Any:
    """A comparable form of a score or an error."""
    if isinstance(result, P2PBoostError):
        return (type(result).__name__, str(result))
    return result


async def test_submit_many_equals_one_by_one_with_errors_in_place(
    memory_fabric: Fabric, trained: Trained
) -> None:
    lacking = ArrayStore(trained.ids[10:], trained.X[10:, HOST_COLS["c"]])  # c lacks ids[:10]
    rows = [12, 3, 12, 40, 7, 25, 25, 0, 33]
    ids: list[Any] = [int(trained.ids[r]) for r in rows]
    ids[4] = True  # not an id
    ids[5] = 3.5  # nor this
    X = trained.guest_X(np.array(rows))
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, stores={"c": lacking}, max_batch=4) as p,  # groups span batches
    ):
        grouped = await p.submit_many(ids, X)
        alone = await asyncio.gather(
            *(p.submit(i, x) for i, x in zip(ids, X, strict=True)), return_exceptions=True
        )
        empty = await p.submit_many([], np.zeros((0, 10)))
        wrong = await p.submit_many(ids[:2], np.zeros((2, 9)))
        no_store = await p.submit_many(ids[:2])
    assert [_outcome(r) for r in grouped] == [_outcome(r) for r in alone]
    assert [type(r) for r in grouped] == [
        float,
        UnknownIdError,
        float,
        float,
        InputError,
        InputError,
        float,
        UnknownIdError,
        float,
    ]
    assert grouped[0] == grouped[2]  # the same row twice in one group
    assert empty == []
    assert all(isinstance(r, InputError) and "X must be (2, 10)" in str(r) for r in wrong)
    assert all(isinstance(r, InputError) and "guest_store" in str(r) for r in no_store)


async def test_submit_many_looks_up_the_guest_store_and_fails_on_close(
    memory_fabric: Fabric, trained: Trained
) -> None:
    store = ArrayStore(trained.ids[5:], trained.guest_X(slice(5, None)))  # lacks ids[:5]
    ids = [int(trained.ids[r]) for r in (8, 2, 9)]
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, guest_store=store) as p,
    ):
        grouped = await p.submit_many(ids)
        alone = [await p.predict(ids[0]), await p.predict(ids[2])]
        cancelled = p.submit_many(ids)
        cancelled.cancel()  # its requests are skipped, nothing hangs
        after = await p.submit_many(ids[:1])
        await p.close()
        with pytest.raises(SessionClosed):  # a closed predictor refuses at once
            p.submit_many(ids)
    assert [grouped[0], grouped[2]] == alone
    assert isinstance(grouped[1], UnknownIdError)
    assert after == [alone[0]]


async def test_max_queue_counts_requests_not_calls(memory_fabric: Fabric, trained: Trained) -> None:
    ids = [int(trained.ids[r]) for r in range(5)]
    X = trained.guest_X(np.arange(5))
    async with (
        local_federation(memory_fabric, ["a", "b", "c"], CONFIG) as c,
        serving(c, trained, max_queue=3, max_batch=2) as p,
    ):
        grouped = p.submit_many(ids, X)  # nothing runs in between: the queue holds 3
        alone = p.submit(ids[0], X[0])
        results = await grouped
        with pytest.raises(InputError, match="too many queued requests"):
            await alone
        later = await p.submit_many(ids[:3], X[:3])  # batches of 2 drained the queue
    assert [type(r) for r in results] == [float, float, float, InputError, InputError]
    assert "too many queued requests" in str(results[3])
    assert later == results[:3]
