"""A host's ciphertext work, in row shards that stay in their worker process for a tree.

A host cuts each tree's sampled rows into ``W`` shards, one per worker of a
:class:`~p2pboost.workers.PinnedPool`: slot ``s`` of the guest's gradient stream (the
``s``-th sampled row) belongs to shard ``s % W``. A shard receives its rows' ciphertexts once,
as bytes, and keeps them in its process for the whole tree, together with the *partial*
histograms (over its own rows) of the frontier nodes. Per layer it is sent the rows of the
smaller child of a split and returns, for both children, the candidates and its partial left
sum of each as ciphertext bytes; the host multiplies the shards' partial sums of a candidate
(ciphertext addition) when it compresses them (:func:`~p2pboost.crypto.compress.compress_parts`).
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

Candidate enumeration (:func:`node_candidates`) follows the plaintext core's split rule exactly
(:func:`p2pboost.gbdt.split.find_best_splits`): candidate ``(feature, bin, direction)`` sends
value bins ``<= bin`` left, and missing values left for direction 0 ("missing left") or right
for direction 1. Three kinds of candidates are *not* sent, none of which can change the core's
choice:

* a side with fewer than ``min_rows`` rows (with ``min_rows >= 1``, an empty side: its gain is
  exactly 0 or the candidate is invalid, and a split needs a gain above ``MIN_GAIN > 0``;
  more generally, fewer rows than ``min_samples_leaf`` or than the tree's hessian bound
  allows for ``min_child_weight``: :func:`~p2pboost.gbdt.split.min_child_rows`);
* direction 1 of a feature without missing values in the node (same sums as direction 0,
  which the core prefers on ties);
* a bin ``t > 0`` holding no row of the node: same left set (hence same sums and gain) as
  ``t - 1``, which the core prefers on ties.

That also cuts the guest's decryptions.
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
from p2pboost.workers import Log, stateful

__all__ = [
    "NodeCandidates",
    "candidate_sums",
    "chunk_parts",
    "node_candidates",
    "node_counts",
    "shard_block",
    "shard_chunk",
    "shard_close",
    "shard_end_tree",
    "shard_open",
    "shard_retain",
    "shard_root",
    "shard_split",
    "shard_tree",
    "shards_reached",
    "sparse_zero_bins",
]

I64 = npt.NDArray[np.int64]
B8 = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.unsignedinteger[Any]]


@dataclass(frozen=True, eq=False)
class NodeCandidates:
    """Split candidates of one node, in (feature, bin, direction) order, with one shard's
    partial left sums: ``sums`` holds a candidate's ciphertexts (one per plane of a packed
    row) after another's, fixed-width big-endian."""

    feature: I64
    bin: I64
    default_left: B8
    counts: I64
    sums: bytes

    def __len__(self) -> int:
        return int(self.feature.size)


def node_counts(codes: Codes, n_slots: int) -> I64:
    """Rows per (feature, slot) of ``codes`` ``(rows, features)``: shape ``(features, n_slots)``."""
    n_feat = codes.shape[1]
    keys = codes.astype(np.int64) + np.arange(n_feat, dtype=np.int64) * n_slots
    return np.bincount(keys.ravel(), minlength=n_feat * n_slots).reshape(n_feat, n_slots)


def node_candidates(
    counts: I64, allowed: B8, min_rows: int, also: B8 | None = None
) -> tuple[I64, I64, B8, I64]:
    """``(feature, bin, default_left, left_count)`` of a node's candidates (module docstring).

    ``counts`` ``(features, n_slots)`` are the node's rows per bin, the last slot for missing
    values; ``allowed`` ``(features, n_slots - 1, 2)`` is the core's candidate mask
    (:func:`~p2pboost.gbdt.split.candidate_mask` and column sampling). ``min_rows <= 0``: a
    differentially private run's candidates, every one of ``allowed`` (a choice among the
    candidates the data leave would depend on the data: :mod:`p2pboost.gbdt.privacy`).
    ``also``: candidates offered as well (a split's smaller child also carries its sibling's,
    whose sums the guest derives from them: :func:`shard_split`).
    """
    ok, left = _offered(counts, allowed, min_rows)
    if also is not None:
        ok |= also
    return _listed(ok, left)


def _listed(ok: B8, left: I64) -> tuple[I64, I64, B8, I64]:
    """The candidates of mask ``ok`` as ``(feature, bin, default_left, left_count)``."""
    f, b, d = np.nonzero(ok)  # C order: sorted by (feature, bin, direction)
    return (
        f.astype(np.int64),
        b.astype(np.int64),
        d == 0,
        left[f, b, d].astype(np.int64),
    )


def _offered(counts: I64, allowed: B8, min_rows: int) -> tuple[B8, I64]:
    """The mask of a node's candidates ``(features, n_slots - 1, 2)`` and every candidate's
    left row count (same shape)."""
    n_feat, n_slots = counts.shape
    if allowed.shape != (n_feat, n_slots - 1, 2):
        raise ValueError("candidate mask does not match the histogram")
    missing = counts[:, -1]
    total = counts.sum(axis=1)
    cum = np.cumsum(counts[:, :-1], axis=1)  # value bins 0..t
    t = np.arange(n_slots - 1)[None, :]
    new_set = (t == 0) | (counts[:, :-1] > 0)
    left = np.stack([cum + missing[:, None], cum], axis=-1)  # (F, T, 2): dir 0, dir 1
    if min_rows <= 0:
        return allowed.copy(), left
    ok = allowed & new_set[..., None]
    ok &= (left >= min_rows) & (total[:, None, None] - left >= min_rows)
    ok[..., 1] &= (missing > 0)[:, None]
    return ok, left


def candidate_sums(
    hist: EncryptedHistogram, feature: I64, bin_: I64, default_left: B8, missing: I64
) -> bytes:
    """Encrypted left sums of candidates over the rows of ``hist``: each candidate's
    ciphertexts, one per plane, after the previous candidate's, as fixed-width bytes.

    Prefix sums over the value bins (:meth:`EncryptedHistogram.cumulative`), times the missing
    slot for "missing left" where the node (``missing[f]``: all shards' rows) has missing values:
    one :func:`~p2pboost.crypto.kernels.segment_products` call per plane over the prefix sums
    and the cells side by side, a candidate being a segment of one or two of them.
    """
    mod, n_slots = hist.public_key.modulus, hist.n_bins
    width = hist.public_key.ciphertext_bytes
    n = int(feature.size)
    cells = feature * n_slots + bin_
    need = default_left & (missing[feature] > 0)
    sizes = 1 + need.astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    index = np.empty(int(offsets[-1]), dtype=np.int64)
    index[offsets[:-1]] = cells
    n_cells = hist.n_features * n_slots
    index[offsets[:-1][need] + 1] = n_cells + feature[need] * n_slots + n_slots - 1
    cumulative = hist.cumulative()
    planes = [
        kernels.segment_products(mod, Residues.concat([c, p], width), index, offsets)
        for c, p in zip(cumulative.planes, hist.planes, strict=True)
    ]
    if len(planes) == 1:
        return planes[0].data
    rows = [np.frombuffer(p.data, dtype=np.uint8).reshape(n, width) for p in planes]
    return np.stack(rows, axis=1).tobytes()  # a candidate's planes are consecutive


#: The most rows a block of a tree's shard layout holds (:func:`shard_block`).
MAX_BLOCK = 1024


def shard_block(rows: int, shards: int) -> int:
    """Rows per block of a tree's shard layout: the tree's slots are dealt to the shards in
    blocks of this many, in turn (block-cyclic, as ScaLAPACK lays out matrices).

    Why blocks: a chunk of the gradient stream then reaches only the shards of the blocks it
    spans, one task each, instead of every shard (a 16,384-row chunk over 128 workers: about
    20 tasks, not 128, each with more rows). Why at most ``rows / (8 shards)``: every shard
    holds at least 8 blocks spread over the whole sample, so any node whose rows fill a run of
    the sample as long as ``shards`` blocks is built evenly by all shards, whatever the rows'
    order in the file. Why at most :data:`MAX_BLOCK`: a chunk of the stream (2,048 rows or
    more by default) then reaches at least two shards, and consecutive chunks the next ones, so
    the stream keeps every shard busy rather than filling one shard's blocks at a time. One
    row per block is plain round-robin.

    Why every shard gets the same number of blocks (the size is shrunk until the sample is a
    whole number of rounds, only the last block short): a shard's rows set its share of the
    root and of every node built from rows spread over the sample, and each split waits for
    its slowest shard. With the largest block allowed, the rounds did not come out even: a
    100,000-row tree on 8 shards was 97.7 blocks of 1,024, so two shards held 13 blocks and
    six held 12, and the busiest shard had 6.5 % more rows than the mean (10 % on 64 shards,
    up to 12.5 % in general); now it has at most a few rows more (0.2 % or less on these).
    """
    largest = max(1, min(MAX_BLOCK, rows // (8 * shards)))
    per_shard = -(-rows // (largest * shards))  # blocks each shard holds, rounded up
    return max(1, -(-rows // (per_shard * shards)))


def shards_reached(start: int, stop: int, block: int, shards: int) -> int:
    """How many shards the chunk of slots ``start .. stop - 1`` reaches in that layout (the
    parts :func:`chunk_parts` makes of it): one per block it spans, at most every shard."""
    return min(shards, (stop - 1) // block - start // block + 1) if stop > start else 0


def _owner(slots: I64, block: int, shards: int) -> I64:
    """The shard of each slot."""
    return (slots // block) % shards


def _local(slots: I64, block: int, shards: int) -> I64:
    """Each slot's position among its shard's slots."""
    return slots // (block * shards) * block + slots % block


def _slots_of(local: I64, index: int, block: int, shards: int) -> I64:
    """The slots at positions ``local`` of shard ``index`` (the inverse of :func:`_local`)."""
    return (local // block * shards + index) * block + local % block


def chunk_parts(
    start: int, data: bytes, width: int, shards: int, block: int = 1
) -> list[tuple[int, int, bytes]]:
    """Cut a chunk of ciphertexts (slots ``start, start + 1, ...``, ``width`` bytes each) into
    the shards' parts in the layout of :func:`shard_block`: ``(shard, first slot, bytes of the
    shard's slots from the first on, in order)``, for the shards the chunk reaches.

    Runs on the event loop: one numpy gather of the chunk, no per-ciphertext Python.
    """
    n = len(data) // width
    if shards == 1:
        return [(0, start, bytes(data))] if n else []
    slots = np.arange(start, start + n, dtype=np.int64)
    owner = _owner(slots, block, shards)
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=shards)
    rows = np.frombuffer(data, dtype=np.uint8).reshape(n, width)[order]
    parts, at = [], 0
    for shard in np.flatnonzero(counts).tolist():
        end = at + int(counts[shard])
        parts.append((shard, int(slots[order[at]]), rows[at:end].tobytes()))
        at = end
    return parts


#: A feature's most frequent bin is derived from the node total (not summed) when it holds at
#: least this share of the rows: then it saves more additions than its share of the total costs.
SPARSE_SHARE = 0.5


def sparse_zero_bins(codes: Codes, n_slots: int, share: float = SPARSE_SHARE) -> I64:
    """Per feature, the bin to derive from the node total instead of summing it (sparse data:
    SecureBoost+ section 6), or -1.

    Summing a node's histogram costs one ciphertext addition per row and feature. Deriving the
    most frequent bin of a feature as the node total minus the feature's other bins skips that
    bin's rows, at the price of the node total (one addition per row, shared by every such
    feature) and a few products and one inversion per feature. So a feature takes part when
    its most frequent bin holds at least :data:`SPARSE_SHARE` of the rows, and only if the
    features that do save more rows together than the total costs (``share=0``: every
    feature). Trees do not change: the derived cell is exactly the product of that bin's
    ciphertexts.
    """
    n_rows, n_features = codes.shape
    zero = np.full(n_features, -1, dtype=np.int64)
    if n_rows == 0:
        return zero
    shares = np.zeros(n_features)
    for f in range(n_features):
        counts = np.bincount(codes[:, f], minlength=n_slots)
        zero[f] = int(counts.argmax())
        shares[f] = counts[zero[f]] / n_rows
    if share <= 0.0:  # asked for every feature
        return zero
    sparse = shares >= share
    if shares[sparse].sum() <= 1.0:
        return np.full(n_features, -1, dtype=np.int64)
    return np.where(sparse, zero, -1)


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
    #: Rows per block of this tree's layout (:func:`shard_block`).
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
    (True), never (False) or where it pays (``"auto"``, :func:`sparse_zero_bins`)."""
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
    its layout (:func:`shard_block`); nothing else kept."""
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
    shard.hists[0] = (shard.empty(), node_counts(shard.codes[sample], shard.n_slots))


@stateful(Log.APPEND)
def shard_chunk(token: str, first: int, data: bytes) -> None:
    """This shard's ciphertexts of its slots from ``first`` on (bytes from the guest, cut by
    :func:`chunk_parts`): parse and range-check them (:class:`~p2pboost.exceptions.CodecError`),
    keep them, and add them to the root's partial histogram."""
    shard = _get(token)
    pk = shard.public_key
    planes = len(shard.cts)
    have = len(shard.cts[0])
    at = np.array([first], dtype=np.int64)
    if (
        int(_owner(at, shard.block, shard.shards)[0]) != shard.index
        or int(_local(at, shard.block, shard.shards)[0]) != have
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
    slots = _slots_of(local, shard.index, shard.block, shard.shards)
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
def shard_root(token: str, features: B8 | None = None, keep: bool = True) -> NodeCandidates:
    """The root's candidates with this shard's partial sums (after every chunk); ``keep``:
    the root's histogram stays cached for the first layer (else only its counts)."""
    shard = _get(token)
    shard.local()
    hist, counts = shard.hists.pop(0)
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
        also, big_left = _offered(big_counts, shard.mask(features[1]), shard.tree_min_rows)
        return (
            shard.candidates(small_hist, small_counts, features[0], also),
            NodeCandidates(*_listed(also, big_left), b""),
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
    mine = _local(
        slots[_owner(slots, shard.block, shard.shards) == shard.index], shard.block, shard.shards
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
