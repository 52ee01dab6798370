"""Every message of the vertical family, as values (see :mod:`p2pboost.protocols._messages`).

Three protocols, three families: training (``hetero-train``, :mod:`p2pboost.hetero.training.guest`),
batch prediction (``hetero-predict``, :mod:`p2pboost.hetero.inference.batch`) and online serving
(``hetero-serve``, :mod:`p2pboost.hetero.inference.session`). The field rules bound what a peer can
make us allocate or compute; what depends on the run (which nodes are being split, how many rows a
bitmap covers) is checked by the protocol code that holds that state.
"""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass, field
from typing import Annotated

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.keys import AnyPublicKey
from p2pboost.crypto.ou import OUPublicKey
from p2pboost.crypto.paillier import PublicKey
from p2pboost.gbdt.params import MAX_BIN_LIMIT
from p2pboost.protocols._messages import (
    Array,
    Bool,
    Bytes,
    Float,
    Instance,
    Int,
    ListOf,
    Message,
    OneOf,
    Optional,
    Str,
)

__all__ = [
    "MAX_FEATURES",
    "MAX_ID_CHARS",
    "MAX_ROWS",
    "MAX_SERVE_ROWS",
    "PRIVATE_ORDERED",
    "PRIVATE_SHUFFLED",
    "Bye",
    "Chunk",
    "Decide",
    "Decided",
    "Derived",
    "Done",
    "Hello",
    "Layer",
    "Package",
    "Predict",
    "PredictBits",
    "PrivateAnswer",
    "PrivatePredict",
    "PrivateQuery",
    "PrivateReady",
    "PrivateRelay",
    "PrivateScores",
    "PrivateSlots",
    "Query",
    "QueryBits",
    "ServeBye",
    "ServeHello",
    "ServePrivate",
    "ServePrivateReady",
    "ServePsi",
    "ServePsiReady",
    "ServeReady",
    "ServeRefuse",
    "Setup",
    "TreeStart",
]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]
I8 = npt.NDArray[np.int8]
U32 = npt.NDArray[np.uint32]

#: Largest row count a host may announce (bounds what a peer can make us allocate).
MAX_ROWS = 100_000_000
MAX_FEATURES = 1_000_000
#: Evaluation sets one training may carry.
MAX_EVAL_SETS = 64
#: Node ids (a tree of depth 40 at most has fewer) and tree counts.
MAX_NODE = 1 << 40
#: Nodes one layer may split (a layer of depth 24).
MAX_LAYER = 1 << 24
#: Split candidates of one node (features x bins x directions).
MAX_CANDIDATES = 1 << 26
#: Rows one serving query may name (the guest splits larger batches).
MAX_SERVE_ROWS = 1_000_000
#: Longest string id accepted from a peer.
MAX_ID_CHARS = 256
_VERSION = Int(0, 1 << 16)
#: Trees one training may grow (bounds a resuming host's chain).
MAX_TREES = 1_000_000
#: Interaction groups one run may declare.
MAX_GROUPS = 4096
#: Outputs of one multi-output tree (a host keeps about outputs / 9 ciphertexts per row).
MAX_OUTPUTS = 1024
_RUN = Str(0, 64)
_DIGEST = Str(0, 64)
_NODES = Array("int64", max_len=MAX_LAYER)
_BITMAP = Array("uint8")


def _same_length(**arrays: Sized) -> str | None:
    """The rule of messages whose fields run in parallel (one entry per node or split)."""
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        return "must hold one entry each: " + ", ".join(f"{k} {n}" for k, n in lengths.items())
    return None


# -- training ------------------------------------------------------------------------------------


class TrainMessage(Message):
    FAMILY = "hetero-train"


@dataclass(frozen=True)
class Hello(TrainMessage, tag="hello"):
    """Host -> guest: what the host holds; a resuming host also its checkpoint's run id and
    fingerprint chain (empty otherwise: see :mod:`p2pboost.hetero.training.checkpoint`); a host
    continuing a model (warm start) that model's fingerprint.

    Constraints the host declares on its own features (protocol version 8,
    :mod:`p2pboost.hetero.training.constraints`), indexed by opaque feature tokens (a secret
    permutation of the host's features), never by name: ``directions`` the monotone direction
    (-1/0/1) of each token (nil: none), ``groups`` per interaction group the 0/1 membership
    of each token (empty: none declared)."""

    version: Annotated[int, _VERSION]
    n_rows: Annotated[int, Int(1, MAX_ROWS)]
    n_features: Annotated[int, Int(1, MAX_FEATURES)]
    n_eval: Annotated[list[int], ListOf(Int(0, MAX_ROWS), MAX_EVAL_SETS)]
    run: Annotated[str, _RUN] = ""
    chain: Annotated[list[str], ListOf(_DIGEST, MAX_TREES)] = field(default_factory=list)
    init: Annotated[str, Str(0, 128)] = ""
    directions: Annotated[I8 | None, Optional(Array("int8", max_len=MAX_FEATURES))] = None
    groups: Annotated[list[U8], ListOf(Array("uint8", max_len=MAX_FEATURES), MAX_GROUPS)] = field(
        default_factory=list
    )

    def check(self) -> str | None:
        d = self.directions
        if d is not None and (d.size != self.n_features or (d.size and np.abs(d).max() > 1)):
            return "directions must hold one -1/0/1 per feature"
        if any(g.size != self.n_features or (g.size and g.max() > 1) for g in self.groups):
            return "each interaction group must hold one 0/1 per feature"
        return None


#: ``Setup.private``: every candidate, shuffled under opaque ids as always (a private run).
PRIVATE_SHUFFLED = 1
#: ``Setup.private``: every candidate in the core's (feature, bin, direction) order, so a run
#: with a test noise seed replays the core's; it shows the guest the order of the host's
#: candidates, so a host takes part only if it allows it (``host_train(dp_replay=True)``).
PRIVATE_ORDERED = 2


@dataclass(frozen=True)
class Setup(TrainMessage, tag="setup"):
    """Guest -> host: the public key (Paillier or OU: the guest's choice), the binning
    settings, the run id and how many trees of it every party keeps (0: a fresh run). A
    warm start also names the model it continues (``init``, its fingerprint) and the
    fingerprint chain over that model's trees (the first ``start`` of this run). ``private``:
    a differentially private run (:data:`PRIVATE_SHUFFLED` or :data:`PRIVATE_ORDERED`),
    whose hosts offer every candidate of the fixed grid; 0 otherwise. ``min_child_weight``
    (protocol version 6): with each tree's hessian grid, the fewest rows a child needs
    (:func:`~p2pboost.gbdt.split.min_child_rows`), so hosts leave out candidates the guest
    would reject. ``tokens`` (protocol version 8): the host's packages carry each candidate's
    feature token (:mod:`p2pboost.hetero.training.constraints`), which the guest needs to
    apply constraints on the host's features."""

    version: Annotated[int, _VERSION]
    key: Annotated[AnyPublicKey, OneOf((Instance(PublicKey), Instance(OUPublicKey)))]
    max_bin: Annotated[int, Int(2, MAX_BIN_LIMIT)]
    min_samples_leaf: Annotated[int, Int(1, MAX_ROWS)]
    run: Annotated[str, Str(1, 64)]
    start: Annotated[int, Int(0, MAX_TREES)]
    init: Annotated[str, Str(0, 128)] = ""
    chain: Annotated[list[str], ListOf(_DIGEST, MAX_TREES)] = field(default_factory=list)
    private: Annotated[int, Int(0, 2)] = 0
    min_child_weight: Annotated[float, Float(0.0, 1e300)] = 0.0
    tokens: Annotated[bool, Bool()] = False

    def check(self) -> str | None:
        if self.chain and (not self.init or len(self.chain) != self.start):
            return "a chain is sent only with the model a warm start continues, one per tree"
        return None


@dataclass(frozen=True)
class TreeStart(TrainMessage, tag="tree"):
    """Guest -> host: a tree begins; the gradients' fixed-point grids (g bits, g magnitude,
    h bits, h magnitude), the sampled rows (a bitmap; nil: all) and the host's features the
    tree may use (0/1 per feature), and the fingerprint chain after the trees before it.
    ``root_features``: with ``colsample_bylevel``/``colsample_bynode``, the host's features
    the root may split on (nil: the tree's). ``outputs``: the gradient/hessian pairs packed
    per row (a multi-output tree's classes; 1: one output per tree)."""

    tree: Annotated[int, Int(0, MAX_NODE)]
    grid: Annotated[list[int], ListOf(Int(-1100, 1100), 4, min_len=4)]
    sample: Annotated[U8 | None, Optional(_BITMAP)]
    features: Annotated[U8, Array("uint8", max_len=MAX_FEATURES)]
    chain: Annotated[str, _DIGEST]
    root_features: Annotated[U8 | None, Optional(Array("uint8", max_len=MAX_FEATURES))] = None
    outputs: Annotated[int, Int(1, MAX_OUTPUTS)] = 1


@dataclass(frozen=True)
class Chunk(TrainMessage, tag="chunk"):
    """Guest -> host: encrypted packed gradients of the sampled rows ``start ..``."""

    start: Annotated[int, Int(0, MAX_ROWS)]
    ct: Annotated[CiphertextBatch, Instance(CiphertextBatch)]


@dataclass(frozen=True)
class Package(TrainMessage, tag="pkg"):
    """Host -> guest: one node's split candidates, shuffled, under opaque ids, their left
    sums compressed into few ciphertexts, and each candidate's left row count. ``tokens``:
    each candidate's feature token, when the guest asked for them (``Setup.tokens``)."""

    tree: Annotated[int, Int(0, MAX_NODE)]
    node: Annotated[int, Int(0, MAX_NODE)]
    ids: Annotated[U64, Array("uint64", max_len=MAX_CANDIDATES)]
    counts: Annotated[I64, Array("int64", max_len=MAX_CANDIDATES)]
    ciphertexts: Annotated[CiphertextBatch, Instance(CiphertextBatch)]
    tokens: Annotated[U32 | None, Optional(Array("uint32", max_len=MAX_CANDIDATES))] = None

    def check(self) -> str | None:
        if self.ids.shape != self.counts.shape:
            return "ids and counts differ in length"
        if self.tokens is not None and self.tokens.shape != self.ids.shape:
            return "ids and tokens differ in length"
        if self.counts.size and self.counts.min() < 0:
            return "a count is negative"
        if np.unique(self.ids).size != self.ids.size:
            return "duplicate split ids"
        return None


@dataclass(frozen=True)
class Derived(TrainMessage, tag="derived"):
    """Host -> guest: the larger child's candidates of a split, whose left sums the guest
    takes as its parent's minus its sibling's (sums it has already decrypted), instead of
    ciphertexts: each candidate under a new opaque id, its left row count, and the ids the
    same (feature, bin, direction) has in the parent's and the sibling's packages."""

    tree: Annotated[int, Int(0, MAX_NODE)]
    node: Annotated[int, Int(0, MAX_NODE)]
    parent: Annotated[int, Int(0, MAX_NODE)]
    sibling: Annotated[int, Int(0, MAX_NODE)]
    ids: Annotated[U64, Array("uint64", max_len=MAX_CANDIDATES)]
    counts: Annotated[I64, Array("int64", max_len=MAX_CANDIDATES)]
    parent_ids: Annotated[U64, Array("uint64", max_len=MAX_CANDIDATES)]
    sibling_ids: Annotated[U64, Array("uint64", max_len=MAX_CANDIDATES)]

    def check(self) -> str | None:
        problem = _same_length(
            ids=self.ids,
            counts=self.counts,
            parent_ids=self.parent_ids,
            sibling_ids=self.sibling_ids,
        )
        if problem is not None:
            return problem
        if self.counts.size and self.counts.min() < 0:
            return "a count is negative"
        if np.unique(self.ids).size != self.ids.size:
            return "duplicate split ids"
        return None


@dataclass(frozen=True)
class Decide(TrainMessage, tag="decide"):
    """Guest -> owner: for each node it won, the opaque ids tied at the best gain."""

    nodes: Annotated[I64, _NODES]
    ids: Annotated[list[U64], ListOf(Array("uint64", max_len=MAX_CANDIDATES), MAX_LAYER)]

    def check(self) -> str | None:
        if np.unique(self.nodes).size != self.nodes.size:
            return "node decided twice"
        if any(ids.size == 0 for ids in self.ids):
            return "a node without ids"
        return _same_length(nodes=self.nodes, ids=self.ids)


@dataclass(frozen=True)
class Decided(TrainMessage, tag="decided"):
    """Owner -> guest: the chosen id per node, its left set (a bitmap over the node's rows)
    and the left sets of every evaluation set's rows."""

    ids: Annotated[U64, Array("uint64", max_len=MAX_LAYER)]
    bitmaps: Annotated[list[U8], ListOf(_BITMAP, MAX_LAYER)]
    eval: Annotated[list[list[U8]], ListOf(ListOf(_BITMAP, MAX_EVAL_SETS), MAX_LAYER)]

    def check(self) -> str | None:
        return _same_length(ids=self.ids, bitmaps=self.bitmaps, eval=self.eval)


@dataclass(frozen=True)
class Layer(TrainMessage, tag="layer"):
    """Guest -> hosts: the layer's splits (node -> left, right children) with each node's
    left set, and whether the tree grows another layer. ``features``: with
    ``colsample_bylevel``/``colsample_bynode`` and another layer, the host's features each
    child may split on, in the order left0, right0, left1, ... (empty: the tree's).

    ``decided`` (protocol version 10): the nodes whose left sets are the receiving host's own
    answer to this layer's ``Decide`` (their bitmaps are empty: the host has them). The guest
    sends such a layer right behind its ``Decide``, before the answer, when no other host owns
    a split of the layer, so the host starts the next layer's histograms without waiting a
    round trip for its own left sets to come back; otherwise (empty) every bitmap is here."""

    nodes: Annotated[I64, _NODES]
    left: Annotated[I64, _NODES]
    right: Annotated[I64, _NODES]
    bitmaps: Annotated[list[U8], ListOf(_BITMAP, MAX_LAYER)]
    grow: Annotated[bool, Bool()]
    features: Annotated[list[U8], ListOf(Array("uint8", max_len=MAX_FEATURES), 2 * MAX_LAYER)] = (
        field(default_factory=list)
    )
    decided: Annotated[I64, _NODES] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def check(self) -> str | None:
        problem = _same_length(
            nodes=self.nodes, left=self.left, right=self.right, bitmaps=self.bitmaps
        )
        if problem is not None:
            return problem
        if np.unique(self.decided).size != self.decided.size:
            return "a node decided twice"
        marked = np.isin(self.nodes, self.decided)
        if int(marked.sum()) != self.decided.size:
            return "a decided node the layer does not split"
        if any(b.size for b, m in zip(self.bitmaps, marked.tolist(), strict=True) if m):
            return "a bitmap for a node the host decided"
        return None


@dataclass(frozen=True)
class Done(TrainMessage, tag="done"):
    """Guest -> hosts: training ended; the model's fingerprint, its number of trees and the
    fingerprint chain after them."""

    fingerprint: Annotated[str, Str(1, 128)]
    n_trees: Annotated[int, Int(0, MAX_NODE)]
    chain: Annotated[str, _DIGEST]


@dataclass(frozen=True)
class Bye(TrainMessage, tag="bye"):
    """Host -> guest: the host kept its model part."""


# -- batch prediction ----------------------------------------------------------------------------


class PredictMessage(Message):
    FAMILY = "hetero-predict"


@dataclass(frozen=True)
class Predict(PredictMessage, tag="predict"):
    """Guest -> host: predict ``n`` aligned rows with the model ``fingerprint``."""

    fingerprint: Annotated[str, Str(0, 128)]
    n: Annotated[int, Int(0, MAX_ROWS)]


@dataclass(frozen=True)
class PredictBits(PredictMessage, tag="bits"):
    """Host -> guest: ``go_left`` of every split it owns (tree, node) for every row, packed;
    ``tokens``: a consenting host's opaque feature token per split (None without consent; see
    :mod:`p2pboost.hetero.inference.explain`)."""

    tree: Annotated[I64, Array("int64")]
    node: Annotated[I64, Array("int64")]
    bits: Annotated[U8, Array("uint8")]
    tokens: Annotated[I64 | None, Optional(Array("int64"))] = None

    def check(self) -> str | None:
        if self.tokens is not None:
            return _same_length(tree=self.tree, node=self.node, tokens=self.tokens)
        return _same_length(tree=self.tree, node=self.node)


#: Slots of one padded tree in private inference (a tree of depth 20).
MAX_SLOTS = 1 << 20
#: Sealed bytes one private-inference relay may carry (the codec's message bound).
MAX_SEALED = 256 * 1024 * 1024
_KEY25519 = Bytes(32, 32)


@dataclass(frozen=True)
class PrivatePredict(PredictMessage, tag="private"):
    """Guest -> host: predict ``n`` aligned rows privately (see
    :mod:`p2pboost.hetero.inference.private_batch`) under the guest's public ``key``: the
    padded trees' ``slots``, each tree's output ``widths`` and the output column of each of
    their columns (``outputs``, ``n_outputs`` in all), and the slot ranges of this host's
    splits (``tree``, ``node``, ``lo``, ``mid``, ``hi``, in the host's wire order). ``first``:
    this host receives the guest's ciphertexts; ``last``: it returns the totals."""

    fingerprint: Annotated[str, Str(0, 128)]
    n: Annotated[int, Int(0, MAX_ROWS)]
    key: Annotated[AnyPublicKey, OneOf((Instance(PublicKey), Instance(OUPublicKey)))]
    slots: Annotated[int, Int(1, MAX_SLOTS)]
    n_outputs: Annotated[int, Int(1, MAX_OUTPUTS)]
    widths: Annotated[I64, Array("int64", max_len=MAX_TREES)]
    outputs: Annotated[I64, Array("int64", max_len=MAX_TREES * MAX_OUTPUTS)]
    tree: Annotated[I64, _NODES]
    node: Annotated[I64, _NODES]
    lo: Annotated[I64, _NODES]
    mid: Annotated[I64, _NODES]
    hi: Annotated[I64, _NODES]
    first: Annotated[bool, Bool()]
    last: Annotated[bool, Bool()]

    def check(self) -> str | None:
        return _check_private(self.widths, self.outputs, self.n_outputs) or _same_length(
            tree=self.tree, node=self.node, lo=self.lo, mid=self.mid, hi=self.hi
        )


def _check_private(widths: I64, outputs: I64, n_outputs: int) -> str | None:
    """The rule of a private-inference request's output layout."""
    if widths.size and (widths.min() < 1 or widths.max() > n_outputs):
        return "a tree width outside [1, n_outputs]"
    if outputs.size != int(widths.sum()):
        return "one output column per tree column"
    if outputs.size and (outputs.min() < 0 or outputs.max() >= n_outputs):
        return "an output column outside [0, n_outputs)"
    return None


@dataclass(frozen=True)
class PrivateReady(PredictMessage, tag="private_ready"):
    """Host -> guest: the X25519 key the previous host seals its selection to."""

    seal: Annotated[bytes, _KEY25519]


@dataclass(frozen=True)
class PrivateSlots(PredictMessage, tag="slots"):
    """Guest -> host: rows ``start .. start + rows`` of a private prediction: the guest's
    slot ciphertexts (``ct``, to the first host) or the previous host's sealed selection
    (``sealed``, relayed), and the next host's seal key (``next``; empty for the last)."""

    start: Annotated[int, Int(0, MAX_ROWS)]
    rows: Annotated[int, Int(1, MAX_ROWS)]
    ct: Annotated[CiphertextBatch | None, Optional(Instance(CiphertextBatch))]
    sealed: Annotated[bytes, Bytes(0, MAX_SEALED)]
    next: Annotated[bytes, Bytes(0, 32)]

    def check(self) -> str | None:
        if (self.ct is None) == (not self.sealed):
            return "either ciphertexts or sealed bytes"
        if len(self.next) not in (0, 32):
            return "a seal key is 32 bytes"
        return None


@dataclass(frozen=True)
class PrivateRelay(PredictMessage, tag="relay"):
    """Host -> guest: this host's selection, sealed to the next host (the guest relays it)."""

    sealed: Annotated[bytes, Bytes(1, MAX_SEALED)]


@dataclass(frozen=True)
class PrivateScores(PredictMessage, tag="scores"):
    """Host -> guest (the last host): one ciphertext per row and output column, each row's
    total over all trees, re-randomised."""

    ct: Annotated[CiphertextBatch, Instance(CiphertextBatch)]


# -- online serving ------------------------------------------------------------------------------


class ServeMessage(Message):
    FAMILY = "hetero-serve"


_SEQ = Int(0, 1 << 62)
_IDS = OneOf(
    (
        Array("int64", max_len=MAX_SERVE_ROWS),
        ListOf(Str(0, MAX_ID_CHARS), MAX_SERVE_ROWS),
    )
)


@dataclass(frozen=True)
class ServeHello(ServeMessage, tag="hello"):
    """Guest -> host: the model's fingerprint and how many trees the guest predicts with."""

    v: Annotated[int, _VERSION]
    fingerprint: Annotated[str, Str(0, 128)]
    trees: Annotated[int, Int(0, MAX_NODE)]


@dataclass(frozen=True)
class ServeReady(ServeMessage, tag="ready"):
    """Host -> guest: the splits it answers for, in the order of its bits; ``tokens``: a
    consenting host's opaque feature token per split, for this session (None without consent;
    see :mod:`p2pboost.hetero.inference.explain`)."""

    v: Annotated[int, _VERSION]
    tree: Annotated[I64, Array("int64")]
    node: Annotated[I64, Array("int64")]
    tokens: Annotated[I64 | None, Optional(Array("int64"))] = None

    def check(self) -> str | None:
        if self.tokens is not None:
            return _same_length(tree=self.tree, node=self.node, tokens=self.tokens)
        return _same_length(tree=self.tree, node=self.node)


@dataclass(frozen=True)
class ServePrivate(ServeMessage, tag="private"):
    """Guest -> host, after ``ready``: this session answers by private inference (see
    :class:`PrivatePredict` for the fields; the rows come with each query)."""

    key: Annotated[AnyPublicKey, OneOf((Instance(PublicKey), Instance(OUPublicKey)))]
    slots: Annotated[int, Int(1, MAX_SLOTS)]
    n_outputs: Annotated[int, Int(1, MAX_OUTPUTS)]
    widths: Annotated[I64, Array("int64", max_len=MAX_TREES)]
    outputs: Annotated[I64, Array("int64", max_len=MAX_TREES * MAX_OUTPUTS)]
    tree: Annotated[I64, _NODES]
    node: Annotated[I64, _NODES]
    lo: Annotated[I64, _NODES]
    mid: Annotated[I64, _NODES]
    hi: Annotated[I64, _NODES]
    first: Annotated[bool, Bool()]
    last: Annotated[bool, Bool()]

    def check(self) -> str | None:
        return _check_private(self.widths, self.outputs, self.n_outputs) or _same_length(
            tree=self.tree, node=self.node, lo=self.lo, mid=self.mid, hi=self.hi
        )


@dataclass(frozen=True)
class ServePrivateReady(ServeMessage, tag="private_ready"):
    """Host -> guest: the X25519 key the previous host seals its selections to, for as long
    as the session lives."""

    seal: Annotated[bytes, _KEY25519]


@dataclass(frozen=True)
class PrivateQuery(ServeMessage, tag="pq"):
    """Guest -> host: one private batch by id: the guest's slot ciphertexts (first host) or
    the previous host's sealed selection, the next host's seal key (empty: the last) and the
    guest's number for the batch (bound into the seal)."""

    seq: Annotated[int, _SEQ]
    ids: Annotated[I64 | list[str], _IDS]
    batch: Annotated[int, _SEQ]
    ct: Annotated[CiphertextBatch | None, Optional(Instance(CiphertextBatch))]
    sealed: Annotated[bytes, Bytes(0, MAX_SEALED)]
    next: Annotated[bytes, Bytes(0, 32)]

    def check(self) -> str | None:
        if (self.ct is None) == (not self.sealed):
            return "either ciphertexts or sealed bytes"
        if len(self.next) not in (0, 32):
            return "a seal key is 32 bytes"
        return None


@dataclass(frozen=True)
class PrivateAnswer(ServeMessage, tag="pa"):
    """Host -> guest: the selection sealed to the next host, or (the last host) one
    ciphertext per row and output column; the positions of ids the host does not hold."""

    seq: Annotated[int, _SEQ]
    sealed: Annotated[bytes, Bytes(0, MAX_SEALED)]
    ct: Annotated[CiphertextBatch | None, Optional(Instance(CiphertextBatch))]
    unknown: Annotated[I64, Array("int64", max_len=MAX_SERVE_ROWS)]

    def check(self) -> str | None:
        if (self.ct is None) == (not self.sealed):
            return "either ciphertexts or sealed bytes"
        return None


@dataclass(frozen=True)
class ServeRefuse(ServeMessage, tag="refuse"):
    """Host -> guest: the session is refused, and why."""

    reason: Annotated[str, Str(0, 4096)]


@dataclass(frozen=True)
class Query(ServeMessage, tag="q"):
    """Guest -> host: the rows of one batch, by id (int64 ids or strings)."""

    seq: Annotated[int, _SEQ]
    ids: Annotated[I64 | list[str], _IDS]


@dataclass(frozen=True)
class QueryBits(ServeMessage, tag="bits"):
    """Host -> guest: the batch's decisions, packed, and the positions of unknown ids."""

    seq: Annotated[int, _SEQ]
    bits: Annotated[U8, Array("uint8")]
    unknown: Annotated[I64, Array("int64", max_len=MAX_SERVE_ROWS)]


@dataclass(frozen=True)
class ServePsi(ServeMessage, tag="psi"):
    """Guest -> host: align the next batch by PSI in sub-session ``session``."""

    seq: Annotated[int, _SEQ]
    session: Annotated[str, Str(5, 255)]

    def check(self) -> str | None:
        return None if self.session.startswith("psi-") else "'session' must name a psi- session"


@dataclass(frozen=True)
class ServePsiReady(ServeMessage, tag="psi-ready"):
    """Host -> guest: the host has opened the PSI sub-session."""

    seq: Annotated[int, _SEQ]


@dataclass(frozen=True)
class ServeBye(ServeMessage, tag="bye"):
    """Guest -> host: the session ends."""
