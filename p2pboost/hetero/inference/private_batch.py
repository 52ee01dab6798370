"""Private batch prediction: the guest learns each row's score, nothing about host decisions.

::

    guest                                             host k (hosts in order 1 .. m)
    -----                                             ------
    ctl: PrivatePredict(key, padded trees, k's ranges) ->
                                                 <-   PrivateReady(seal key of host k)
    per chunk of rows:
      Enc(slot values) as PrivateSlots           ->   host 1 keeps the slots its splits allow
                                                 <-   PrivateRelay(sealed to host 2)
      relays the sealed bytes                    ->   host 2 keeps its slots ... (sealed on)
                                                 <-   PrivateScores: host m sums, per row and
    decrypts one total per row and output               output column, and re-randomises
    column

The arithmetic (padded trees, slot values, selections, sealing) is in
:mod:`p2pboost.hetero.inference.private`. What each party learns:

* a **host** sees ciphertexts under the guest's key (semantically secure: nothing), the
  previous host's selection sealed to it (ciphertexts again), and, once per request, the
  slot range of each of its own splits, that is each split's place in its tree's padded
  layout (depth and left/right turns from the root), the number of trees and the model's
  depth. Not one guest decision, leaf weight or score crosses to a host in the clear.
* the **guest** decrypts, per row and output column, the sum of the tree weights of that
  row: the score, no per-tree share, no bit. The last host re-randomises every total, so the
  guest cannot tell which of the ciphertexts it sent were kept; intermediate selections pass
  the guest sealed, so it never holds one of its own ciphertexts as a host left it.

The cost: ``trees x 2**depth x outputs`` encryptions per row at the guest (rows x padded
leaves), as many re-randomisations per row at every host but the last, one ciphertext
product per kept slot at the last host and one decryption per row and output at the guest.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto import kernels
from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, make_keypair
from p2pboost.crypto.residues import Residues
from p2pboost.exceptions import CodecError, InputError, KeyMismatchError, ModelError
from p2pboost.gbdt.names import by_name
from p2pboost.hetero._messages import (
    PrivatePredict,
    PrivateReady,
    PrivateRelay,
    PrivateScores,
    PrivateSlots,
)
from p2pboost.hetero.inference.forest import HostSplits, host_bits
from p2pboost.hetero.inference.private import (
    PrivateForest,
    SealKey,
    SlotRanges,
    host_selection,
    seal,
)
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.net.node import Session
from p2pboost.protocols._messages import Message, recv, reject, send

__all__ = ["CHUNK_CIPHERTEXTS", "guest_predict_private", "host_predict_private"]

F64 = npt.NDArray[np.float64]
#: Ciphertexts one relay message carries at most (rows are cut to fit).
CHUNK_CIPHERTEXTS = 1 << 16

Keys = tuple[AnyPublicKey, AnyPrivateKey]


def _context(fingerprint: str, start: int, rows: int) -> bytes:
    """What a sealed relay is bound to: the model and the rows it covers."""
    return f"{fingerprint}|{start}|{rows}".encode()


async def guest_predict_private(
    session: Session,
    model: GuestModel,
    X: Any,
    n_rounds: int | None = None,
    *,
    channel: str = "ctl",
    keys: Keys | None = None,
    executor: Executor | None = None,
    received: list[Message] | None = None,
) -> F64:
    """Raw margins ``(n, K)`` for the guest's rows ``X``, by private inference.

    ``keys``: the guest's key pair (default: a fresh 2048-bit Okamoto-Uchiyama pair per
    call; a long-lived caller passes its own). ``received``: if given, every message the
    guest receives is appended to it, as decoded (what the guest learns, for audits)."""
    forest = PrivateForest(model, n_rounds)
    X = by_name(X, model.feature_names)
    plain = forest.slot_values(X)
    n = plain.shape[0]
    public, private = keys if keys is not None else make_keypair("ou", 2048)
    hosts = list(model.hosts)
    chans = [session.channel(h, channel) for h in hosts]
    for k, ctl in enumerate(chans, start=1):
        ranges = forest.host_ranges(k)
        await send(
            ctl,
            PrivatePredict(
                model.fingerprint,
                n,
                public,
                forest.slots,
                forest.n_outputs,
                forest.widths,
                forest.outputs,
                ranges.tree,
                ranges.node,
                ranges.lo,
                ranges.mid,
                ranges.hi,
                first=k == 1,
                last=k == len(hosts),
            ),
        )
    seals = []
    for ctl in chans:
        ready = await recv(ctl, PrivateReady)
        if received is not None:
            received.append(ready)
        seals.append(ready.seal)
    per_row = max(forest.positions, 1)
    step = max(1, CHUNK_CIPHERTEXTS // per_row)
    totals: list[int] = []
    with CryptoEngine(public, private, executor=executor) as engine:
        for start in range(0, n, step):
            rows = min(step, n - start)
            values = plain[start : start + rows].reshape(-1).tolist()
            batch = CiphertextBatch.from_ciphertexts(public, await engine.encrypt_batch(values))
            ct: CiphertextBatch | None = batch
            sealed = b""
            for k, (host, ctl) in enumerate(zip(hosts, chans, strict=True), start=1):
                nxt = seals[k] if k < len(hosts) else b""
                await send(ctl, PrivateSlots(start, rows, ct, sealed, nxt))
                ct = None
                if k < len(hosts):
                    relay = await recv(ctl, PrivateRelay)
                    if received is not None:
                        received.append(relay)
                    sealed = relay.sealed
                    continue
                scores = await recv(ctl, PrivateScores)
                if received is not None:
                    received.append(scores)
                try:
                    cts = scores.ct.ciphertexts(public)
                except (CodecError, KeyMismatchError) as exc:
                    raise reject(host, f"bad score ciphertexts: {exc}") from exc
                if len(cts) != rows * forest.n_outputs:
                    raise reject(host, "a score per row and output column is expected")
                totals.extend(int(m) for m in await engine.decrypt_batch(cts))
    try:
        return forest.decode(totals, n)
    except InputError as exc:
        raise reject(hosts[-1], str(exc)) from exc


async def host_predict_private(
    session: Session,
    model: HostModel,
    arr: Any,
    msg: PrivatePredict,
    *,
    channel: str = "ctl",
    executor: Executor | None = None,
) -> None:
    """Answer one private prediction (``msg``, already received) for this host's rows."""
    guest = model.guest
    ctl = session.channel(guest, channel)
    if msg.fingerprint != model.fingerprint:
        raise ModelError("the guest's model is from another training (fingerprints differ)")
    if msg.n != arr.shape[0]:
        raise InputError(f"the guest predicts {msg.n!r} rows, this host has {arr.shape[0]}")
    n_trees = msg.widths.size
    splits = HostSplits.of(model).first_trees(n_trees)
    ranges = SlotRanges(msg.tree, msg.node, msg.lo, msg.mid, msg.hi)
    if not (np.array_equal(msg.tree, splits.tree) and np.array_equal(msg.node, splits.node)):
        raise reject(guest, "its split list does not match this host's model")
    if msg.slots & (msg.slots - 1):
        raise reject(guest, "slots must be a power of two")
    problem = ranges.check(n_trees, msg.slots)
    if problem:
        raise reject(guest, problem)
    key = msg.key
    width = key.ciphertext_bytes
    positions = msg.slots * int(msg.widths.sum())
    mine = SealKey()
    await send(ctl, PrivateReady(mine.public))
    bits = host_bits(splits, arr)
    keep = host_selection(ranges, bits, msg.slots, msg.widths)
    # The output column of every position (tree by tree, slot by slot, column by column).
    column = np.concatenate(
        [np.zeros(0, dtype=np.int64)]
        + [np.tile(msg.outputs[o : o + w], msg.slots) for o, w in _offsets(msg.widths)]
    ).astype(np.int64)
    done = 0
    with CryptoEngine(key, executor=executor) as engine:
        while done < msg.n:
            part = await recv(ctl, PrivateSlots)
            if part.start != done or part.rows > msg.n - done:
                raise reject(guest, "rows out of order")
            if (part.ct is not None) != msg.first or bool(part.next) == msg.last:
                raise reject(guest, "a relay that does not fit this host's place in the chain")
            context = _context(msg.fingerprint, part.start, part.rows)
            try:
                if part.ct is not None:
                    cts = part.ct.residues(key)
                else:
                    data = mine.open(part.sealed, context)
                    cts = CiphertextBatch.of(key, data).residues(key)
            except (CodecError, KeyMismatchError, InputError) as exc:
                raise reject(guest, f"bad slot ciphertexts: {exc}") from exc
            if cts.count != part.rows * positions:
                raise reject(guest, "a ciphertext per row and slot is expected")
            sel = keep[done : done + part.rows]
            if msg.last:
                out = await _totals(engine, cts, sel, column, msg.n_outputs, width)
                await send(ctl, PrivateScores(CiphertextBatch.of(key, out.data)))
            else:
                out = await _kept(engine, cts, sel, width)
                await send(ctl, PrivateRelay(seal(part.next, out.data, context)))
            done += part.rows


def _offsets(widths: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    """``(offset, width)`` of each tree's columns in ``outputs``."""
    ends = np.cumsum(widths)
    return [(int(e - w), int(w)) for e, w in zip(ends, widths, strict=True)]


async def _zeros(engine: CryptoEngine, count: int, width: int) -> Residues:
    """``count`` fresh encryptions of zero: the re-randomisers."""
    return Residues.of_values(await engine.encrypt_batch([0] * count), width)


async def _kept(
    engine: CryptoEngine, cts: Residues, keep: npt.NDArray[np.bool_], width: int
) -> Residues:
    """Every slot, the ones this host rules out replaced by 1 (an encryption of 0), all
    re-randomised so the next host cannot tell which."""
    drop = np.flatnonzero(~keep.reshape(-1))
    if drop.size:
        ones = Residues.of_values([1] * drop.size, width)
        cts = cts.replace(drop, ones)
    mod = engine.public_key.modulus
    return kernels.multiply(mod, cts, await _zeros(engine, cts.count, width))


async def _totals(
    engine: CryptoEngine,
    cts: Residues,
    keep: npt.NDArray[np.bool_],
    column: npt.NDArray[np.int64],
    n_outputs: int,
    width: int,
) -> Residues:
    """Per row and output column, the product of the kept slots (the sum of their weights),
    re-randomised so the guest cannot tell which of its ciphertexts went in."""
    rows, positions = keep.shape
    row, pos = np.nonzero(keep)
    segment = row * n_outputs + column[pos]
    order = np.argsort(segment, kind="stable")
    index = (row * positions + pos)[order]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(segment, minlength=rows * n_outputs))])
    mod = engine.public_key.modulus
    sums = kernels.segment_products(mod, cts, index, offsets)
    return kernels.multiply(mod, sums, await _zeros(engine, sums.count, width))
