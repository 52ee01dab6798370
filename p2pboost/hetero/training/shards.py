"""The worker-resident shard registry: a host's ciphertext work, in row shards that stay in
their worker process for a tree.

A host cuts each tree's sampled rows into ``W`` shards, one per worker of a
:class:`~p2pboost.workers.PinnedPool`, in the block-cyclic layout of
:mod:`p2pboost.hetero.training.layout`: slot ``s`` of the guest's gradient stream (the
``s``-th sampled row) belongs to shard ``(s // block) % W``, blocks of
:func:`~p2pboost.hetero.training.layout.shard_block` slots dealt to the shards in turn. A shard
receives its rows' ciphertexts once, as bytes, and keeps them in its process for the whole
tree, together with the *partial* histograms (over its own rows) of the frontier nodes. Per
layer it is sent the rows of the smaller child of a split and returns, for both children, the
candidates and its partial left sum of each as ciphertext bytes; the host multiplies the
shards' partial sums of a candidate (ciphertext addition) when it compresses them
(:func:`~p2pboost.crypto.compress.compress_parts`).
So no big integer ever crosses a process boundary, and per layer only row numbers go in and
candidate bytes come out.

Why rows and not feature groups: every shard does the same share of every node's additions
whatever the number of features (five features on two workers would split 3:2), the tree's
ciphertexts are held once rather than once per group, each chunk goes to one process, and
partial histograms reduce by multiplication, which the compression step does anyway. The cost
is that each shard computes the prefix sums of every feature (a few products per bin, far below
the additions of its rows).

Everything here runs in the worker: module-level functions (picklable by reference) acting on
the module's registry :data:`_SHARDS`, keyed by a token the host draws per training run and
shard, so several hosts (or runs) can share one pinned pool. Each is declared
:func:`~p2pboost.workers.stateful`: on a cluster, a shard whose worker was lost is rebuilt
elsewhere by replaying its calls (the run's settings and the current tree's), which gives the
same shard since every kernel is deterministic. A tree's state is dropped when the tree ends
(:func:`shard_end_tree`), a parent's histogram as soon as its children are built, and
everything by :func:`shard_close`.

**Derived siblings.** By default a split's larger child costs the host no ciphertext work at
all: its candidates' left sums are the parent's minus the smaller child's, which the guest has
both decrypted, so the host sends the smaller child's sums for the candidates of both children
and the guest subtracts in plaintext (:func:`shard_split` with ``derive``). That halves the
compressions and decryptions of every layer below the root, and no histogram is kept between
layers (only counts). Trees with per-node or per-level column draws, and private trees, use
the encrypted subtraction below instead.

**A memory bound.** The histograms kept from one layer to the next (to derive each split's
larger child by subtraction) are most of a host's memory on wide data. The host decides which
children each split keeps (:func:`shard_split`'s ``keep``) so that no more than a budget's worth
stays; a split whose parent was not kept builds both children from their rows (more additions,
the same sums). Each shard measures what it holds (the sizes of the ciphertext objects of its
cached histograms) and reports the tree's peak.

What a shard offers of a node, and the sums, are computed by
:mod:`p2pboost.hetero.training.candidates`; which slots are a shard's by
:mod:`p2pboost.hetero.training.layout`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto import kernels
from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.histogram import EncryptedHistogram, build_histogram, products_made
from p2pboost.crypto.keys import AnyPublicKey, public_key_from_bytes
from p2pboost.crypto.residues import Residues
from p2pboost.exceptions import InputError, WorkerStateLost
from p2pboost.hetero.training.candidates import (
    NodeCandidates,
    candidate_sums,
    listed,
    node_candidates,
    node_counts,
    offered,
    sparse_zero_bins,
)
from p2pboost.hetero.training.layout import local_position, slot_owner, slots_of
from p2pboost.workers import Log, stateful

__all__ = [
    "shard_chunk",
    "shard_close",
    "shard_end_tree",
    "shard_open",
    "shard_retain",
    "shard_root",
    "shard_split",
    "shard_tree",
]

I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.unsignedinteger[Any]]


# -- worker-side state ----------------------------------------------------------------------------


@dataclass(eq=False)
class _Shard:
    """One shard of one host's run, living in a pinned worker."""

    public_key: AnyPublicKey
    codes: Codes  # (rows, features): every row of the host (counts need the whole node)
    n_slots: int
    min_rows: int
    index: int
    shards: int
    #: Rows per block of this tree's layout (:func:`~p2pboost.hetero.training.layout.shard_block`).
    block: int = 1
    #: This tree's fewest rows per child (:func:`shard_tree`): ``min_rows`` or more.
    tree_min_rows: int = 0
    sample: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    slot_of_row: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    allowed: B8 = field(default_factory=lambda: np.zeros((0, 0, 2), np.bool_))
    #: Features with a candidate in this tree (column sampling): the only ones accumulated.
    used: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    #: Per feature, the bin derived from the node total instead of summed (-1: none).
    zero_bins: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    #: Ciphertext products of this tree's histogram builds (reported at the end of the tree).
    additions: int = 0
    local_codes: list[Codes] = field(default_factory=list)
    #: This tree's ciphertexts of the shard's rows, one per plane of a packed row.
    cts: tuple[Residues, ...] = ()
    #: node -> (partial histogram over this shard's rows or None where it is not kept,
    #: counts over all the node's rows)
    hists: dict[int, tuple[EncryptedHistogram | None, I64]] = field(default_factory=dict)
    #: node -> bytes its cached histogram (and its counts) take; the tree's peak of their sum.
    sizes: dict[int, int] = field(default_factory=dict)
    peak: int = 0

    def keep(self, node: int, hist: EncryptedHistogram | None, counts: I64) -> None:
        """Cache ``node``'s counts, and its histogram if given, for the next layer (and
        measure them)."""
        self.hists[node] = (hist, counts)
        self.sizes[node] = 0 if hist is None else _measure(hist) + counts.nbytes
        self.peak = max(self.peak, sum(self.sizes.values()))

    def drop(self, node: int) -> tuple[EncryptedHistogram | None, I64] | None:
        self.sizes.pop(node, None)
        return self.hists.pop(node, None)

    def empty(self) -> EncryptedHistogram:
        n_feat = self.codes.shape[1]
        none = np.zeros((0, n_feat), np.uint8)
        width = self.public_key.ciphertext_bytes
        return build_histogram(
            self.public_key, none, self.n_slots, [kernels.empty(width) for _ in self.cts]
        )

    def local(self) -> Codes:
        """Bins of this shard's rows in slot order (the chunks' parts joined once)."""
        if len(self.local_codes) != 1:
            joined = np.concatenate(self.local_codes) if self.local_codes else self.codes[:0]
            self.local_codes = [joined]
        return self.local_codes[0]

    def mask(self, features: B8 | None) -> B8:
        """The candidate mask of a node with column draw ``features`` (None: the tree's)."""
        return self.allowed if features is None else self.allowed & features[:, None, None]

    def candidates(
        self,
        hist: EncryptedHistogram,
        counts: I64,
        features: B8 | None = None,
        also: B8 | None = None,
    ) -> NodeCandidates:
        """The node's candidates (``features``: the node's own column draw, if any; ``also``:
        more to offer) with their partial sums."""
        f, b, dl, left = node_candidates(counts, self.mask(features), self.tree_min_rows, also)
        data = candidate_sums(hist, f, b, dl, counts[:, -1])
        return NodeCandidates(f, b, dl, left, data)


def _measure(hist: EncryptedHistogram) -> int:
    """Bytes ``hist``'s ciphertexts take, in the form the kernel keeps them (fixed-width
    bytes for the native kernel, integer objects for the gmpy2 one)."""
    return hist.nbytes()


_SHARDS: dict[str, _Shard] = {}
#: The root's counts before :func:`shard_root` brings them.
_NOT_COUNTED = np.zeros((0, 0), np.int64)


def _get(token: str) -> _Shard:
    try:
        return _SHARDS[token]
    except KeyError:
        raise WorkerStateLost("this worker holds no shard for the token") from None


@stateful(Log.START)
def shard_open(
    token: str,
    scheme: str,
    key: bytes,
    codes: Codes,
    n_slots: int,
    min_rows: int,
    index: int,
    shards: int,
    sparse: bool | str = "auto",
) -> None:
    """Start shard ``index`` of ``shards`` for a host's run: key (of ``scheme``), binned rows,
    settings. ``sparse``: derive each feature's most frequent bin from the node total always
    (True), never (False) or where it pays (``"auto"``,
    :func:`~p2pboost.hetero.training.candidates.sparse_zero_bins`)."""
    if not 0 <= index < shards:
        raise InputError("shard index out of range")
    public_key = public_key_from_bytes(scheme, key)
    shard = _Shard(public_key, codes, n_slots, min_rows, index, shards)
    if sparse == "auto":
        shard.zero_bins = sparse_zero_bins(codes, n_slots)
    elif sparse:
        shard.zero_bins = sparse_zero_bins(codes, n_slots, share=0.0)
    else:
        shard.zero_bins = np.full(codes.shape[1], -1, dtype=np.int64)
    _SHARDS[token] = shard


@stateful(Log.APPEND)
def shard_tree(
    token: str,
    sample: I64,
    allowed: B8,
    planes: int = 1,
    min_rows: int | None = None,
    block: int = 1,
) -> None:
    """A tree begins: its sampled rows (slot order), candidate mask, the plaintexts per
    packed row, the fewest rows a child may have (None: the run's) and the rows per block of
    its layout (:func:`~p2pboost.hetero.training.layout.shard_block`); nothing else kept."""
    if block < 1:
        raise InputError("a layout block holds at least one row")
    shard = _get(token)
    shard.sample, shard.allowed, shard.block = sample, allowed, block
    shard.tree_min_rows = shard.min_rows if min_rows is None else min_rows
    shard.used = np.flatnonzero(allowed.reshape(allowed.shape[0], -1).any(axis=1))
    shard.slot_of_row = np.full(shard.codes.shape[0], -1, dtype=np.int64)
    shard.slot_of_row[sample] = np.arange(sample.size)
    width = shard.public_key.ciphertext_bytes
    shard.local_codes, shard.cts = [], tuple(kernels.empty(width) for _ in range(planes))
    shard.hists, shard.sizes, shard.peak = {}, {}, 0
    # The root's counts come with shard_root: the host counts them once while the gradient
    # chunks stream in, instead of every shard counting every row here, at the tree's start.
    shard.hists[0] = (shard.empty(), _NOT_COUNTED)


@stateful(Log.APPEND)
def shard_chunk(token: str, first: int, data: bytes) -> None:
    """This shard's ciphertexts of its slots from ``first`` on (bytes from the guest, cut by
    :func:`~p2pboost.hetero.training.layout.chunk_parts`): parse and range-check them
    (:class:`~p2pboost.exceptions.CodecError`),
    keep them, and add them to the root's partial histogram."""
    shard = _get(token)
    pk = shard.public_key
    planes = len(shard.cts)
    have = len(shard.cts[0])
    at = np.array([first], dtype=np.int64)
    if (
        int(slot_owner(at, shard.block, shard.shards)[0]) != shard.index
        or int(local_position(at, shard.block, shard.shards)[0]) != have
    ):
        raise InputError("chunk slots out of order for this shard")
    flat = kernels.prefer(CiphertextBatch.of(pk, data).residues(pk))
    if len(flat) % planes:
        raise InputError("a chunk's rows must each hold every plane")
    rows = len(flat) // planes
    cts = [  # a row's planes are consecutive
        flat if planes == 1 else flat.take(np.arange(p, len(flat), planes)) for p in range(planes)
    ]
    local = np.arange(have, have + rows, dtype=np.int64)
    slots = slots_of(local, shard.index, shard.block, shard.shards)
    codes = shard.codes[shard.sample[slots]]
    before = products_made()
    part = build_histogram(
        pk, codes, shard.n_slots, cts, features=shard.used, zero_bins=shard.zero_bins
    )
    shard.additions += products_made() - before
    root, counts = shard.hists[0]
    assert root is not None  # shard_tree starts it empty
    shard.hists[0] = (root.merge(part), counts)  # being built: kept (and measured) once whole
    shard.cts = tuple(
        Residues.concat([kept, new], kept.width) for kept, new in zip(shard.cts, cts, strict=True)
    )
    shard.local_codes.append(codes)


@stateful(Log.APPEND)
def shard_root(
    token: str, counts: I64, features: B8 | None = None, keep: bool = True
) -> NodeCandidates:
    """The root's candidates with this shard's partial sums (after every chunk); ``counts``:
    the rows per (feature, slot) of the whole sample, as the host counted them once
    (:func:`~p2pboost.hetero.training.candidates.node_counts`); ``keep``: the root's histogram
    stays cached for the first layer (else only its counts)."""
    shard = _get(token)
    if counts.shape != (shard.codes.shape[1], shard.n_slots):
        raise InputError("root counts of the wrong shape")  # before the root is taken
    shard.local()
    hist, _ = shard.hists.pop(0)
    assert hist is not None
    shard.keep(0, hist if keep else None, counts)
    return shard.candidates(hist, counts, features)


@stateful(Log.APPEND)
def shard_split(
    token: str,
    parent: int,
    small: int,
    big: int,
    rows: I64,
    features: tuple[B8 | None, B8 | None] = (None, None),
    keep: tuple[bool, bool] = (True, True),
    big_rows: I64 | None = None,
    derive: bool = False,
) -> tuple[NodeCandidates, NodeCandidates]:
    """Split ``parent``: ``rows`` are the smaller child's (all shards' rows, sampled). Builds
    the partial histogram of ``small`` from this shard's rows and returns both children's
    candidates (``features``: the small and the big child's own column draws, if any).

    ``derive``: the guest derives the big child's sums (its parent's minus its sibling's), so
    the small child's candidates are offered together with every candidate of the big child,
    which comes without sums; only counts are kept (no histogram is needed again).
    Otherwise the big child's histogram is the parent's minus the small one (both built from
    rows when the parent was not kept: then ``big_rows``, the larger child's rows, are
    needed) and ``keep`` says which children's histograms stay cached for the next layer.
    """
    shard = _get(token)
    held = shard.drop(parent)
    if held is None:
        raise InputError(f"no histogram of node {parent} in this shard (nor its counts)")
    parent_hist, parent_counts = held
    if parent_hist is None and big_rows is None and not derive:
        raise InputError(f"no histogram of node {parent} in this shard")
    small_hist, small_counts = _build(shard, rows)
    big_counts = parent_counts - small_counts
    if derive:
        shard.keep(small, None, small_counts)
        shard.keep(big, None, big_counts)
        also, big_left = offered(big_counts, shard.mask(features[1]), shard.tree_min_rows)
        return (
            shard.candidates(small_hist, small_counts, features[0], also),
            NodeCandidates(*listed(also, big_left), b""),
        )
    if parent_hist is not None:
        big_hist = parent_hist.subtract(small_hist)
    else:
        assert big_rows is not None
        big_hist, _ = _build(shard, big_rows)
    for node, hist, counts, wanted in (
        (small, small_hist, small_counts, keep[0]),
        (big, big_hist, big_counts, keep[1]),
    ):
        shard.keep(node, hist if wanted else None, counts)
    return (
        shard.candidates(small_hist, small_counts, features[0]),
        shard.candidates(big_hist, big_counts, features[1]),
    )


def _build(shard: _Shard, rows: I64) -> tuple[EncryptedHistogram, I64]:
    """A child's partial histogram from this shard's share of ``rows`` (all shards' rows of
    the child, sampled), and its counts over all of them."""
    slots = shard.slot_of_row[rows]
    if slots.size and slots.min() < 0:
        raise InputError("split rows outside the tree's sample")
    mine = local_position(
        slots[slot_owner(slots, shard.block, shard.shards) == shard.index],
        shard.block,
        shard.shards,
    )
    before = products_made()
    hist = build_histogram(
        shard.public_key,
        shard.local(),
        shard.n_slots,
        shard.cts,
        mine,
        features=shard.used,
        zero_bins=shard.zero_bins,
    )
    shard.additions += products_made() - before
    return hist, node_counts(shard.codes[rows], shard.n_slots)


@stateful(Log.APPEND)
def shard_retain(token: str, nodes: list[int]) -> None:
    """Drop the histograms of every node but ``nodes`` (the frontier nodes being split)."""
    shard = _get(token)
    for node in set(shard.hists) - set(nodes):
        shard.drop(node)


@stateful(Log.REWIND)
def shard_end_tree(token: str) -> tuple[int, int]:
    """The tree ended: free its ciphertexts and histograms (the run's settings stay); returns
    the ciphertext products of the tree's histogram builds in this shard and the peak bytes of
    its cached histograms."""
    shard = _get(token)
    shard.cts, shard.local_codes, shard.hists, shard.sizes = (), [], {}, {}
    shard.sample = shard.slot_of_row = np.zeros(0, np.int64)
    additions, shard.additions = shard.additions, 0
    peak, shard.peak = shard.peak, 0
    return additions, peak


@stateful(Log.CLEAR)
def shard_close(token: str) -> None:
    """The run ended: forget the shard (a no-op when it is already gone)."""
    _SHARDS.pop(token, None)
