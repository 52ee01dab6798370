"""A host's side of private inference, shared by the batch protocol and online sessions.

:class:`PrivateHost` checks the guest's request once (the split list against the host's own
model, every slot range an aligned half-split), makes the request's X25519 seal key, and then
answers chunk after chunk: the slots its splits allow per row, kept and re-randomised (sealed
to the next host) or, for the last host, summed per row and output column and re-randomised.
See :mod:`p2pboost.hetero.inference.private` for the arithmetic and
``docs/explanation/private-inference.md`` for what each party learns.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.crypto import kernels
from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.engine import CryptoEngine
from p2pboost.crypto.keys import AnyPublicKey
from p2pboost.crypto.residues import Residues
from p2pboost.exceptions import CodecError, InputError, KeyMismatchError
from p2pboost.gbdt.features import Features
from p2pboost.hetero._messages import PrivatePredict, ServePrivate
from p2pboost.hetero.inference.forest import HostSplits, host_bits
from p2pboost.hetero.inference.private import SealKey, SlotRanges, host_selection, seal
from p2pboost.hetero.model import HostModel
from p2pboost.protocols._messages import reject
from p2pboost.workers import AnyExecutor

__all__ = ["PrivateHost", "context", "plain_executor"]

B8 = npt.NDArray[np.bool_]
#: The guest's setup of a private prediction, batch or session (the same fields).
PrivateSetup = PrivatePredict | ServePrivate
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def plain_executor(executor: Any) -> Executor | None:
    """The executor the encryption engine can use: an ordinary pool, or None (the engine's
    own processes) for a Dask client."""
    return executor if isinstance(executor, Executor) else None


def context(fingerprint: str, batch: int | str, start: int, rows: int) -> bytes:
    """What a sealed relay is bound to: the model, the batch and the rows it covers."""
    return f"{fingerprint}|{batch}|{start}|{rows}".encode()


class PrivateHost:
    """One private-inference request (a batch, or an online session), host side.

    ``first``/``last``: this host's place in the chain (it receives the guest's ciphertexts /
    returns the totals). Raises :class:`~p2pboost.exceptions.RemoteProtocolError` naming the
    guest for a request that does not fit this host's model.
    """

    def __init__(
        self,
        model: HostModel,
        *,
        key: AnyPublicKey,
        slots: int,
        n_outputs: int,
        widths: I64,
        outputs: I64,
        ranges: SlotRanges,
        first: bool,
        last: bool,
        executor: AnyExecutor | None = None,
    ) -> None:
        guest = model.guest
        n_trees = widths.size
        self.splits = HostSplits.of(model).first_trees(n_trees)
        if not (
            np.array_equal(ranges.tree, self.splits.tree)
            and np.array_equal(ranges.node, self.splits.node)
        ):
            raise reject(guest, "its split list does not match this host's model")
        if slots & (slots - 1):
            raise reject(guest, "slots must be a power of two")
        problem = ranges.check(n_trees, slots)
        if problem:
            raise reject(guest, problem)
        self.guest = guest
        self.key = key
        self.width = key.ciphertext_bytes
        self.slots = slots
        self.widths = widths
        self.n_outputs = n_outputs
        self.ranges = ranges
        self.first, self.last = first, last
        self.positions = slots * int(widths.sum())
        ends = np.cumsum(widths)
        # The output column of every position (tree by tree, slot by slot, column by column).
        self.column = np.concatenate(
            [np.zeros(0, dtype=np.int64)]
            + [
                np.tile(outputs[int(e - w) : int(e)], slots)
                for e, w in zip(ends, widths, strict=True)
            ]
        ).astype(np.int64)
        self.seal_key = SealKey()
        self.engine = CryptoEngine(key, executor=plain_executor(executor))

    @classmethod
    def from_setup(
        cls, model: HostModel, msg: PrivateSetup, executor: AnyExecutor | None = None
    ) -> PrivateHost:
        """The host's state from a guest's setup message (a batch request's
        ``PrivatePredict`` or a session's ``ServePrivate``: the same fields), checked against
        this host's model."""
        return cls(
            model,
            key=msg.key,
            slots=msg.slots,
            n_outputs=msg.n_outputs,
            widths=msg.widths,
            outputs=msg.outputs,
            ranges=SlotRanges(msg.tree, msg.node, msg.lo, msg.mid, msg.hi),
            first=msg.first,
            last=msg.last,
            executor=executor,
        )

    def close(self) -> None:
        self.engine.close()

    def selection(self, X: Features | F64) -> B8:
        """``(n, positions)``: the slots this host's splits allow for each row of ``X``
        (checked features, or a feature store's rows, as :func:`host_bits` takes them)."""
        return host_selection(self.ranges, host_bits(self.splits, X), self.slots, self.widths)

    def incoming(
        self, ct: CiphertextBatch | None, sealed: bytes, nxt: bytes, rows: int, ctx: bytes
    ) -> Residues:
        """The chunk's slot ciphertexts, validated: from the guest (first host) or opened
        from the previous host's seal; exactly one per row and position, each in
        ``(0, modulus)`` under the request's key."""
        if (ct is not None) != self.first or bool(nxt) == self.last:
            raise reject(self.guest, "a relay that does not fit this host's place in the chain")
        try:
            if ct is not None:
                cts = ct.residues(self.key)
            else:
                cts = CiphertextBatch.of(self.key, self.seal_key.open(sealed, ctx)).residues(
                    self.key
                )
        except (CodecError, KeyMismatchError, InputError) as exc:
            raise reject(self.guest, f"bad slot ciphertexts: {exc}") from exc
        if cts.count != rows * self.positions:
            raise reject(self.guest, "a ciphertext per row and slot is expected")
        return cts

    async def relay(self, cts: Residues, keep: B8, nxt: bytes, ctx: bytes) -> bytes:
        """Every slot, those this host rules out replaced by 1 (an encryption of 0), all
        re-randomised so the next host cannot tell which, sealed to the next host."""
        drop = np.flatnonzero(~keep.reshape(-1))
        if drop.size:
            cts = cts.replace(drop, Residues.of_values([1] * drop.size, self.width))
        out = kernels.multiply(self.key.modulus, cts, await self._zeros(cts.count))
        return seal(nxt, out.data, ctx)

    async def totals(self, cts: Residues, keep: B8) -> CiphertextBatch:
        """Per row and output column, the product of the kept slots (the sum of their
        weights), re-randomised so the guest cannot tell which of its ciphertexts went in."""
        rows, positions = keep.shape
        row, pos = np.nonzero(keep)
        segment = row * self.n_outputs + self.column[pos]
        order = np.argsort(segment, kind="stable")
        index = (row * positions + pos)[order]
        counts = np.bincount(segment, minlength=rows * self.n_outputs)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        mod = self.key.modulus
        sums = kernels.segment_products(mod, cts, index, offsets)
        out = kernels.multiply(mod, sums, await self._zeros(sums.count))
        return CiphertextBatch.of(self.key, out.data)

    async def _zeros(self, count: int) -> Residues:
        """``count`` fresh encryptions of zero: the re-randomisers."""
        return Residues.of_values(await self.engine.encrypt_batch([0] * count), self.width)
