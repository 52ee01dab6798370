"""Every message of the horizontal family (``homo``), as values (see
:mod:`p2pboost.protocols._messages`).

The server sends :class:`Command` s, each client answers with a :class:`Reply` (or nothing:
``model``, ``tree`` and ``done`` are one-way). Every aggregate the server collects has its own
request type (:class:`Collect` and its subclasses), carrying the round number and exactly the
arguments that aggregate needs; the client answers each with ``masked``.

The field rules bound what a peer can make us allocate or compute (list and map sizes, array
lengths, integer ranges); what depends on the run (which round is in progress, who the epoch's
members are, how many features a client holds) is checked by the role that holds that state:
the server's :class:`~p2pboost.homo._federation.Federation` or the client's
:class:`~p2pboost.homo.client.Client`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.secagg import KEY_BYTES, MAX_LENGTH, MAX_ROUND
from p2pboost.gbdt.params import MAX_BIN_LIMIT
from p2pboost.homo._quantile import KEY_BITS, MAX_WIDTH, RankQuery
from p2pboost.protocols._messages import (
    TAG,
    Array,
    Bytes,
    Float,
    Int,
    ListOf,
    MapOf,
    Message,
    Opaque,
    Optional,
    Str,
    decode,
    reject,
)

__all__ = [
    "MAX_CLIENTS",
    "MAX_FEATURES",
    "Advert",
    "Adverts",
    "Collect",
    "CollectBins",
    "CollectChildren",
    "CollectEval",
    "CollectGrid",
    "CollectMedian",
    "CollectRoot",
    "CollectStats",
    "Command",
    "Done",
    "Epoch",
    "FinishedTree",
    "Hello",
    "HomoMessage",
    "Joined",
    "Masked",
    "ModelHeader",
    "Ready",
    "Recover",
    "Recovered",
    "Reply",
    "Reveal",
    "Sealed",
    "Shares",
    "Signed",
    "Survivors",
    "Unmask",
    "decode_command",
]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
B8 = npt.NDArray[np.bool_]

#: Members of one epoch.
MAX_CLIENTS = 10_000
MAX_FEATURES = 1_000_000
#: Rows of the union a server may announce (bounds nothing it allocates; a grid's rows).
MAX_ROWS = 1 << 40
#: Boosting rounds and outputs (classes) a message may name.
MAX_ROUNDS = 1 << 24
MAX_OUTPUTS = 1 << 16
#: Nodes of a tree (depth at most 30) and of one layer.
MAX_NODES = 1 << 31
MAX_LAYER = 1 << 30
#: Key prefixes one binning round may ask about (256 counts each).
MAX_BIN_QUERIES = 1_000_000
#: What a median search runs over: the labels (the base margin) or a tree's residuals (L1).
MEDIAN_OF = ("labels", "residuals")
#: Fields of a tree's dict (checked in full by ``Tree.from_dict``).
MAX_TREE_FIELDS = 32
#: Sizes of what a client's key advert carries.
MAX_SIGNATURE = 160
MAX_CERT = 16384
#: A sealed pair of Shamir shares; one Shamir share (x: 4 bytes, y: 66 bytes).
MAX_SEALED = 512
SHARE_BYTES = 70

_VERSION = Int(0, 1 << 16)
_ROUND = Int(1, MAX_ROUND)
_EPOCH = Int(1, MAX_ROUND)
_CLIENT = Str(1, 255)
_CLIENTS = ListOf(_CLIENT, MAX_CLIENTS)
_KEY = Bytes(KEY_BYTES, KEY_BYTES)
_VECTOR = Array("uint64", max_len=MAX_LENGTH)
#: Fixed-point grid parameters (bits, magnitude): far beyond any double's exponent range.
_GRID_INT = Int(-4096, 4096)
_NODES = Array("int64", max_len=MAX_LAYER)
_PUBLIC = Bytes(2 * KEY_BYTES, 2 * KEY_BYTES)
_SIGNATURE = Bytes(0, MAX_SIGNATURE)
_CERT = Bytes(0, MAX_CERT)
_SEALED = Bytes(0, MAX_SEALED)
_SHARE = Bytes(SHARE_BYTES, SHARE_BYTES)
#: A tree as a map (checked in full by ``Tree.from_dict``).
_TREE = MapOf(Str(1, 64), Opaque("a tree's arrays"), MAX_TREE_FIELDS)


def _per_client(rule: Bytes) -> MapOf:
    """A map from client ids to values following ``rule``."""
    return MapOf(_CLIENT, rule, MAX_CLIENTS)


class HomoMessage(Message):
    FAMILY = "homo"


class Command(HomoMessage):
    """A message from the server to a client."""


class Reply(HomoMessage):
    """A message from a client to the server."""


# -- hello and keys ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello(Command, tag="hello"):
    """Server -> client: the protocol version, the digest of the settings every party must
    share and the settings themselves (so a client can name what differs), and the run id that
    binds every signature and key derivation to this run."""

    version: Annotated[int, _VERSION]
    digest: Annotated[str, Str(1, 128)]
    run: Annotated[str, Str(8, 128)]
    settings: Annotated[dict[str, str], MapOf(Str(1, 64), Str(0, 1024), 256)]


@dataclass(frozen=True)
class Joined(Reply, tag="joined"):
    """Client -> server (answers ``hello``): it agrees, and holds ``n_features`` features."""

    n_features: Annotated[int, Int(1, MAX_FEATURES)]


@dataclass(frozen=True)
class Epoch(Command, tag="epoch"):
    """Server -> client: a key epoch begins among ``members`` (sorted), with Shamir
    ``threshold``."""

    epoch: Annotated[int, _EPOCH]
    members: Annotated[list[str], _CLIENTS]
    threshold: Annotated[int, Int(1, MAX_CLIENTS)]


@dataclass(frozen=True)
class Advert(Reply, tag="advert"):
    """Client -> server (answers ``epoch``): its two X25519 public keys (mask, channel),
    signed with its certificate's key, and the certificate (PEM)."""

    public: Annotated[bytes, _PUBLIC]
    signature: Annotated[bytes, _SIGNATURE]
    cert: Annotated[bytes, _CERT]


@dataclass(frozen=True)
class Adverts(Command, tag="adverts"):
    """Server -> client: every member's advert, relayed (member -> public keys, signature,
    certificate)."""

    epoch: Annotated[int, _EPOCH]
    public: Annotated[dict[str, bytes], _per_client(_PUBLIC)]
    signature: Annotated[dict[str, bytes], _per_client(_SIGNATURE)]
    cert: Annotated[dict[str, bytes], _per_client(_CERT)]

    def check(self) -> str | None:
        if not set(self.public) == set(self.signature) == set(self.cert):
            return "public keys, signatures and certificates name different members"
        return None


@dataclass(frozen=True)
class Sealed(Reply, tag="sealed"):
    """Client -> server (answers ``adverts``): its Shamir shares of its self seed and mask
    key, sealed to each other member (member -> sealed bytes)."""

    shares: Annotated[dict[str, bytes], _per_client(_SEALED)]


@dataclass(frozen=True)
class Shares(Command, tag="shares"):
    """Server -> client: the shares the other members sealed to this client (sender ->
    sealed bytes)."""

    epoch: Annotated[int, _EPOCH]
    shares: Annotated[dict[str, bytes], _per_client(_SEALED)]


@dataclass(frozen=True)
class Ready(Reply, tag="ready"):
    """Client -> server (answers ``shares``): it holds its shares; the epoch's keys are set."""


# -- aggregation requests ------------------------------------------------------------------------


@dataclass(frozen=True)
class Collect(Command):
    """Server -> client: send this round's vector (the subclass says which)."""

    round: Annotated[int, _ROUND]


@dataclass(frozen=True)
class CollectStats(Collect, tag="stats"):
    """Server -> client: send your rows, label sum and label counts."""


@dataclass(frozen=True)
class CollectBins(Collect, tag="bins"):
    """Server -> client: for each (``feature``, key ``prefix``) of 8 * ``level`` bits, send
    the counts of your values in its 256 child ranges (federated binning)."""

    level: Annotated[int, Int(0, 7)]
    feature: Annotated[I64, Array("int64", max_len=MAX_BIN_QUERIES)]
    prefix: Annotated[U64, Array("uint64", max_len=MAX_BIN_QUERIES)]

    def check(self) -> str | None:
        return None if self.feature.shape == self.prefix.shape else "feature and prefix differ"


@dataclass(frozen=True)
class CollectGrid(Collect, tag="grid"):
    """Server -> client: a tree begins for boosting round ``it`` and ``output`` (-1: every
    output, a vector-leaf tree); send the one-hot of your largest gradient exponents (over
    the rows you sample this round with ``sample_seed``, by ``subsample`` or GOSS, whose
    multipliers count: 0, every row)."""

    it: Annotated[int, Int(0, MAX_ROUNDS)]
    output: Annotated[int, Int(-1, MAX_OUTPUTS)]
    sample_seed: Annotated[int, Int(0, 2**62)] = 0


@dataclass(frozen=True)
class CollectRoot(Collect, tag="root"):
    """Server -> client: the union's fixed-point grids for g and h (bits, magnitude) and rows;
    send the root's histogram."""

    g_bits: Annotated[int, _GRID_INT]
    g_mag: Annotated[int, _GRID_INT]
    h_bits: Annotated[int, _GRID_INT]
    h_mag: Annotated[int, _GRID_INT]
    n_rows: Annotated[int, Int(1, MAX_ROWS)]


@dataclass(frozen=True)
class CollectChildren(Collect, tag="children"):
    """Server -> client: the layer's splits (node ``nodes[i]`` on ``feature[i]`` at
    ``threshold_bin[i]``, missing values left if ``default_left[i]``, into ``left[i]`` and
    ``right[i]``) in a tree of ``n_nodes`` nodes; move your rows, then send the histograms of
    the nodes in ``build`` (the smaller child of each split)."""

    nodes: Annotated[I64, _NODES]
    feature: Annotated[I64, _NODES]
    threshold_bin: Annotated[I64, _NODES]
    default_left: Annotated[B8, Array("bool", max_len=MAX_LAYER)]
    left: Annotated[I64, _NODES]
    right: Annotated[I64, _NODES]
    n_nodes: Annotated[int, Int(1, MAX_NODES)]
    build: Annotated[I64, _NODES]

    def check(self) -> str | None:
        m = self.nodes.shape
        plan = (self.feature, self.threshold_bin, self.default_left, self.left, self.right)
        if any(a.shape != m for a in plan):
            return "split plan arrays differ in length"
        for name in ("nodes", "left", "right", "build"):
            a: I64 = getattr(self, name)
            if a.size and (a.min() < 0 or a.max() >= self.n_nodes):
                return f"{name} out of range"
        return None


@dataclass(frozen=True)
class CollectMedian(Collect, tag="median"):
    """Server -> client: one step of a median search (:mod:`p2pboost.homo._quantile`) over
    ``of``: ``labels`` (every row, one group, 0: the base margin) or ``residuals`` (label minus
    margin of the current tree's rows, grouped by its leaves: L1's leaf values). For each query
    (``group[i]``, ``prefix[i]``: the first ``depth`` bits of an order key) send the counts of
    your values in that group whose key starts so, by their next ``width`` bits. The first
    step of a residual search carries the ``tree`` (the core's tree as a map, leaf values 0:
    they are what the search is for), whose leaves group the rows; no other step does."""

    of: Annotated[str, Str(1, 16)]
    depth: Annotated[int, Int(0, KEY_BITS - 1)]
    width: Annotated[int, Int(1, MAX_WIDTH)]
    group: Annotated[I64, _NODES]
    prefix: Annotated[U64, Array("uint64", max_len=MAX_LAYER)]
    tree: Annotated[dict[str, Any] | None, Optional(_TREE)] = None

    def check(self) -> str | None:
        if self.of not in MEDIAN_OF:
            return f"a median of {self.of!r}, not of {' or '.join(MEDIAN_OF)}"
        if (self.tree is not None) != (self.of == "residuals" and self.depth == 0):
            return "a tree comes with the first step of a residual search, and only then"
        query = self.query()
        if problem := query.problem():
            return problem
        if self.group.size and int(self.group.max()) >= MAX_NODES:
            return "group out of range"
        return "too many counts asked" if query.length > MAX_LENGTH else None

    def query(self) -> RankQuery:
        return RankQuery(self.depth, self.width, self.group, self.prefix)


@dataclass(frozen=True)
class CollectEval(Collect, tag="eval"):
    """Server -> client: send your summed validation losses and validation rows."""


# -- the answer to every request, and recovery ---------------------------------------------------


@dataclass(frozen=True)
class Masked(Reply, tag="masked"):
    """Client -> server (answers a request): its vector for ``round``, masked twice: ``y``
    (with its self mask) and ``z`` (pairwise masks only). Unmasked runs: ``z`` in the clear,
    ``y`` nil."""

    round: Annotated[int, _ROUND]
    y: Annotated[U64 | None, Optional(_VECTOR)]
    z: Annotated[U64, _VECTOR]


@dataclass(frozen=True)
class Survivors(Command, tag="survivors"):
    """Server -> survivor: in ``round`` only ``survivors`` sent (``dropped`` did not); sign
    that set (Bonawitz's consistency check), before anything of the round is revealed."""

    round: Annotated[int, _ROUND]
    survivors: Annotated[list[str], _CLIENTS]
    dropped: Annotated[list[str], _CLIENTS]


@dataclass(frozen=True)
class Signed(Reply, tag="signed"):
    """Client -> server (answers ``survivors``): its signature, with its certificate's key, of
    the run id, epoch, round and survivor set."""

    signature: Annotated[bytes, _SIGNATURE]


@dataclass(frozen=True)
class Unmask(Command, tag="unmask"):
    """Server -> survivor: in ``round`` only ``survivors`` sent, as the ``signatures`` (signer
    -> signature of the set) show; reveal that round's keys."""

    round: Annotated[int, _ROUND]
    survivors: Annotated[list[str], _CLIENTS]
    dropped: Annotated[list[str], _CLIENTS]
    signatures: Annotated[dict[str, bytes], _per_client(_SIGNATURE)]


@dataclass(frozen=True)
class Reveal(Reply, tag="reveal"):
    """Client -> server (answers ``unmask``): its round self key and its round pair keys with
    each dropped client."""

    round: Annotated[int, _ROUND]
    self_key: Annotated[bytes, _KEY]
    pair_keys: Annotated[dict[str, bytes], _per_client(_KEY)]


@dataclass(frozen=True)
class Recover(Command, tag="recover"):
    """Server -> client: some survivors of ``round`` died before revealing; send your shares
    of their self seeds (``self_of``) and of the dropped clients' mask keys (``key_of``)."""

    round: Annotated[int, _ROUND]
    self_of: Annotated[list[str], _CLIENTS]
    key_of: Annotated[list[str], _CLIENTS]


@dataclass(frozen=True)
class Recovered(Reply, tag="recovered"):
    """Client -> server (answers ``recover``): the Shamir shares asked for, by client."""

    self_seeds: Annotated[dict[str, bytes], _per_client(_SHARE)]
    mask_keys: Annotated[dict[str, bytes], _per_client(_SHARE)]


# -- the model -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelHeader(Command, tag="model"):
    """Server -> client: the union's bin edges per feature and the base margin per output."""

    edges: Annotated[list[F64], ListOf(Array("float64", max_len=MAX_BIN_LIMIT), MAX_FEATURES)]
    base: Annotated[list[float], ListOf(Float(), MAX_OUTPUTS, min_len=1)]


@dataclass(frozen=True)
class FinishedTree(Command, tag="tree"):
    """Server -> client: the finished tree of boosting round ``it`` for ``output`` (the
    core's tree as a map, checked by ``Tree.from_dict``)."""

    it: Annotated[int, Int(0, MAX_ROUNDS)]
    output: Annotated[int, Int(-1, MAX_OUTPUTS)]
    tree: Annotated[dict[str, Any], _TREE]


@dataclass(frozen=True)
class Done(Command, tag="done"):
    """Server -> client: training ended; the best round found by early stopping (or nil), the
    training history (the aggregated metric per round, by evaluation set and metric) and the
    round loop's random generator state (JSON: it holds 128-bit integers), which every
    party's model file keeps (the same file everywhere; a warm start continues the draws);
    a differentially private model's privacy record (JSON; empty otherwise)."""

    best_iteration: Annotated[int | None, Optional(Int(0, MAX_ROUNDS))]
    history: Annotated[
        dict[str, dict[str, list[float]]],
        MapOf(Str(1, 64), MapOf(Str(1, 64), ListOf(Float(), MAX_ROUNDS), 16), 16),
    ]
    rng_state: Annotated[str, Str(0, 4096)] = ""
    privacy: Annotated[str, Str(0, 4096)] = ""


_COMMANDS: dict[str, type[Command]] = {
    c.TAG: c
    for c in (
        Hello,
        Epoch,
        Adverts,
        Shares,
        CollectStats,
        CollectBins,
        CollectGrid,
        CollectRoot,
        CollectChildren,
        CollectMedian,
        CollectEval,
        Survivors,
        Unmask,
        Recover,
        ModelHeader,
        FinishedTree,
        Done,
    )
}


def decode_command(obj: object, peer: str) -> Command:
    """Validate ``obj`` as any of the server's commands (a client may get each at any time;
    whether it is expected now is the client's state to judge)."""
    tag = obj.get(TAG) if isinstance(obj, dict) else None
    cls = _COMMANDS.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise reject(peer, f"unknown command {tag!r}")
    return decode(obj, cls, peer)
