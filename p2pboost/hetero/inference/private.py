"""The arithmetic of private inference, pure and vectorised (no I/O).

Private inference (:mod:`p2pboost.hetero.inference.private_batch`) tells the guest each row's
score and nothing else: no host decision bit, no leaf, not even a tree's share of the score.
It rests on one picture, the *padded tree*: every tree is laid out as the full binary tree of
the model's depth ``D``, with ``S = 2**D`` leaf *slots*. A node at depth ``d`` covers a
contiguous, aligned range of ``2**(D - d)`` slots, its left child the first half, its right
child the second. A real leaf above depth ``D`` covers several slots; only its first slot
carries its weight.

For a row, the leaf it reaches is the one slot that every party's splits allow:

* the **guest** zeroes, per row, the slots its own splits rule out (and every slot but a leaf's
  first), and encrypts the slot values under its own key (:meth:`PrivateForest.slot_values`);
* each **host** keeps, per row, the slots its splits allow (:func:`host_selection`), from
  nothing but the slot range of each of its own splits, and sums what is left.

Weights travel as fixed-point integers ``round(w * 2**FRACTION_BITS) + OFFSET`` (never
negative, so no modular wrap), so the decrypted total of an output column is the sum of its
trees' weights plus ``OFFSET`` per tree: :meth:`PrivateForest.decode` removes the offset and
the scale. The error is at most half a unit of ``2**-FRACTION_BITS`` per tree.

The helpers :func:`seal` / :func:`unseal` wrap the ciphertexts one host hands the next
through the guest (X25519, HKDF-SHA256, ChaCha20-Poly1305): the guest relays bytes it
cannot open, so it never sees a host's selection, even as ciphertexts it could decrypt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from p2pboost.exceptions import InputError
from p2pboost.gbdt.features import Features
from p2pboost.hetero.model import GUEST, GuestModel

__all__ = [
    "FRACTION_BITS",
    "OFFSET",
    "PrivateForest",
    "SealKey",
    "SlotRanges",
    "host_selection",
    "seal",
    "unseal",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]

#: Fixed-point fraction of the encrypted weights: 2**-40 (about 1e-12) per tree.
FRACTION_BITS = 40
#: Added to every encoded weight so no plaintext is negative; |w| must stay below 2**20.
OFFSET = 1 << 61
#: Deepest padded tree private inference accepts (2**20 slots per tree).
MAX_DEPTH = 20
_KEY_BYTES = 32
_INFO = b"p2pboost private inference relay v1"


@dataclass(frozen=True, slots=True, eq=False)
class SlotRanges:
    """Where each split of one party lies in its padded tree: ``tree``, ``node`` (the split's
    id, in the party's wire order) and the slots ``[lo, mid)`` (left) and ``[mid, hi)``
    (right)."""

    tree: I64
    node: I64
    lo: I64
    mid: I64
    hi: I64

    def check(self, n_trees: int, slots: int) -> str | None:
        """Why these ranges are not aligned halves of a padded tree of ``slots`` slots, or
        None (a host checks what the guest sends before it uses it as an index)."""
        arrays = (self.tree, self.node, self.lo, self.mid, self.hi)
        if len({a.size for a in arrays}) > 1:
            return "slot ranges of different lengths"
        if self.tree.size == 0:
            return None
        if self.tree.min() < 0 or self.tree.max() >= n_trees:
            return "a split in a tree beyond the model"
        size = self.hi - self.lo
        if self.lo.min() < 0 or self.hi.max() > slots or size.min() < 2:
            return "a slot range outside its tree"
        if (
            np.any(size & (size - 1))
            or np.any(self.lo % size)
            or np.any(self.mid * 2 != self.lo + self.hi)
        ):
            return "a slot range that is not an aligned half-split"
        return None


class PrivateForest:
    """The guest's side: every used tree as a padded tree (see the module docstring)."""

    def __init__(self, model: GuestModel, n_rounds: int | None = None) -> None:
        trees = model.trees[: model.used_trees(n_rounds)]
        self.depth = max((t.depth for t in trees), default=0)
        if self.depth > MAX_DEPTH:
            raise InputError(f"private inference pads trees to depth {MAX_DEPTH} at most")
        self.slots = 1 << self.depth
        self.n_outputs = int(model.base_margin.size)
        self.base_margin = model.base_margin
        self.n_features = model.n_features
        self.n_hosts = len(model.hosts)
        widths, outputs, starts, encoded = [], [], [], []
        lo_all, hi_all, trees_all, nodes_all, owners = [], [], [], [], []
        self._guest: list[tuple[int, int, int, int, int, float, bool]] = []
        position = 0
        for t, (tree, out) in enumerate(zip(trees, model.tree_output, strict=False)):
            cols = np.arange(self.n_outputs) if out < 0 else np.array([out])
            lo = np.zeros(tree.n_nodes, dtype=np.int64)
            hi = np.zeros(tree.n_nodes, dtype=np.int64)
            hi[0] = self.slots
            first = np.zeros(self.slots, dtype=np.bool_)
            leaf_of = np.zeros(self.slots, dtype=np.int64)
            for nd in range(tree.n_nodes):  # parents come before children
                if tree.owner[nd] < 0:
                    first[lo[nd]] = True
                    leaf_of[lo[nd] : hi[nd]] = nd
                    continue
                if tree.left[nd] <= nd or tree.right[nd] <= nd:
                    raise InputError("private inference needs every child after its parent")
                mid = (lo[nd] + hi[nd]) // 2
                lo[tree.left[nd]], hi[tree.left[nd]] = lo[nd], mid
                lo[tree.right[nd]], hi[tree.right[nd]] = mid, hi[nd]
                if tree.owner[nd] == GUEST:
                    self._guest.append(
                        (
                            t,
                            int(lo[nd]),
                            int(mid),
                            int(hi[nd]),
                            int(tree.feature[nd]),
                            float(tree.threshold[nd]),
                            bool(tree.default_left[nd]),
                        )
                    )
            internal = np.flatnonzero(tree.owner >= 0)
            trees_all.append(np.full(internal.size, t, dtype=np.int64))
            nodes_all.append(internal)
            owners.append(tree.owner[internal])
            lo_all.append(lo[internal])
            hi_all.append(hi[internal])
            weights = tree.value[leaf_of][:, cols if out < 0 else [0]]  # (slots, width)
            if weights.size and np.max(np.abs(weights)) >= 2.0 ** (61 - FRACTION_BITS - 1):
                raise InputError("a leaf weight too large for private inference's fixed point")
            code = np.rint(weights * 2.0**FRACTION_BITS).astype(np.int64) + OFFSET
            encoded.append(np.where(first[:, None], code, 0))
            widths.append(cols.size)
            outputs.append(cols)
            starts.append(position)
            position += self.slots * cols.size
        self.n_trees = len(trees)
        self.widths = np.array(widths, dtype=np.int64)
        self.outputs = (
            np.concatenate(outputs).astype(np.int64) if outputs else np.zeros(0, np.int64)
        )
        self.starts = np.array(starts, dtype=np.int64)
        self.positions = position  # ciphertexts per row
        self._encoded = encoded
        #: Trees per output column: each adds OFFSET once to that column's total.
        self.trees_per_output = np.bincount(self.outputs, minlength=self.n_outputs)
        tree_of = np.concatenate(trees_all) if trees_all else np.zeros(0, np.int64)
        node_of = np.concatenate(nodes_all) if nodes_all else np.zeros(0, np.int64)
        owner_of = np.concatenate(owners) if owners else np.zeros(0, np.int64)
        lo_of = np.concatenate(lo_all) if lo_all else np.zeros(0, np.int64)
        hi_of = np.concatenate(hi_all) if hi_all else np.zeros(0, np.int64)
        self._ranges = (tree_of, node_of, owner_of, lo_of, hi_of)

    def host_ranges(self, host: int) -> SlotRanges:
        """The slot ranges of host ``host``'s (1-based) splits, in its wire order."""
        tree, node, owner, lo, hi = self._ranges
        sel = np.flatnonzero(owner == host)
        order = np.lexsort((node[sel], tree[sel]))
        sel = sel[order]
        return SlotRanges(tree[sel], node[sel], lo[sel], (lo[sel] + hi[sel]) // 2, hi[sel])

    def slot_values(self, X: Features | F64) -> npt.NDArray[np.int64]:
        """``(n, positions)`` plaintexts: each slot's encoded weight where the guest's splits
        allow it for that row, 0 elsewhere (tree by tree, slot by slot, column by column).
        ``X``: checked features, or an online session's rows (already checked there)."""
        arr = X.dense() if isinstance(X, Features) else X
        if arr.shape[1] != self.n_features:
            raise InputError(f"X has {arr.shape[1]} features, the model {self.n_features}")
        n = arr.shape[0]
        allow = np.ones((self.n_trees, n, self.slots), dtype=np.bool_)
        for t, lo, mid, hi, feature, threshold, default_left in self._guest:
            x = arr[:, feature]
            with np.errstate(invalid="ignore"):
                left = np.where(np.isnan(x), default_left, x <= threshold)
            allow[t, :, lo:mid] &= left[:, None]
            allow[t, :, mid:hi] &= ~left[:, None]
        out = np.empty((n, self.positions), dtype=np.int64)
        for t, code in enumerate(self._encoded):
            width = int(self.widths[t])
            block = np.where(allow[t][:, :, None], code[None, :, :], 0)
            start = int(self.starts[t])
            out[:, start : start + self.slots * width] = block.reshape(n, -1)
        return out

    def decode(self, totals: list[int], n: int) -> F64:
        """Raw margins ``(n, K)`` from the decrypted totals (row by row, column by column);
        raises :class:`InputError` for a total no honest sum can give."""
        if len(totals) != n * self.n_outputs:
            raise InputError("a total per row and output column is expected")
        per = np.tile(self.trees_per_output, n)
        values = np.empty(len(totals), dtype=np.float64)
        scale = 2.0**-FRACTION_BITS
        for i, (m, k) in enumerate(zip(totals, per.tolist(), strict=True)):
            if not 0 <= int(m) < 2 * OFFSET * max(k, 1):
                raise InputError("a decrypted total outside what the trees can sum to")
            values[i] = (int(m) - k * OFFSET) * scale
        return values.reshape(n, self.n_outputs) + self.base_margin


def host_selection(ranges: SlotRanges, bits: B8, slots: int, widths: I64) -> B8:
    """``(n, positions)``: which slots (and their columns) host's splits allow per row, from
    ``bits[split, row]`` (``go_left`` in the order of ``ranges``)."""
    n_trees = widths.size
    n = bits.shape[1]
    allow = np.ones((n_trees, n, slots), dtype=np.bool_)
    for i, (t, lo, mid, hi) in enumerate(
        zip(
            ranges.tree.tolist(),
            ranges.lo.tolist(),
            ranges.mid.tolist(),
            ranges.hi.tolist(),
            strict=True,
        )
    ):
        left = bits[i]
        allow[t, :, lo:mid] &= left[:, None]
        allow[t, :, mid:hi] &= ~left[:, None]
    parts = [np.repeat(allow[t], int(widths[t]), axis=1) for t in range(n_trees)]
    return np.concatenate(parts, axis=1) if parts else np.zeros((n, 0), dtype=np.bool_)


class SealKey:
    """A host's X25519 key for one request: the previous host seals its output to it."""

    def __init__(self) -> None:
        self._key = X25519PrivateKey.generate()
        self.public = self._key.public_key().public_bytes_raw()

    def open(self, sealed: bytes, context: bytes) -> bytes:
        """The plaintext of :func:`seal` (``context`` must match); :class:`InputError` if
        the bytes were not sealed to this key."""
        return unseal(self._key, sealed, context)


def _derive(shared: bytes, sender: bytes, receiver: bytes) -> bytes:
    hkdf = HKDF(
        algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=None, info=_INFO + sender + receiver
    )
    return hkdf.derive(shared)


def seal(receiver: bytes, data: bytes, context: bytes) -> bytes:
    """``data`` encrypted to the X25519 public key ``receiver`` (an ephemeral key per call,
    so a zero nonce is never reused); ``context`` is bound as associated data."""
    if len(receiver) != _KEY_BYTES:
        raise InputError("a seal key is 32 bytes")
    ephemeral = X25519PrivateKey.generate()
    sender = ephemeral.public_key().public_bytes_raw()
    key = _derive(ephemeral.exchange(X25519PublicKey.from_public_bytes(receiver)), sender, receiver)
    return sender + ChaCha20Poly1305(key).encrypt(bytes(12), data, context)


def unseal(private: X25519PrivateKey, sealed: bytes, context: bytes) -> bytes:
    """Inverse of :func:`seal`."""
    if len(sealed) < _KEY_BYTES + 16:
        raise InputError("sealed bytes too short")
    sender = sealed[:_KEY_BYTES]
    receiver = private.public_key().public_bytes_raw()
    key = _derive(private.exchange(X25519PublicKey.from_public_bytes(sender)), sender, receiver)
    try:
        return ChaCha20Poly1305(key).decrypt(bytes(12), sealed[_KEY_BYTES:], context)
    except InvalidTag as exc:
        raise InputError("sealed bytes do not open with this key") from exc
