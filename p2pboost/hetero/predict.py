"""Hetero SecureBoost prediction for rows aligned across parties: one round trip per host.

::

    guest                                       host (each)
    -----                                       ----
    ctl: {"t": "predict", "fingerprint", "n"}  ->
                                           <-   ctl: {"t": "bits", "tree", "node", "bits"}
    walks the trees                              (every split it owns, every row: left?)

A host evaluates each split it owns on each of its rows and sends the decisions as
``np.packbits`` rows; the guest combines them with its own splits and walks the trees. The
host learns nothing (it does not even see which leaf a row reaches); the guest learns, for
every host split and row, the direction, which it would learn anyway by walking the tree.
Both sides check the model fingerprint, so files of different trainings never mix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ModelError, RemoteProtocolError
from p2pboost.gbdt.binning import check_matrix
from p2pboost.hetero.inference import (
    HostSplits,
    host_bits,
    pack_bits,
    padding_is_clear,
    unpack_bits,
)
from p2pboost.hetero.model import GuestModel, HostDecisions, HostModel
from p2pboost.net.node import Session
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = ["guest_predict", "host_predict"]

F64 = npt.NDArray[np.float64]


async def guest_predict(
    session: Session, model: GuestModel, X: Any, n_rounds: int | None = None
) -> F64:
    """Raw margins ``(n, K)`` for the guest's rows ``X`` (aligned with the hosts' rows)."""
    arr = check_matrix(X, n_features=model.n_features)
    n = arr.shape[0]
    request = {"t": "predict", "fingerprint": model.fingerprint, "n": n}

    async def ask(k: int, host: str) -> HostDecisions:
        ctl = session.channel(host, "ctl")
        await ctl.send(request)
        reply = await ctl.recv()
        return _check_bits(reply, host, model, k, n)

    decisions = await gather_or_cancel(*(ask(k, h) for k, h in enumerate(model.hosts, start=1)))
    return model.predict_margin(arr, decisions, n_rounds)


def _check_bits(reply: object, host: str, model: GuestModel, k: int, n: int) -> HostDecisions:
    if not isinstance(reply, dict) or reply.get("t") != "bits":
        raise RemoteProtocolError("expected a 'bits' reply", peer=host)
    trees, nodes = model.host_nodes(k)
    t, nd, bits = _ints(reply, "tree", host), _ints(reply, "node", host), reply.get("bits")
    if not (np.array_equal(t, trees) and np.array_equal(nd, nodes)):
        raise RemoteProtocolError("its splits do not match this model (other file?)", peer=host)
    width = (n + 7) // 8
    if (
        not isinstance(bits, np.ndarray)
        or bits.dtype != np.uint8
        or bits.shape != (t.size * width,)
    ):
        raise RemoteProtocolError("decision bits of the wrong size", peer=host)
    if not padding_is_clear(bits, t.size, n):
        raise RemoteProtocolError("decision bits set beyond the rows", peer=host)
    return HostDecisions(t, nd, unpack_bits(bits, t.size, n))


def _ints(reply: dict[str, Any], key: str, host: str) -> npt.NDArray[np.int64]:
    arr = reply.get(key)
    if not isinstance(arr, np.ndarray) or arr.dtype != np.int64 or arr.ndim != 1:
        raise RemoteProtocolError(f"{key!r} must be a 1-d int64 array", peer=host)
    return arr


async def host_predict(session: Session, model: HostModel, X: Any) -> None:
    """Answer one prediction request of the guest for this host's rows ``X``."""
    arr = check_matrix(X, n_features=model.n_features)
    ctl = session.channel(model.guest, "ctl")
    msg = await ctl.recv()
    if not isinstance(msg, dict) or msg.get("t") != "predict":
        raise RemoteProtocolError("expected a 'predict' request", peer=model.guest)
    if msg.get("fingerprint") != model.fingerprint:
        raise ModelError("the guest's model is from another training (fingerprints differ)")
    if msg.get("n") != arr.shape[0]:
        raise InputError(f"the guest predicts {msg.get('n')!r} rows, this host has {arr.shape[0]}")
    splits = HostSplits.of(model)
    bits = host_bits(splits, arr)
    await ctl.send({"t": "bits", "tree": splits.tree, "node": splits.node, "bits": pack_bits(bits)})
