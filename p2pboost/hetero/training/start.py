"""Where a vertical run starts: afresh, from the parties' checkpoints, or continuing a model.

Three ways, decided by the guest at session start from what each party brings in its hello
(:mod:`p2pboost.hetero.training.checkpoint` for the files):

* **afresh**: a new run id and chain secret, no tree kept;
* **resumed**: every party holds a checkpoint of the same run; the run continues after the
  last round all of them hold, from the guest's saved state at that round (random generator,
  margins) and with every callback shown the recorded rounds again;
* **warm start** (``init_model``): a new run continues a finished model, as the core's
  ``train(init_model=...)`` does: the same bins (the guest's), base margin, trees, history and
  random generator; its margins on the training and evaluation rows come from the one-round
  prediction protocol, run inside the training session on a channel of its own (``warm``)
  before the first new tree, so they are the sums the core computes, in the same order. The
  fingerprint chain then covers the model's trees too (the guest sends it in the setup), so a
  warm-started run can itself be checkpointed and resumed. Hosts re-bin their rows: on the
  rows the model was trained on the bins are the same, hence the same trees as the core.

A checkpoint always wins over ``init_model``: it already holds that model's trees.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from p2pboost.exceptions import InputError
from p2pboost.gbdt.callbacks import Callback
from p2pboost.gbdt.features import Features
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import Margins, RoundLoop, RoundStart
from p2pboost.hetero._messages import Hello
from p2pboost.hetero.inference.batch import guest_predict, host_predict
from p2pboost.hetero.model import GuestModel, HostModel, HostSplit
from p2pboost.hetero.training.checkpoint import (
    GuestCheckpoint,
    HostCheckpoint,
    RoundState,
    chain_next,
    chain_start,
    new_chain_secret,
    new_run_id,
    resume_point,
)
from p2pboost.net.node import Session
from p2pboost.protocols._messages import reject

__all__ = [
    "WARM_CHANNEL",
    "GuestStart",
    "HostLedger",
    "guest_start",
    "host_warm",
    "round_loop",
    "warm_margins",
]

#: The training session's channel for a warm start's margins (prediction messages).
WARM_CHANNEL = "warm"


@dataclass(frozen=True, eq=False)
class GuestStart:
    """The guest's decision: the run, its secret, the trees every party keeps (``start``),
    and where they come from (``resumed`` or ``warm``, at most one)."""

    run: str
    secret: str
    start: int
    resumed: GuestCheckpoint | None = None
    warm: GuestModel | None = None
    #: The chain after each kept tree (what a warm start sends the hosts).
    prefix: list[str] = field(default_factory=list)


def guest_start(
    saved: GuestCheckpoint | None,
    init_model: GuestModel | None,
    hellos: Sequence[tuple[str, Hello]],
    trees_per_round: int,
) -> GuestStart:
    """Decide how this run starts from the guest's checkpoint, the model it continues and the
    hosts' hellos (InputError or CheckpointError naming a host that disagrees)."""
    start = resume_point(saved, [(n, h.run, h.chain) for n, h in hellos], trees_per_round)
    if saved is not None and start:
        return GuestStart(saved.run, saved.secret, start, resumed=saved, prefix=saved.chain[:start])
    wanted = "" if init_model is None else init_model.fingerprint
    for name, hello in hellos:
        if hello.init != wanted:
            said = f"continues model {hello.init[:8]}" if hello.init else "starts afresh"
            raise InputError(
                f"host {name!r} {said}, the guest "
                + (f"continues model {wanted[:8]}" if wanted else "starts afresh")
                + ": give every party the files of the same model (init_model), or none"
            )
    run, secret = new_run_id(), new_chain_secret()
    if init_model is None:
        return GuestStart(run, secret, 0)
    prefix, chain = [], chain_start(run)
    for tree in init_model.trees:
        chain = chain_next(chain, tree, secret)
        prefix.append(chain)
    return GuestStart(run, secret, len(init_model.trees), warm=init_model, prefix=prefix)


async def warm_margins(
    session: Session, model: GuestModel, X: Features, eval_X: Sequence[Features]
) -> tuple[Any, list[Any]]:
    """The continued model's margins on the training rows and every evaluation set, each
    through the one-round prediction protocol with the hosts (which answer in the same
    order: :func:`host_warm`)."""
    margin = await guest_predict(session, model, X, channel=WARM_CHANNEL)
    evals = [await guest_predict(session, model, e, channel=WARM_CHANNEL) for e in eval_X]
    return margin, evals


async def host_warm(
    session: Session, model: HostModel, X: Features, eval_X: Sequence[Features]
) -> None:
    """A host's side of :func:`warm_margins`: its decisions for the training rows, then for
    every evaluation set."""
    for rows in (X, *eval_X):
        await host_predict(session, model, rows, channel=WARM_CHANNEL)


def round_loop(
    params: BoostParams,
    n_features: int,
    n_outputs: int,
    callbacks: Sequence[Callback],
    margins: Margins,
    start: GuestStart,
    warm: tuple[Any, list[Any]] | None = None,
    features_by_round: Callable[[int], Any] | None = None,
    warm_rounds: int = 0,
) -> tuple[RoundLoop, list[str], list[RoundState]]:
    """The core's round loop (the same draws, refits, margins, callbacks and early stop), the
    fingerprint chain (from the run's start) and the round states a checkpoint keeps: fresh,
    resumed (``margins`` restored from the checkpoint) or warm (``margins`` set to ``warm``).
    ``features_by_round``: the loop's restriction of each round's features (complete_secure);
    ``warm_rounds``: the rounds of the model a resumed run had continued (they do not count
    towards ``n_estimators``)."""
    chain = [chain_start(start.run), *start.prefix]
    if start.resumed is not None:
        model = start.resumed.model
        rounds = start.start // model.trees_per_round
        state = start.resumed.state_at(rounds)
        assert state is not None  # resume_point checked it
        history = {s: {m: v[:rounds] for m, v in per.items()} for s, per in model.history.items()}
        at = RoundStart(
            model.trees[: start.start],
            model.tree_output[: start.start],
            history,
            state.rng_state,
            extend=False,
            base_rounds=warm_rounds,
        )
        loop = RoundLoop(
            params, n_features, n_outputs, callbacks, start=at, features_by_round=features_by_round
        )
        loop.replay_callbacks()
        margins.restore(state.margin, state.eval_margins)
        return loop, chain, [state]
    if start.warm is None:
        return (
            RoundLoop(
                params, n_features, n_outputs, callbacks, features_by_round=features_by_round
            ),
            chain,
            [],
        )
    assert warm is not None
    init = start.warm
    at = RoundStart(init.trees, init.tree_output, init.history, init.rng_state)
    loop = RoundLoop(
        params, n_features, n_outputs, callbacks, start=at, features_by_round=features_by_round
    )
    margins.restore(*warm)
    state = RoundState(
        init.n_rounds,
        loop.rng_state,
        margins.margin.copy(),
        [ev.margin.copy() for ev in margins.evals],
    )
    return loop, chain, [state]


class HostLedger:
    """A host's fingerprint chain, checked and extended tree by tree, and its checkpoint."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        guest: str,
        run: str,
        n_features: int,
        digest: str,
        chain: list[str],
    ) -> None:
        self.directory, self.guest, self.run = directory, guest, run
        self.n_features, self.digest = n_features, digest
        self.chain = list(chain)
        self.first = chain_start(run)

    async def tree_done(self, trees: int, chain: str, splits: Sequence[HostSplit]) -> None:
        """The guest says ``chain`` follows the first ``trees`` trees: keep it and save."""
        if trees == len(self.chain):
            if chain != (self.chain[-1] if self.chain else self.first):
                raise reject(self.guest, "the fingerprint chain does not continue this run")
            return
        if trees != len(self.chain) + 1:
            raise reject(self.guest, "the fingerprint chain skips a tree")
        self.chain.append(chain)
        if self.directory is not None:
            kept = sorted((s for s in splits if s.tree < trees), key=lambda s: (s.tree, s.node))
            model = HostModel(self.run, self.guest, self.n_features, tuple(kept))
            await asyncio.to_thread(
                HostCheckpoint(model, list(self.chain), self.digest).save, self.directory
            )
