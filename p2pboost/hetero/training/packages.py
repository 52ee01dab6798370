"""The guest's split-info packages once opened, and the packages it derives from them.

A host's package for a node (:class:`~p2pboost.hetero._messages.Package`) carries each
candidate's left sums in compressed ciphertexts; the guest decrypts them into exact integers
on the tree's fixed-point grids (:class:`OpenPackage`). For a split's larger child the host
sends no sums (:class:`~p2pboost.hetero._messages.Derived`): the same candidate's left sums
over the child are its sums over the parent minus its sums over the smaller sibling, both of
which the guest has opened, so :func:`derive` subtracts the integers. Integers, not floats:
the result is exactly what decrypting the child's own sums would give, hence the same split
choice as the plaintext core.

What the guest learns is unchanged: the sums it derives are the ones it would have decrypted,
and which candidates of a parent, a child and its sibling are the same it could already tell
from today's sums (a candidate's sums over two siblings add up to its parent's, exactly). The
sibling's package holds, besides its own candidates, the larger child's (sums of the smaller
child it could equally compute as the parent's minus the larger child's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.compress import compressed_count
from p2pboost.crypto.keys import AnyPublicKey
from p2pboost.crypto.packing import PackingSpec
from p2pboost.gbdt.fixedpoint import Grid, from_fixed
from p2pboost.hetero._messages import Derived, Package
from p2pboost.hetero.training.common import F64, I64, positions

__all__ = ["OpenPackage", "check_package", "derive", "open_package"]


@dataclass(frozen=True, eq=False)
class OpenPackage:
    """One node's host candidates: opaque ids, left row counts, and exact left sums, both as
    integers on the tree's grids (``(m, outputs)``) and as the floats the core scores;
    ``tokens`` each candidate's feature token, when the run asks for them
    (:mod:`p2pboost.hetero.training.constraints`)."""

    ids: npt.NDArray[np.uint64]
    counts: I64
    grad_int: I64
    hess_int: I64
    grad: F64
    hess: F64
    tokens: I64 | None = None


def open_package(
    ids: npt.NDArray[np.uint64],
    counts: I64,
    grad_int: npt.ArrayLike,
    hess_int: npt.ArrayLike,
    grids: tuple[Grid, Grid],
    tokens: I64 | None = None,
) -> OpenPackage:
    """A package from its decrypted integer sums."""
    g = np.asarray(grad_int, dtype=np.int64)
    h = np.asarray(hess_int, dtype=np.int64)
    return OpenPackage(ids, counts, g, h, from_fixed(g, grids[0]), from_fixed(h, grids[1]), tokens)


def check_package(msg: Package, spec: PackingSpec, public_key: AnyPublicKey) -> str | None:
    """What is wrong with a package's shape, or None (its values are checked where they are
    parsed, in the pool)."""
    batch = msg.ciphertexts
    if msg.counts.size and msg.counts.max() > spec.n_rows:
        return "split-info count outside [0, n_rows]"
    if batch.fingerprint != public_key.fingerprint or batch.width != public_key.ciphertext_bytes:
        return "ciphertexts were made under a different public key"
    if len(batch) != compressed_count(spec, int(msg.ids.size)):
        return "number of compressed ciphertexts does not match the layout"
    return None


def derive(
    msg: Derived, parent: OpenPackage, sibling: OpenPackage, grids: tuple[Grid, Grid]
) -> OpenPackage:
    """The larger child's package: each candidate's sums over the parent minus its sums over
    the sibling. Raises :class:`ValueError` (saying what is wrong) when the host names a
    candidate either package lacks or gives a count the two packages contradict (or a
    feature token: the candidates keep their parent's tokens)."""
    at_parent = positions(parent.ids, msg.parent_ids)
    at_sibling = positions(sibling.ids, msg.sibling_ids)
    if at_parent is None:
        raise ValueError("names a candidate its parent's package does not hold")
    if at_sibling is None:
        raise ValueError("names a candidate its sibling's package does not hold")
    if not np.array_equal(parent.counts[at_parent] - sibling.counts[at_sibling], msg.counts):
        raise ValueError("left counts are not the parent's minus the sibling's")
    tokens = None
    if parent.tokens is not None and sibling.tokens is not None:
        tokens = parent.tokens[at_parent]
        if not np.array_equal(tokens, sibling.tokens[at_sibling]):
            raise ValueError("names candidates of different features in its parent and sibling")
    g = parent.grad_int[at_parent] - sibling.grad_int[at_sibling]
    h = parent.hess_int[at_parent] - sibling.hess_int[at_sibling]
    return open_package(msg.ids, msg.counts, g, h, grids, tokens)
