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

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import AnyPrivateKey, AnyPublicKey, make_keypair
from p2pboost.exceptions import CodecError, InputError, KeyMismatchError, ModelError
from p2pboost.gbdt.features import Features
from p2pboost.hetero._messages import (
    PrivatePredict,
    PrivateReady,
    PrivateRelay,
    PrivateScores,
    PrivateSlots,
)
from p2pboost.hetero.inference.private import (
    PrivateForest,
)
from p2pboost.hetero.inference.private_host import PrivateHost, context, plain_executor
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.net.node import Session
from p2pboost.protocols._messages import Message, recv, reject, send
from p2pboost.workers import AnyExecutor

__all__ = ["CHUNK_CIPHERTEXTS", "guest_predict_private", "host_predict_private"]

F64 = npt.NDArray[np.float64]
#: Ciphertexts one relay message carries at most (rows are cut to fit).
CHUNK_CIPHERTEXTS = 1 << 16

Keys = tuple[AnyPublicKey, AnyPrivateKey]


async def guest_predict_private(
    session: Session,
    model: GuestModel,
    X: Features,
    n_rounds: int | None = None,
    *,
    channel: str = "ctl",
    keys: Keys | None = None,
    executor: AnyExecutor | None = None,
    received: list[Message] | None = None,
) -> F64:
    """Raw margins ``(n, K)`` for the guest's rows ``X``, by private inference.

    ``keys``: the guest's key pair (default: a fresh 2048-bit Okamoto-Uchiyama pair per
    call; a long-lived caller passes its own). ``received``: if given, every message the
    guest receives is appended to it, as decoded (what the guest learns, for audits)."""
    forest = PrivateForest(model, n_rounds)
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
    with CryptoEngine(public, private, executor=plain_executor(executor)) as engine:
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
    arr: Features,
    msg: PrivatePredict,
    *,
    channel: str = "ctl",
    executor: AnyExecutor | None = None,
) -> None:
    """Answer one private prediction (``msg``, already received) for this host's rows."""
    guest = model.guest
    ctl = session.channel(guest, channel)
    if msg.fingerprint != model.fingerprint:
        raise ModelError("the guest's model is from another training (fingerprints differ)")
    if msg.n != arr.n_rows:
        raise InputError(f"the guest predicts {msg.n!r} rows, this host has {arr.n_rows}")
    host = PrivateHost.from_setup(model, msg, executor)
    try:
        await send(ctl, PrivateReady(host.seal_key.public))
        keep = host.selection(arr)
        done = 0
        while done < msg.n:
            part = await recv(ctl, PrivateSlots)
            if part.start != done or part.rows > msg.n - done:
                raise reject(guest, "rows out of order")
            ctx = context(msg.fingerprint, 0, part.start, part.rows)
            cts = host.incoming(part.ct, part.sealed, part.next, part.rows, ctx)
            sel = keep[done : done + part.rows]
            if msg.last:
                await send(ctl, PrivateScores(await host.totals(cts, sel)))
            else:
                await send(ctl, PrivateRelay(await host.relay(cts, sel, part.next, ctx)))
            done += part.rows
    finally:
        host.close()
