"""The message kit: every rule accepts what it promises and refuses the rest, naming the peer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2pboost.codec import decode as codec_decode
from p2pboost.codec import encode
from p2pboost.exceptions import RemoteProtocolError
from p2pboost.protocols._messages import (
    Array,
    Bool,
    Bytes,
    Float,
    Int,
    ListOf,
    MapOf,
    Message,
    OneOf,
    Opaque,
    Optional,
    Rule,
    Str,
    decode,
)


class _Test(Message):
    FAMILY = "kit-test"


@dataclass(frozen=True)
class Sample(_Test, tag="sample"):
    """Test -> test: one field of every rule."""

    count: Annotated[int, Int(0, 100)]
    ratio: Annotated[float, Float(0.0, 1.0)]
    flag: Annotated[bool, Bool()]
    name: Annotated[str, Str(1, 8)]
    blob: Annotated[bytes, Bytes(0, 4)]
    rows: Annotated[np.ndarray, Array("int64", max_len=5)]
    maybe: Annotated[int | None, Optional(Int(0, 1))]
    items: Annotated[list[int], ListOf(Int(0, 9), 3)]
    table: Annotated[dict[str, int], MapOf(Str(1, 4), Int(0, 9), 2)]
    either: Annotated[Any, OneOf((Int(0, 9), Str(0, 2)))]
    anything: Annotated[Any, Opaque("whatever")]

    def check(self) -> str | None:
        return "rows and items differ in length" if len(self.rows) != len(self.items) else None


@dataclass(frozen=True)
class Empty(_Test, tag="empty"):
    """Test -> test: no fields."""


GOOD: dict[str, Any] = {
    "t": "sample",
    "count": 3,
    "ratio": 0.5,
    "flag": True,
    "name": "abc",
    "blob": b"xy",
    "rows": np.arange(2, dtype=np.int64),
    "maybe": None,
    "items": [1, 2],
    "table": {"a": 1},
    "either": "ok",
    "anything": {"free": [1, 2]},
}


def test_a_valid_message_decodes_to_its_value_and_round_trips_the_codec() -> None:
    msg = decode(codec_decode(encode(GOOD)), Sample, "peer")
    assert isinstance(msg, Sample)
    assert msg.count == 3
    assert msg.name == "abc"
    assert msg.rows.tolist() == [0, 1]
    again = decode(codec_decode(encode(msg.wire())), Sample, "peer")
    assert again.wire()["items"] == [1, 2]


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("count", True, "'count' must be an integer"),
        ("count", 101, r"'count' must be in \[0, 100\]"),
        ("ratio", float("nan"), "'ratio' must be finite"),
        ("ratio", 2.0, "'ratio' must be in"),
        ("flag", 1, "'flag' must be a boolean"),
        ("name", "", "'name' must be a string of 1 to 8"),
        ("blob", b"12345", "'blob' must be 0 to 4 bytes"),
        ("rows", np.arange(2, dtype=np.int32), "'rows' must be a 1-d int64 array"),
        ("rows", np.arange(6, dtype=np.int64), "'rows' must have at most 5 elements"),
        ("maybe", 2, r"'maybe' must be in \[0, 1\]"),
        ("items", [1, 2, 3, 4], "'items' must be a list of 0 to 3 items"),
        ("items", [1, "x"], "'items' item 1: must be an integer"),
        ("table", {"a": 1, "b": 2, "c": 3}, "'table' must be a map of at most 2"),
        ("table", {"a": 10}, "'table' entry 'a'"),
        ("either", 3.5, "'either' must be int"),
    ],
)
def test_each_rule_refuses_what_it_does_not_promise(field: str, value: object, error: str) -> None:
    with pytest.raises(RemoteProtocolError, match=f"peer: 'sample' message: {error}") as info:
        decode({**GOOD, field: value}, Sample, "peer")
    assert info.value.peer == "peer"


def test_unknown_tags_missing_and_extra_fields_and_cross_field_rules_are_refused() -> None:
    with pytest.raises(RemoteProtocolError, match="expected a 'sample' message, got 'other'"):
        decode({**GOOD, "t": "other"}, Sample, "p")
    with pytest.raises(RemoteProtocolError, match="got list"):
        decode([GOOD], Sample, "p")
    with pytest.raises(RemoteProtocolError, match=r"unexpected fields \['x'\], missing \[\]"):
        decode({**GOOD, "x": 1}, Sample, "p")
    with pytest.raises(RemoteProtocolError, match=r"missing \['blob'\]"):
        decode({k: v for k, v in GOOD.items() if k != "blob"}, Sample, "p")
    with pytest.raises(RemoteProtocolError, match="rows and items differ in length"):
        decode({**GOOD, "items": [1]}, Sample, "p")


def test_one_of_several_types_is_chosen_by_its_tag() -> None:
    got = decode({"t": "empty"}, (Sample, Empty), "p")
    assert isinstance(got, Empty)
    assert got.wire() == {"t": "empty"}


@given(st.integers(), st.integers(-5, 5), st.integers(-5, 5))
def test_int_accepts_exactly_its_range(value: int, low: int, span: int) -> None:
    rule: Rule = Int(low, low + abs(span))
    inside = low <= value <= low + abs(span)
    if inside:
        assert rule.check(value) == value
    else:
        with pytest.raises(Exception, match="must be in"):
            rule.check(value)


def test_a_message_class_needs_a_family_and_a_rule_per_field() -> None:
    with pytest.raises(TypeError, match="belongs to a family"):

        class Orphan(Message, tag="orphan"):
            pass

    @dataclass(frozen=True)
    class Unruly(_Test, tag="unruly"):
        """Test -> test."""

        x: int

    with pytest.raises(TypeError, match="has no rule"):
        Unruly.rules()
