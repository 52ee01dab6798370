"""Federated weight of evidence and information value: one encrypted pass over the labels.

Why: a credit team screens features by information value before it trains, on every party's
features, while the labels stay with the guest and the host features with their hosts. The
counts WOE and IV need are per-bin event counts (:mod:`p2pboost.gbdt.woe`), and an event count
is a sum of label indicators over the rows of a bin: the same encrypted-histogram sum a host
makes of gradients in training, with a 0/1 label in place of a packed gradient. So::

    guest                                                host (each)
    -----                                                ----
                                                    <-   hello: rows, features
    setup: public key, max_bin                      ->   quantile bins (training's BinMapper)
    labels: Enc(y_i) of every aligned row, in       ->   per feature and bin: the product of
            chunks (each row encrypted once,             its rows' ciphertexts, the plaintext
            the same ciphertexts to every host)          row count beside it
                                                    <-   counts: Enc(events), rows per bin
    decrypt, check, WOE per bin, IV per feature
    (own features in plaintext); selection by IV
    over every party's features
    kept: this host's kept column indices           ->
                                                    <-   bye

Exact: event counts are integers, decrypted exactly, so every WOE and IV equals the plaintext
computation on the joined data (the functions are the core's, on equal counts).

What each side learns: the guest, for each host feature, its row count and event count per bin
(the per-bin event rates; not the host's thresholds, which stay with the host: host bins are
known to the guest by their codes only); the host, ciphertexts and the indices of its own kept
features (never a WOE, an IV, a label or another party's result). Everything a host sends is
checked: shapes, row counts summing to the rows, ciphertexts in ``(0, modulus)`` under the
guest's key, and every decrypted count within ``[0, rows of its bin]`` with each feature's
events summing to the guest's own event total (which also range-checks every OU decryption:
a value planted at or above the key's ``p`` cannot pass). A violation raises
:class:`~p2pboost.exceptions.RemoteProtocolError` naming the peer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.additive import DEFAULT_KEY_BITS, CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.histogram import EncryptedHistogram, build_histogram
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, make_keypair
from p2pboost.exceptions import CodecError, InputError, KeyMismatchError
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.names import check_names
from p2pboost.gbdt.woe import SMOOTHING, Monotone, WoeBins, bin_counts, select_by_iv, woe_bins
from p2pboost.hetero._woe_messages import (
    VERSION,
    WoeBye,
    WoeCounts,
    WoeHello,
    WoeKept,
    WoeLabels,
    WoeSetup,
)
from p2pboost.net._blocking import run_with_node
from p2pboost.net.node import Node, Session
from p2pboost.protocols._messages import recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = [
    "CHUNK_ROWS",
    "SESSION",
    "FeatureWoe",
    "HostWoe",
    "WoeResult",
    "abinning_guest",
    "abinning_host",
    "binning_guest",
    "binning_host",
    "guest_woe",
    "host_woe",
]

I64 = npt.NDArray[np.int64]
logger = logging.getLogger("p2pboost.hetero.woe")

#: Rows of encrypted labels per message.
CHUNK_ROWS = 4096
#: The channel of the protocol in its session.
CHANNEL = "woe"
#: The session the node-level calls (and ``p2pboost binning``) open.
SESSION = "p2pboost-binning"


@dataclass(frozen=True, slots=True)
class FeatureWoe:
    """One feature's bins, WOE and IV as the guest computed them.

    ``party``: the guest's name or the host's id; ``feature``: the guest's column name, or for
    a host feature ``#j`` (its column index: host names never leave the host); ``bins``: the
    :class:`~p2pboost.gbdt.woe.WoeBins` (a host feature's ``edges`` are value-bin codes, its
    thresholds being private to the host); ``kept``: whether the selection keeps it.
    """

    party: str
    feature: str
    index: int
    bins: WoeBins
    kept: bool

    @property
    def iv(self) -> float:
        return self.bins.iv


@dataclass(frozen=True, slots=True)
class WoeResult:
    """The guest's result: every party's features, the guest's first, then host by host."""

    features: tuple[FeatureWoe, ...]

    def kept(self, party: str) -> list[str]:
        """The kept features of ``party`` (names for the guest, ``#j`` for a host)."""
        return [f.feature for f in self.features if f.party == party and f.kept]

    def iv(self) -> dict[tuple[str, str], float]:
        """IV per ``(party, feature)``."""
        return {(f.party, f.feature): f.iv for f in self.features}


@dataclass(frozen=True, slots=True)
class HostWoe:
    """A host's result: its own kept features (names, and their column indices)."""

    kept: tuple[str, ...]
    kept_index: I64
    feature_names: tuple[str, ...]


def _check_selection(threshold: float | None, top_k: int | None) -> None:
    if threshold is not None and not (
        isinstance(threshold, int | float) and np.isfinite(threshold)
    ):
        raise InputError(f"threshold must be a finite number, got {threshold!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise InputError(f"top_k must be a non-negative integer, got {top_k!r}")


async def guest_woe(
    session: Session,
    hosts: Sequence[str],
    X: Any,
    y: Any,
    *,
    max_bin: int = 32,
    threshold: float | None = None,
    top_k: int | None = None,
    monotone: Monotone = None,
    smoothing: float = SMOOTHING,
    feature_names: Sequence[str] | None = None,
    party: str = "guest",
    keys: tuple[AnyPublicKey, AnyPrivateKey] | None = None,
    scheme: str = "paillier",
    key_bits: int = DEFAULT_KEY_BITS,
    allow_insecure_key: bool = False,
    executor: Executor | None = None,
    workers: int | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> WoeResult:
    """WOE and IV of every feature of the guest (``X``, labels ``y``: 1 is the event) and of
    ``hosts`` (rows aligned with the guest's), binned with ``max_bin`` quantile bins as in
    training; ``monotone`` merges value bins (:func:`~p2pboost.gbdt.woe.woe_bins`).

    Selection over all parties' features together: IV at least ``threshold`` and/or among the
    ``top_k`` largest (:func:`~p2pboost.gbdt.woe.select_by_iv`; neither: every feature is
    kept); each host then learns its own kept features only. ``X`` may be None (a guest that
    holds only the labels). ``keys`` reuses a key pair instead of generating one of ``scheme``
    and ``key_bits``; encryption and decryption run on ``executor`` (or an own pool of
    ``workers`` processes).
    """
    if not hosts or len(set(hosts)) != len(hosts):
        raise InputError("give at least one host, each once")
    if not (isinstance(chunk_rows, int) and chunk_rows >= 1):
        raise InputError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    _check_selection(threshold, top_k)
    labels = np.asarray(y).reshape(-1)
    mine = Features.from_user(
        np.empty((labels.size, 0)) if X is None else X,
        feature_names=feature_names,
        allow_no_features=True,
    )
    m = mine.n_features
    names = check_names(mine.names, m) or [f"x{j}" for j in range(m)]
    if mine.n_rows != labels.size:
        raise InputError(f"X has {mine.n_rows} rows but y has {labels.size} labels")
    mapper = BinMapper(max_bin).fit(mine)
    data = mapper.transform(mine)
    events, non_events = bin_counts(data.codes, labels, data.n_slots)  # checks 0/1 labels
    y01 = labels.astype(np.int64)
    n_rows, n_events = int(y01.size), int(y01.sum())
    if n_events in (0, n_rows):
        raise InputError("WOE needs at least one event and one non-event")

    channels = {h: session.channel(h, CHANNEL) for h in hosts}
    hellos = await gather_or_cancel(*(recv(ch, WoeHello) for ch in channels.values()))
    for host, hello in zip(hosts, hellos, strict=True):
        if hello.version != VERSION:
            raise reject(host, "unsupported protocol version")
        if hello.n_rows != n_rows:
            raise InputError(f"host {host!r} has {hello.n_rows} rows, the guest {n_rows}")
    if keys is None:
        keys = await asyncio.to_thread(
            make_keypair, scheme, key_bits, allow_insecure=allow_insecure_key
        )
    public_key, private_key = keys
    setup = WoeSetup(VERSION, public_key, max_bin)
    await gather_or_cancel(*(send(ch, setup) for ch in channels.values()))

    async with CryptoEngine(public_key, private_key, executor=executor, workers=workers) as engine:
        await _send_labels(engine, list(channels.values()), y01, chunk_rows)
        answers = await gather_or_cancel(*(recv(ch, WoeCounts) for ch in channels.values()))
        opened = []
        for host, hello, counts in zip(hosts, hellos, answers, strict=True):
            opened.append(await _open(engine, host, hello, counts, public_key, n_events, max_bin))

    def bins(e: I64, ne: I64, cuts: npt.NDArray[np.float64]) -> WoeBins:
        return woe_bins(e, ne, cuts, monotone=monotone, smoothing=smoothing)

    features: list[tuple[str, str, int, WoeBins]] = []
    for f, (name, cuts) in enumerate(zip(names, mapper.edges, strict=True)):
        keep = np.r_[np.arange(cuts.size + 1), mapper.missing_bin]  # value bins, then missing
        features.append((party, name, f, bins(events[f, keep], non_events[f, keep], cuts)))
    for host, (n_value, ev, rows) in zip(hosts, opened, strict=True):
        at = 0
        for j, nv in enumerate(n_value.tolist()):
            e, r = ev[at : at + nv + 1], rows[at : at + nv + 1]
            at += nv + 1
            codes = np.arange(nv - 1, dtype=np.float64)  # value-bin codes stand for thresholds
            features.append((host, f"#{j}", j, bins(e, r - e, codes)))
    ivs = np.array([b.iv for *_, b in features], dtype=np.float64)
    keep_all = threshold is None and top_k is None
    chosen = set(
        range(ivs.size)
        if keep_all
        else select_by_iv(ivs, threshold=threshold, top_k=top_k).tolist()
    )
    result = WoeResult(
        tuple(FeatureWoe(p, name, j, b, i in chosen) for i, (p, name, j, b) in enumerate(features))
    )
    for host, ch in channels.items():
        own = [f.index for f in result.features if f.party == host and f.kept]
        await send(ch, WoeKept(np.asarray(own, dtype=np.int64)))
    await gather_or_cancel(*(recv(ch, WoeBye) for ch in channels.values()))
    return result


async def _send_labels(
    engine: CryptoEngine, channels: list[Any], y01: I64, chunk_rows: int
) -> None:
    """Each row's label encrypted once, the same chunk to every host; the next chunk is
    encrypted while this one is on its way (the task never outlives the call)."""
    starts = list(range(0, y01.size, chunk_rows))

    def encrypt(start: int) -> asyncio.Future[list[Any]]:
        return asyncio.ensure_future(engine.encrypt_batch(y01[start : start + chunk_rows].tolist()))

    pending = encrypt(starts[0])
    try:
        for i, start in enumerate(starts):
            cts = await pending
            if i + 1 < len(starts):
                pending = encrypt(starts[i + 1])
            msg = WoeLabels(start, CiphertextBatch.from_ciphertexts(engine.public_key, cts))
            await gather_or_cancel(*(send(ch, msg) for ch in channels))
    finally:
        if not pending.done():
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)


async def _open(
    engine: CryptoEngine,
    host: str,
    hello: WoeHello,
    counts: WoeCounts,
    public_key: AnyPublicKey,
    n_events: int,
    max_bin: int,
) -> tuple[I64, I64, I64]:
    """A host's counts, checked and decrypted: ``(n_value, events, rows)``."""
    if counts.n_value.size and int(counts.n_value.max()) > max_bin:
        raise reject(host, f"counts: more value bins than max_bin {max_bin}")
    if counts.n_value.size != hello.n_features:
        raise reject(
            host, f"counts: {counts.n_value.size} features, it announced {hello.n_features}"
        )
    bounds = np.r_[0, np.cumsum(counts.n_value + 1)]
    rows = counts.rows
    if np.any(np.add.reduceat(rows, bounds[:-1]) != hello.n_rows):
        raise reject(host, "counts: a feature's rows per bin do not sum to its rows")
    try:
        cts = counts.events.ciphertexts(public_key)
    except (CodecError, KeyMismatchError) as exc:
        raise reject(host, f"counts: {exc}") from exc
    plain = await engine.decrypt_batch(cts)
    # Compare as Python integers first: a value planted out of range may not fit an int64.
    if any(not 0 <= int(m) <= int(r) for m, r in zip(plain, rows.tolist(), strict=True)):
        raise reject(host, "counts: an event count is outside [0, rows of its bin]")
    events = np.asarray([int(m) for m in plain], dtype=np.int64)
    if np.any(np.add.reduceat(events, bounds[:-1]) != n_events):
        raise reject(host, "counts: a feature's events do not sum to the guest's events")
    return counts.n_value, events, rows


async def host_woe(
    session: Session,
    guest: str,
    X: Any,
    *,
    feature_names: Sequence[str] | None = None,
) -> HostWoe:
    """Take part in :func:`guest_woe` as a host with features ``X`` (rows aligned with the
    guest's). Bins its features with the guest's ``max_bin`` (training's quantile bins), sums
    the encrypted labels per bin, and returns the names of its own features the guest's
    selection keeps; nothing else of the result reaches a host."""
    features = Features.from_user(X, feature_names=feature_names, sparse=True)
    n_rows, n_features = features.n_rows, features.n_features
    names = check_names(features.names, n_features) or [f"x{j}" for j in range(n_features)]
    if n_features == 0:
        raise InputError("a host needs at least one feature")
    ch = session.channel(guest, CHANNEL)
    await send(ch, WoeHello(VERSION, n_rows, n_features))
    setup = await recv(ch, WoeSetup)
    if setup.version != VERSION:
        raise reject(guest, "unsupported protocol version")
    key = setup.key
    mapper = await asyncio.to_thread(BinMapper(setup.max_bin).fit, features)
    data = await asyncio.to_thread(mapper.transform, features)
    bins = np.ascontiguousarray(data.codes.T)
    # Each chunk's histogram is built as it arrives (while the guest encrypts the next) and
    # merged into the total: cells of disjoint row sets multiply.
    hist: EncryptedHistogram | None = None
    got = 0
    while got < n_rows:
        msg = await recv(ch, WoeLabels)
        n = len(msg.ct)
        if msg.start != got or not 0 < n <= n_rows - got:
            raise reject(guest, f"labels: rows {msg.start}+{n}, expected from {got}")
        try:
            labels = msg.ct.residues(key)
        except (CodecError, KeyMismatchError) as exc:
            raise reject(guest, f"labels: {exc}") from exc
        part = await asyncio.to_thread(
            build_histogram, key, bins[got : got + n], data.n_slots, [labels]
        )
        hist = part if hist is None else await asyncio.to_thread(hist.merge, part)
        got += n
    assert hist is not None  # n_rows >= 1
    n_value = mapper.n_bins
    cells = np.concatenate(
        [
            np.r_[np.arange(nv) + f * data.n_slots, f * data.n_slots + mapper.missing_bin]
            for f, nv in enumerate(n_value.tolist())
        ]
    ).astype(np.int64)
    events = CiphertextBatch.of(key, hist.planes[0].take(cells).data)
    rows = hist.counts.reshape(-1)[cells].astype(np.int64)
    await send(ch, WoeCounts(n_value, rows, events))
    kept = await recv(ch, WoeKept)
    if kept.features.size and int(kept.features.max()) >= n_features:
        raise reject(guest, f"kept: a feature index past this host's {n_features}")
    await send(ch, WoeBye())
    index = kept.features.astype(np.int64)
    return HostWoe(tuple(names[i] for i in index.tolist()), index, tuple(names))


# -- over a node ---------------------------------------------------------------------------------


async def abinning_guest(
    node: Node, hosts: Sequence[str], X: Any, y: Any, *, session_id: str = SESSION, **kwargs: Any
) -> WoeResult:
    """:func:`guest_woe` in session ``session_id`` of ``node`` (running); ``kwargs`` are
    :func:`guest_woe`'s."""
    async with node.session(session_id, peers=list(hosts)) as session:
        return await guest_woe(session, hosts, X, y, **kwargs)


def binning_guest(node: Node, hosts: Sequence[str], X: Any, y: Any, **kwargs: Any) -> WoeResult:
    """Blocking :func:`abinning_guest`: starts ``node``, runs, closes it."""
    return run_with_node(node, abinning_guest(node, hosts, X, y, **kwargs))


async def abinning_host(
    node: Node,
    guest: str,
    X: Any,
    *,
    session_id: str = SESSION,
    feature_names: Sequence[str] | None = None,
) -> HostWoe:
    """:func:`host_woe` in session ``session_id`` of ``node`` (running)."""
    async with node.session(session_id, peers=[guest]) as session:
        return await host_woe(session, guest, X, feature_names=feature_names)


def binning_host(node: Node, guest: str, X: Any, **kwargs: Any) -> HostWoe:
    """Blocking :func:`abinning_host`: starts ``node``, runs, closes it."""
    return run_with_node(node, abinning_host(node, guest, X, **kwargs))
