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

``private=True`` (the guest's choice) runs private inference instead
(:mod:`p2pboost.hetero.inference.private_batch`): the guest learns each row's score and no
decision bit. A host may insist on either mode (``host_predict(private=...)``); a request in
the other mode is refused.

A host that consents to per-feature explanations adds ``"tokens"`` to its answer: one opaque
token per split, the same for splits of one feature (:mod:`p2pboost.hetero.inference.explain`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt.features import Features
from p2pboost.hetero._messages import Predict, PredictBits, PrivatePredict
from p2pboost.hetero.inference.explain import (
    Contributions,
    FeatureTokens,
    check_tokens,
    guest_contributions,
)
from p2pboost.hetero.inference.forest import (
    HostSplits,
    host_bits,
    pack_bits,
    padding_is_clear,
    unpack_bits,
)
from p2pboost.hetero.inference.private_batch import (
    Keys,
    guest_predict_private,
    host_predict_private,
)
from p2pboost.hetero.model import GuestModel, HostDecisions, HostModel
from p2pboost.net.node import Session
from p2pboost.protocols._messages import Message, recv, reject, send
from p2pboost.protocols._tasks import gather_or_cancel
from p2pboost.workers import AnyExecutor

__all__ = ["guest_explain", "guest_predict", "host_predict"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


async def guest_predict(
    session: Session,
    model: GuestModel,
    X: Any,
    n_rounds: int | None = None,
    *,
    channel: str = "ctl",
    private: bool = False,
    keys: Keys | None = None,
    executor: AnyExecutor | None = None,
    received: list[Message] | None = None,
) -> F64:
    """Raw margins ``(n, K)`` for the guest's rows ``X`` (aligned with the hosts' rows).

    ``channel``: the session's channel for it (a warm start asks inside its training
    session, beside the training's own channels). ``private``: private inference (the
    guest learns scores only; ``keys`` and ``executor`` are its key pair and encryption
    pool). ``received``: if given, every message the guest receives is appended to it as
    decoded: what the guest learns, for audits and the attack benchmarks."""
    if private:
        return await guest_predict_private(
            session,
            model,
            Features.from_user(
                X,
                order=model.feature_names,
                n_features=model.n_features,
                allow_no_features=model.n_features == 0,
            ),
            n_rounds,
            channel=channel,
            keys=keys,
            executor=executor,
            received=received,
        )
    features = Features.from_user(
        X,
        order=model.feature_names,
        n_features=model.n_features,
        allow_no_features=model.n_features == 0,  # a guest with labels only
    )
    n = features.n_rows
    request = Predict(model.fingerprint, n)

    async def ask(k: int, host: str) -> tuple[HostDecisions, I64 | None]:
        ctl = session.channel(host, channel)
        await send(ctl, request)
        reply = await recv(ctl, PredictBits)
        if received is not None:
            received.append(reply)
        return _check_bits(reply, host, model, k, n)

    decisions = await gather_or_cancel(*(ask(k, h) for k, h in enumerate(model.hosts, start=1)))
    return model.predict_margin(features, [d for d, _ in decisions], n_rounds)


async def guest_explain(
    session: Session,
    model: GuestModel,
    X: Any,
    n_rounds: int | None = None,
    *,
    channel: str = "ctl",
) -> Contributions:
    """Exact TreeSHAP contributions for the guest's rows ``X`` (aligned with the hosts'):
    the same one round trip per host as :func:`guest_predict`, then
    :func:`~p2pboost.hetero.inference.explain.guest_contributions` on the guest's side.
    A host that consents (``explain_features``) is explained per feature, any other as one
    player."""
    features = Features.from_user(
        X,
        order=model.feature_names,
        n_features=model.n_features,
        allow_no_features=model.n_features == 0,
    )
    request = Predict(model.fingerprint, features.n_rows)

    async def ask(k: int, host: str) -> tuple[HostDecisions, I64 | None]:
        ctl = session.channel(host, channel)
        await send(ctl, request)
        return _check_bits(await recv(ctl, PredictBits), host, model, k, features.n_rows)

    answers = await gather_or_cancel(*(ask(k, h) for k, h in enumerate(model.hosts, start=1)))
    return guest_contributions(
        model,
        features,
        [d.go_left for d, _ in answers],
        [tokens for _, tokens in answers],
        n_rounds=n_rounds,
    )


def _check_bits(
    reply: PredictBits, host: str, model: GuestModel, k: int, n: int
) -> tuple[HostDecisions, I64 | None]:
    trees, nodes = model.host_nodes(k)
    t, nd, bits = reply.tree, reply.node, reply.bits
    if not (np.array_equal(t, trees) and np.array_equal(nd, nodes)):
        raise reject(host, "its splits do not match this model (other file?)")
    if bits.shape != (t.size * ((n + 7) // 8),):
        raise reject(host, "decision bits of the wrong size")
    if not padding_is_clear(bits, t.size, n):
        raise reject(host, "decision bits set beyond the rows")
    problem = check_tokens(reply.tokens, t.size)
    if problem is not None:
        raise reject(host, problem)
    return HostDecisions(t, nd, unpack_bits(bits, t.size, n)), reply.tokens


async def host_predict(
    session: Session,
    model: HostModel,
    X: Any,
    *,
    channel: str = "ctl",
    private: bool | None = None,
    executor: AnyExecutor | None = None,
    explain_features: bool = False,
) -> FeatureTokens | None:
    """Answer one prediction request of the guest for this host's rows ``X`` (on
    ``channel``, as the guest asks).

    ``private``: None answers either mode; True refuses a request for decision bits, False a
    private one (``executor``: the pool that re-randomises ciphertexts).
    ``explain_features``: consent to per-feature explanations: the answer carries an opaque
    token per split, drawn for this request, and the tokens are returned (the host's record
    of which token is which of its features); otherwise None."""
    features = Features.from_user(
        X, order=model.feature_names, n_features=model.n_features, sparse=True
    )
    ctl = session.channel(model.guest, channel)
    msg = await recv(ctl, (Predict, PrivatePredict))
    if private is not None and isinstance(msg, PrivatePredict) != private:
        wanted = "private" if private else "default (decision bits)"
        raise reject(model.guest, f"this host answers only {wanted} inference")
    if isinstance(msg, PrivatePredict):
        await host_predict_private(
            session, model, features, msg, channel=channel, executor=executor
        )
        return None
    if msg.fingerprint != model.fingerprint:
        raise ModelError("the guest's model is from another training (fingerprints differ)")
    if msg.n != features.n_rows:
        raise InputError(f"the guest predicts {msg.n!r} rows, this host has {features.n_rows}")
    splits = HostSplits.of(model)
    bits = host_bits(splits, features)
    tokens = FeatureTokens.draw(model) if explain_features else None
    token_arr = None if tokens is None else tokens.of_splits(splits)
    await send(ctl, PredictBits(splits.tree, splits.node, pack_bits(bits), token_arr))
    return tokens
