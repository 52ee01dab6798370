"""Before a run, the parties say what they are about to do; a mismatch fails on every side.

Two parties configured differently used to find out late or never: a guest with ``psi = true``
and a host with ``psi = false`` wait in different sessions (PSI, training) and never meet, so
both sat silent until the node gave up on the session minutes later; a guest started with
``train`` and a host with ``predict`` likewise. Now every party of a PSI or training run first
sends each of its peers a :class:`Plan` (its role, its task and the settings the run's parties
must share) in one session whose name depends on nothing configurable, and compares the plans
it receives with its own: any difference ends the run on both sides, within a round trip of
the slower party's start, with a :class:`~p2pboost.exceptions.ConfigError` that names every
differing key with both values.

Only one-shot runs agree first (PSI and training): a host that serves predictions answers
sessions for as long as it runs, so there is no single moment for it to agree at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from p2pboost.app.config import PartyConfig, Role, Task
from p2pboost.exceptions import ConfigError
from p2pboost.net.node import Node
from p2pboost.protocols._messages import Int, MapOf, Message, Str, recv, send
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = ["PLAN_SESSION", "Plan", "agree", "shared_settings"]

#: The session every party of a run opens first (the same name whatever the settings).
PLAN_SESSION = "p2pboost-plan"
#: Settings one plan may carry.
MAX_SETTINGS = 256
#: The most trees a plan may announce.
MAX_TREES = 1 << 20


class PlanMessage(Message):
    FAMILY = "party-plan"


@dataclass(frozen=True)
class Plan(PlanMessage, tag="plan"):
    """Both ways, first in a run: the sender's role and task, and the settings every party of
    the run must share (as text, keyed by their config names)."""

    role: Annotated[str, Str(1, 16)]
    task: Annotated[str, Str(1, 16)]
    shared: Annotated[dict[str, str], MapOf(Str(1, 64), Str(0, 4096), MAX_SETTINGS)]
    #: The trees a guest's training grows (0: not said): a host's progress shows its ETA.
    trees: Annotated[int, Int(0, MAX_TREES)] = 0


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def shared_settings(config: PartyConfig) -> dict[str, str]:
    """What the parties of ``config``'s run must agree on, by config key.

    Vertical training: whether rows are aligned by PSI first (``train.psi``) and whether the
    training rows are an evaluation set (``train.eval_train``, which costs the hosts one bit
    per row and node), and whether every party has validation rows (``data.valid_path``:
    given or none; the files differ, their presence must not). Horizontal training: every
    boosting parameter (each client grows the same trees; the protocol checks them again at
    its hello, but only between a client and the server, after the parties have met in the
    training session).
    """
    shared: dict[str, str] = {}
    train = config.train
    if config.task is Task.TRAIN:
        if config.role in (Role.GUEST, Role.HOST):
            shared["train.psi"] = _text(train.psi)
            shared["train.eval_train"] = _text(train.eval_train)
            valid = config.data is not None and config.data.valid_path is not None
            shared["data.valid_path"] = "given" if valid else "none"
        else:
            for key, value in sorted(train.params.to_dict().items()):
                shared[f"train.{key}"] = _text(value)
    return shared


def _differences(ours: Plan, theirs: Plan, peer: str) -> list[str]:
    lines = []
    if ours.task != theirs.task:
        lines.append(f"task: {ours.task!r} here, {theirs.task!r} at {peer!r}")
    keys = sorted(set(ours.shared) | set(theirs.shared)) if ours.task == theirs.task else []
    for key in keys:
        a, b = ours.shared.get(key), theirs.shared.get(key)
        if a != b:
            lines.append(f"{key}: {a if a is not None else '(unset)'} here, {b} at {peer!r}")
    return lines


def _trees(config: PartyConfig) -> int:
    """What a guest's training grows (a warm start's earlier trees not counted: 0, unsaid)."""
    train = config.train
    if config.role is Role.GUEST and config.task is Task.TRAIN and train.init_model is None:
        return train.params.n_estimators
    return 0


async def agree(
    node: Node, config: PartyConfig, peers: list[str], seen: dict[str, Plan] | None = None
) -> None:
    """Exchange plans with ``peers`` and raise a :class:`ConfigError` naming every difference.

    Waits as long as the node waits for a peer to come up (``node.reconnect_timeout``); once
    both plans are in, the answer is immediate on both sides. ``seen`` receives the peers'
    plans (a host reads the guest's tree count there).
    """
    ours = Plan(config.role.value, config.task.value, shared_settings(config), _trees(config))
    async with node.session(PLAN_SESSION, peers=peers) as session:
        channels = {peer: session.channel(peer, "plan") for peer in peers}
        await gather_or_cancel(*(send(ch, ours) for ch in channels.values()))
        plans = await gather_or_cancel(*(recv(ch, Plan) for ch in channels.values()))
    if seen is not None:
        seen.update(zip(peers, plans, strict=True))
    problems = [
        line
        for peer, theirs in zip(peers, plans, strict=True)
        for line in _differences(ours, theirs, peer)
    ]
    if problems:
        raise ConfigError(
            f"{config.source}: the parties of this run are configured differently ("
            + "; ".join(problems)
            + "); make these settings the same in every party's config"
        )
