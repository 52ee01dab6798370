"""PSI math: commutativity, intersection equals the set intersection, errors are clear."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pboost.crypto import psi
from p2pboost.exceptions import CryptoError, InputError


def _double_blind(ids_a: list[int], ids_b: list[int]) -> tuple[list[int], list[int]]:
    """Run both halves of the protocol in-process and intersect."""
    key_a, key_b = psi.PsiKey.generate(), psi.PsiKey.generate()
    a_once = key_a.blind(psi.hash_ids(ids_a))
    a_twice = key_b.blind(a_once)  # the host raises the guest's points to b
    b_twice = key_a.blind(key_b.blind(psi.hash_ids(ids_b)))
    return psi.intersect_positions(psi.split_blob(a_twice), psi.split_blob(b_twice))


def test_blinding_commutes() -> None:
    key_a, key_b = psi.PsiKey.generate(), psi.PsiKey.generate()
    points = psi.hash_ids(range(50))
    assert key_a.blind(key_b.blind(points)) == key_b.blind(key_a.blind(points))
    assert key_a.blind(points) != points


@settings(max_examples=25, deadline=None)
@given(
    st.sets(st.integers(0, 300), max_size=60),
    st.sets(st.integers(0, 300), max_size=60),
)
def test_intersection_equals_set_intersection(a: set[int], b: set[int]) -> None:
    ids_a, ids_b = sorted(a), sorted(b, reverse=True)
    mine, theirs = _double_blind(ids_a, ids_b)
    assert {ids_a[i] for i in mine} == a & b
    assert [ids_a[i] for i in mine] == [ids_b[j] for j in theirs]
    assert mine == sorted(mine)


def test_id_types_are_domain_separated() -> None:
    assert psi.hash_ids([1]) != psi.hash_ids(["1"])
    assert psi.hash_ids(["1"]) != psi.hash_ids([b"1"])
    assert len(psi.hash_ids(["a", b"b", 3])) == 3 * psi.POINT_BYTES


@pytest.mark.parametrize("bad", [1.5, None, True])
def test_bad_id_types_are_rejected(bad: object) -> None:
    with pytest.raises(InputError, match="ids must be"):
        psi.hash_ids([bad])  # type: ignore[list-item]


def test_duplicate_ids_are_rejected() -> None:
    points = psi.split_blob(psi.hash_ids([1, 2, 1]))
    with pytest.raises(InputError, match="unique"):
        psi.intersect_positions(points, points[:2])
    with pytest.raises(InputError, match="duplicate"):
        psi.intersect_positions(points[:2], points)


def test_malformed_blob_and_low_order_point_raise_crypto_error() -> None:
    key = psi.PsiKey.generate()
    with pytest.raises(CryptoError, match="multiple of 32"):
        key.blind(b"\x01" * 33)
    with pytest.raises(CryptoError, match="low order"):
        key.blind(bytes(32))  # u = 0 is a low-order point
    with pytest.raises(CryptoError):
        psi.split_blob(b"\x00" * 31)


def test_key_repr_hides_the_secret() -> None:
    key = psi.PsiKey.generate()
    assert key.private_bytes.hex() not in repr(key)
