"""A client message's requests, from JSON to the predictor and back to JSON replies.

A message is one request (a JSON object) or a list of them; its replies go back together,
in its order, one per request: the score, or the error that request met. Everything a client
sends is checked here before the predictor sees it, and a bad request fails alone. A list
message's rows are checked and converted to one float64 matrix at once and handed to
:meth:`~p2pboost.hetero.inference.predictor.GuestPredictor.submit_many` as one group, so a
message of a few hundred requests costs one future and one wake-up of the connection's
writer rather than one per request; only a message holding a bad value is checked row by
row, so that each request still gets the error it would get alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, P2PBoostError
from p2pboost.hetero.inference.predictor import GuestPredictor
from p2pboost.hetero.inference.session import MAX_ID_CHARS

__all__ = ["IdKind", "Message", "RequestId", "decode", "discard", "reply_to", "submit"]

logger = logging.getLogger("p2pboost.hetero.endpoint")

_INT64_MAX = 2**63 - 1

RequestId: TypeAlias = int | str
Score: TypeAlias = float | npt.NDArray[np.float64]


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


#: One decoder for every message (``json.loads`` with an argument builds one per call).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def decode(message: str | bytes, max_items: int) -> tuple[list[Any], bool]:
    """A message's requests and whether it was a list (then the reply is a list too)."""
    if not isinstance(message, str):
        raise InputError("send requests as JSON text messages, not binary ones")
    try:
        obj = _DECODER.decode(message)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"invalid JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, list):
        return [obj], False
    if len(obj) > max_items:
        raise InputError(f"{len(obj)} requests in one message (at most {max_items})")
    return obj, True


def _request_id(request: Mapping[str, Any]) -> RequestId:
    if "id" not in request:
        raise InputError('a request needs an "id"')
    rid = request["id"]
    if isinstance(rid, bool) or not isinstance(rid, int | str):
        raise InputError(f'"id" must be an integer or a string, not {type(rid).__name__}')
    if isinstance(rid, int) and not -_INT64_MAX - 1 <= rid <= _INT64_MAX:
        raise InputError('an integer "id" must fit in 64 bits')
    if isinstance(rid, str) and not 0 < len(rid) <= MAX_ID_CHARS:
        raise InputError(f'a string "id" must have 1 to {MAX_ID_CHARS} characters')
    return rid


def _features(value: object, n_features: int) -> npt.NDArray[np.float64]:
    """One row of guest features: numbers, ``null`` for missing, exactly ``n_features``."""
    if not isinstance(value, list):
        raise InputError(f'"features" must be a list of {n_features} numbers')
    if len(value) != n_features:
        raise InputError(f"expected {n_features} guest features, got {len(value)}")
    if not all(v is None or (type(v) is int or type(v) is float) for v in value):
        raise InputError('"features" must hold numbers or null (missing)')
    try:
        row = np.array([np.nan if v is None else v for v in value], dtype=np.float64)
    except OverflowError:
        raise InputError('a number in "features" is out of range') from None
    if np.isinf(row).any():  # json reads 1e999 as inf
        raise InputError('"features" must be finite numbers or null (missing)')
    return row


class IdKind:
    """The one kind of id (int or str) this endpoint serves.

    Hosts keep ids of one kind, and a host's store refuses a query of the other kind, which
    ends that host's serving session: the query fails and the next batch pays for a new
    session. So that one client's wrong ids cannot make the others pay, the kind is fixed as
    soon as it is known (the guest's store, or the first request that got a score) and
    requests of the other kind are refused before they reach the predictor.
    """

    def __init__(self, predictor: GuestPredictor) -> None:
        self.kind: type | None = None
        store = predictor.guest_store
        if store is not None:
            with contextlib.suppress(P2PBoostError):
                ids = store.ids()
                self.kind = {"i": int, "U": str}.get(ids.dtype.kind) if ids.size else None

    def check(self, rid: RequestId) -> None:
        if self.kind is not None and not isinstance(rid, self.kind):
            kind = "integers" if self.kind is int else "strings"
            raise InputError(f"ids on this endpoint are {kind}")

    def learn(self, rid: RequestId) -> None:
        if self.kind is None:
            self.kind = type(rid)


@dataclass(slots=True)
class Message:
    """One message's requests, replied to together (as a list when ``many``).

    ``ids`` holds each request's id (``None`` where it had none readable), ``errors`` the
    requests refused before the predictor, by position, and ``parts`` the groups handed to
    the predictor: their positions and the one future of each (``submit_many``).
    """

    ids: list[RequestId | None]
    many: bool
    received: float = 0.0
    errors: dict[int, BaseException] = field(default_factory=dict)
    parts: list[tuple[list[int], asyncio.Future[list[Any]]]] = field(default_factory=list)


_KEYS = frozenset(("id", "features"))
#: The JSON types a feature may have (``bool`` is refused: it is not a number here).
_NUMBER_TYPES = frozenset((int, float, type(None)))


def _check_request(request: object) -> tuple[RequestId, object]:
    """A request's id and its ``"features"`` value (unchecked); raises for the rest."""
    if not isinstance(request, dict):
        raise InputError('a request must be a JSON object {"id": ..., "features": [...]}')
    if len(request) > 2 or not request.keys() <= _KEYS:
        extra = set(request) - _KEYS
        raise InputError(f"unknown request key(s): {', '.join(sorted(map(str, extra)))}")
    return _request_id(request), request.get("features")


def _rows(
    rows: list[list[Any]], positions: list[int], n_features: int, errors: dict[int, BaseException]
) -> tuple[list[int], npt.NDArray[np.float64]]:
    """The feature rows of a message as one matrix, checked as :func:`_features` checks one:
    one conversion for the whole message, then per row only for messages with a bad value
    (those rows' errors go to ``errors``). The positions kept, and their rows."""
    matrix: npt.NDArray[np.float64] | None = None
    if set(map(type, itertools.chain.from_iterable(rows))) <= _NUMBER_TYPES:
        with contextlib.suppress(OverflowError):  # a huge integer: find it row by row
            matrix = np.array(rows, dtype=np.float64).reshape(len(rows), n_features)
    if matrix is None:
        kept, good = [], []
        for position, row in zip(positions, rows, strict=True):
            try:
                good.append(_features(row, n_features))
                kept.append(position)
            except InputError as exc:
                errors[position] = exc
        return kept, np.array(good, dtype=np.float64).reshape(len(kept), n_features)
    if not np.isinf(matrix).any():  # json reads 1e999 as inf
        return positions, matrix
    infinite = np.asarray(np.isinf(matrix).any(axis=1))
    for i in np.flatnonzero(infinite).tolist():
        errors[positions[i]] = InputError('"features" must be finite numbers or null (missing)')
    finite = ~infinite
    return [p for p, ok in zip(positions, finite.tolist(), strict=True) if ok], matrix[finite]


def submit(
    requests: list[Any], many: bool, received: float, predictor: GuestPredictor, ids: IdKind
) -> Message:
    """Validate a message's requests and hand the valid ones to the micro-batcher as (at
    most) two groups, those with features and those to look up; never raises for bad input.
    """
    n_features = predictor.model.n_features
    message = Message([None] * len(requests), many, received)
    errors = message.errors
    with_x: list[int] = []
    rows: list[list[Any]] = []
    lookup: list[int] = []
    for i, request in enumerate(requests):
        try:
            rid, features = _check_request(request)
            message.ids[i] = rid
            ids.check(rid)
            if features is None:
                lookup.append(i)
            elif type(features) is not list or len(features) != n_features:
                _features(features, n_features)  # raises, saying why
            else:
                with_x.append(i)
                rows.append(features)
        except P2PBoostError as exc:
            errors[i] = exc
    if rows:
        with_x, matrix = _rows(rows, with_x, n_features, errors)
        _hand_over(message, with_x, matrix, predictor)
    if lookup:
        _hand_over(message, lookup, None, predictor)
    return message


def _hand_over(
    message: Message,
    positions: list[int],
    X: npt.NDArray[np.float64] | None,
    predictor: GuestPredictor,
) -> None:
    if not positions:
        return
    try:
        future = predictor.submit_many([message.ids[p] for p in positions], X)
    except P2PBoostError as exc:  # closed, not started: every request says so
        message.errors.update(dict.fromkeys(positions, exc))
        return
    message.parts.append((positions, future))


# -- replies ----------------------------------------------------------------------------------


def _error(exc: BaseException) -> dict[str, str]:
    if isinstance(exc, P2PBoostError):
        return {"type": type(exc).__name__, "message": str(exc)}
    logger.error("unexpected error while scoring", exc_info=exc)
    return {"type": "InternalError", "message": "internal error (the server's log says more)"}


def _score_json(score: Score) -> float | list[float]:
    """A score as JSON: a number, or a list of numbers (one row of a multi-output model)."""
    if type(score) is np.ndarray and score.ndim:
        values: list[float] = score.ravel().tolist()
        return values
    return float(score)


async def reply_to(message: Message, ids: IdKind) -> list[dict[str, Any]]:
    """Every request's reply, in order: its score, or its error."""
    outcomes: list[Any] = [None] * len(message.ids)
    for position, exc in message.errors.items():
        outcomes[position] = exc
    for positions, future in message.parts:
        try:
            results = await future
        except Exception as exc:  # submit_many resolves to values; anything else is a bug
            results = [exc] * len(positions)
        for position, result in zip(positions, results, strict=True):
            outcomes[position] = result
    replies: list[dict[str, Any]] = []
    for rid, outcome in zip(message.ids, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            replies.append({"id": rid, "error": _error(outcome)})
        else:
            score = outcome if type(outcome) is float else _score_json(outcome)
            replies.append({"id": rid, "score": score})
            if ids.kind is None:
                assert rid is not None
                ids.learn(rid)
    return replies


def discard(message: Message) -> None:
    """Cancel what is still queued (the predictor skips it)."""
    for _, future in message.parts:
        if not future.done():
            future.cancel()
