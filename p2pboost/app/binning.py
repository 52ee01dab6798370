"""Federated WOE/IV binning from the party files (``p2pboost binning``).

Each party runs it on its own machine with its own :class:`~p2pboost.app.config.PartyConfig`,
as it runs ``p2pboost party``: the same node (mutual TLS, peers), the same data file, the
same ``[train]`` settings for the bins and the keys (``max_bin``, ``key_bits``, ``scheme``,
``insecure_key_bits``) and the same alignment (PSI of the ids first unless ``train.psi =
false``). The parties first exchange a plan (:mod:`p2pboost.app._plan`) whose task is
``binning``, so a guest binning and a host training fail at once, naming the difference,
instead of waiting for each other in different sessions.

What each writes in its ``workdir`` (an existing file is refused unless ``force``):

* the guest, ``binning.csv`` (one line per bin of every party's feature: events,
  non-events, WOE, IV term; a host's bins by their codes only) and ``binning.json`` (IV per
  feature, the selection, and each party's kept features);
* a host, ``binning.json`` with its own kept feature names, the only result it receives.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from p2pboost.app._plan import PLAN_SESSION, Plan
from p2pboost.app._progress import LogReporter, PartyResult, Reporter
from p2pboost.app._tables import Table, load_table
from p2pboost.app.config import PartyConfig, Role
from p2pboost.exceptions import ConfigError
from p2pboost.files import atomic_write
from p2pboost.gbdt.woe import Monotone
from p2pboost.hetero.woe import SESSION, FeatureWoe, WoeResult, guest_woe, host_woe
from p2pboost.net.node import Node
from p2pboost.protocols._messages import recv, send
from p2pboost.protocols._tasks import gather_or_cancel

__all__ = ["SUMMARY_FILE", "TABLE_FILE", "BinningOptions", "run_binning", "table_rows"]

TABLE_FILE = "binning.csv"
SUMMARY_FILE = "binning.json"
TASK = "binning"


@dataclass(frozen=True, slots=True)
class BinningOptions:
    """The guest's choices (a host's are the guest's: it follows what the guest sends).

    ``threshold`` / ``top_k``: the selection (:func:`~p2pboost.gbdt.woe.select_by_iv`;
    neither: every feature kept); ``monotone``: merge value bins to a monotone WOE;
    ``force``: replace output files that exist.
    """

    threshold: float | None = None
    top_k: int | None = None
    monotone: Monotone = None
    force: bool = False


def _outputs(config: PartyConfig) -> list[Path]:
    names = [TABLE_FILE, SUMMARY_FILE] if config.role is Role.GUEST else [SUMMARY_FILE]
    return [config.workdir / n for n in names]


async def run_binning(
    config: PartyConfig, options: BinningOptions | None = None, reporter: Reporter | None = None
) -> PartyResult:
    """Run the binning as ``config.role`` (a vertical guest or host) and write its files."""
    options = options or BinningOptions()
    reporter = reporter or LogReporter()
    if config.role not in (Role.GUEST, Role.HOST):
        raise ConfigError(f"{config.source}: binning is for a vertical guest or host")
    outputs = _outputs(config)
    existing = [p for p in outputs if p.exists()]
    if existing and not options.force:
        raise ConfigError(f"{', '.join(map(str, existing))} exists: pass --force to replace it")
    if config.data is None:
        raise ConfigError(f"{config.source}: binning needs [data]")
    guest = config.role is Role.GUEST
    table = await asyncio.to_thread(load_table, config.data, require_label=guest)
    from p2pboost.app.party import build_node

    node = build_node(config)
    config.workdir.mkdir(parents=True, exist_ok=True)
    peers = list(config.peers)
    async with node:
        reporter.info(f"binning: waiting for {', '.join(peers)}...")
        await _agree(node, config, peers)
        if config.train.psi:
            table = await _align(node, config, table, reporter)
        t0 = time.perf_counter()
        train = config.train
        async with node.session(SESSION, peers=peers) as session:
            if guest:
                assert table.y is not None  # require_label
                result = await guest_woe(
                    session,
                    peers,
                    table.X,
                    table.y,
                    max_bin=train.params.max_bin,
                    threshold=options.threshold,
                    top_k=options.top_k,
                    monotone=options.monotone,
                    feature_names=list(table.features),
                    party=config.id,
                    scheme=train.scheme,
                    key_bits=train.key_bits,
                    allow_insecure_key=train.insecure_key_bits,
                )
            else:
                own = await host_woe(session, peers[0], table.X, feature_names=table.features)
    seconds = time.perf_counter() - t0
    c = config
    if guest:
        _write_guest(outputs, result, config.id)
        kept = sum(f.kept for f in result.features)
        reporter.info(f"binning: {len(result.features)} features, {kept} kept, {seconds:.1f} s")
        summary: dict[str, Any] = {
            "rows": int(table.ids.size),
            "features": len(result.features),
            "kept": int(kept),
            "s": round(seconds, 3),
        }
    else:
        _write_json(outputs[0], {"party": c.id, "kept": list(own.kept)})
        reporter.info(f"binning: {len(own.kept)} of our {len(own.feature_names)} features kept")
        summary = {"rows": int(table.ids.size), "kept": list(own.kept)}
    return PartyResult(c.id, c.role.value, TASK, tuple(map(str, outputs)), summary)


async def _agree(node: Node, config: PartyConfig, peers: list[str]) -> None:
    """The plan exchange of :func:`p2pboost.app._plan.agree` with the task ``binning``."""
    shared = {"train.psi": "true" if config.train.psi else "false"}
    ours = Plan(config.role.value, TASK, shared)
    async with node.session(PLAN_SESSION, peers=peers) as session:
        channels = [session.channel(p, "plan") for p in peers]
        await gather_or_cancel(*(send(ch, ours) for ch in channels))
        plans = await gather_or_cancel(*(recv(ch, Plan) for ch in channels))
    problems = []
    for peer, theirs in zip(peers, plans, strict=True):
        if theirs.task != TASK:
            problems.append(f"task: {TASK!r} here, {theirs.task!r} at {peer!r}")
        elif theirs.shared != shared:
            problems += [
                f"{k}: {v} here, {theirs.shared.get(k, '(unset)')} at {peer!r}"
                for k, v in shared.items()
                if theirs.shared.get(k) != v
            ]
    if problems:
        raise ConfigError(
            f"{config.source}: the parties of this run are configured differently ("
            + "; ".join(problems)
            + ")"
        )


async def _align(node: Node, config: PartyConfig, table: Table, reporter: Reporter) -> Table:
    """PSI of the ids with the peers: this party's common rows in the guest's order."""
    from p2pboost.protocols.psi import psi_guest, psi_host

    peers = list(config.peers)
    async with node.session(f"{SESSION}-psi", peers=peers) as session:
        if config.role is Role.GUEST:
            found = await psi_guest(session, peers, table.ids)
        else:
            found = await psi_host(session, peers[0], table.ids)
    keep = found.positions
    reporter.info(f"PSI: {keep.size} common ids of {table.ids.size}")
    if keep.size == 0:
        raise ConfigError("the parties have no sample id in common: nothing to do")
    y = None if table.y is None else table.y[keep]
    return Table(table.ids[keep], table.X[keep], y, table.features)


def table_rows(result: WoeResult, guest: str) -> list[dict[str, Any]]:
    """One row per bin of every feature: what ``binning.csv`` holds. The guest's own bins
    have their thresholds (``lower < x <= upper``); a host's only their value-bin codes."""
    rows = []
    for f in result.features:
        rows += _feature_rows(f, f.party == guest)
    return rows


def _feature_rows(f: FeatureWoe, own: bool) -> list[dict[str, Any]]:
    b = f.bins
    n_value = b.events.size - 1
    out = []
    codes = b.bin_of[:-1]
    for k in range(b.events.size):
        missing = k == n_value
        lower: float | str = ""
        upper: float | str = ""
        if missing:
            span = "missing"
        else:
            members = np.flatnonzero(codes == k)
            span = f"{members[0]}-{members[-1]}" if members.size > 1 else f"{members[0]}"
            lower = float(b.edges[k - 1]) if own and k > 0 else ""
            upper = float(b.edges[k]) if own and k < n_value - 1 else ""
        out.append(
            {
                "party": f.party,
                "feature": f.feature,
                "bin": "missing" if missing else k,
                "codes": span,
                "lower": lower,
                "upper": upper,
                "events": int(b.events[k]),
                "non_events": int(b.non_events[k]),
                "woe": float(b.woe[k]),
                "iv_term": float(b.iv_terms[k]),
            }
        )
    return out


def _write_guest(outputs: list[Path], result: WoeResult, party: str) -> None:
    rows = table_rows(result, party)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(outputs[0], buffer.getvalue().encode())
    parties = list(dict.fromkeys(f.party for f in result.features))
    _write_json(
        outputs[1],
        {
            "party": party,
            "features": [
                {"party": f.party, "feature": f.feature, "iv": _num(f.iv), "kept": f.kept}
                for f in result.features
            ],
            "kept": {p: result.kept(p) for p in parties},
        },
    )


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _write_json(path: Path, data: Any) -> None:
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode())
