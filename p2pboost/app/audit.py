"""``p2pboost audit CONFIG...``: what each partner could infer, measured before training.

The vertical parties' TOML files (one guest, its hosts) say which data and settings a real run
would use. The audit runs that federation in this one process, over the testing kit's
in-memory fabric (:mod:`p2pboost.audit.suite`), on the same files: each party's data file
where this machine has it, a stand-in where not (a host's file is usually on the host's
machine). It then runs the known attacks on what each party received and prints:

- per host: the **label inference** attack from the instance spaces it saw (it knows the labels
  of a share of the rows, ``--known-share``, at least 20 rows), its AUC on the other rows, what
  it infers from its own features alone with the same labels (``alone``), the federation's
  **excess** (attack minus alone), and the same for the options that reduce it
  (docs/explanation/defences.md), each with the model's test AUC (a third of the aligned rows
  are held out);
- for the guest: how well it orders each host's most used feature from the one-round
  inference bits (Spearman), beside what the scores alone give.

Keys: the audit's own key pair, by default 1024-bit Okamoto-Uchiyama whatever the files say:
the trees are the same under either scheme and any key size (the protocol is exact), and the
attacks read no ciphertext, so the keys change the time, not the figures; the output says so.
Nor does the audit precompute encryption randomisers (``HeteroConfig.precompute``). A missing
host file becomes a stand-in of independent standard-normal columns (as many as its ``[data]
features`` names, or ``--stand-in-features``): those carry nothing about the labels, so its
figures measure what the guest's splits' instance spaces leak, and its ``alone`` is near 0.5;
the output marks it. The guest's file is needed (the labels are what the attacks infer). Rows
align by id in process (the intersection PSI would find)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.app._tables import load_table
from p2pboost.app.config import PartyConfig, Role, load_config
from p2pboost.audit.attacks import auc, spearman
from p2pboost.audit.suite import (
    Run,
    feature_order,
    federate,
    flat_groups,
    host_alone,
    known_rows,
    label_attack,
)
from p2pboost.exceptions import ConfigError
from p2pboost.hetero.config import HeteroConfig
from p2pboost.workers import AnyExecutor, pinned_pool

__all__ = ["AuditOptions", "AuditReport", "format_report", "run_audit"]

F64 = npt.NDArray[np.float64]

#: The recommended defence's purity bound (docs/explanation/defences.md).
RECOMMENDED_BOUND = 0.2
#: The fewest known labels the attacker is given, whatever the share.
MIN_KNOWN = 20


@dataclass(frozen=True, slots=True)
class AuditOptions:
    """The audit's own settings (the command's options)."""

    key_bits: int = 1024
    scheme: str = "ou"
    known_share: float = 0.01
    rows: int = 20000
    stand_in_features: int = 10
    workers: int = 1
    seed: int = 0


@dataclass
class _Party:
    name: str
    X: F64
    ids: npt.NDArray[Any]
    source: str  # the file, or why it is a stand-in
    stand_in: bool = False


@dataclass
class AuditReport:
    """The figures :func:`format_report` prints (and a caller may read)."""

    rows: int
    train_rows: int
    known: int
    key_bits: int
    scheme: str
    seconds: float = 0.0
    hosts: list[dict[str, Any]] = field(default_factory=list)
    options: list[dict[str, Any]] = field(default_factory=list)
    order: list[dict[str, Any]] = field(default_factory=list)


def _configs(paths: Sequence[Path]) -> tuple[PartyConfig, list[PartyConfig]]:
    configs = [load_config(p) for p in paths]
    guests = [c for c in configs if c.role is Role.GUEST]
    hosts = [c for c in configs if c.role is Role.HOST]
    if len(guests) != 1 or not hosts or len(guests) + len(hosts) != len(configs):
        raise ConfigError(
            "audit takes a vertical federation's files: exactly one guest's and its hosts' "
            f"(got roles {', '.join(str(c.role) for c in configs)})"
        )
    return guests[0], hosts


def _stand_in(config: PartyConfig, n: int, options: AuditOptions, why: str) -> _Party:
    width = len(config.data.features) if config.data is not None else 0
    width = width or options.stand_in_features
    rng = np.random.default_rng([options.seed, 11, width])
    X = rng.standard_normal((n, width))
    return _Party(config.id, X, np.arange(n), f"stand-in: {width} random columns ({why})", True)


def _parties(
    guest: PartyConfig, hosts: list[PartyConfig], options: AuditOptions
) -> tuple[_Party, F64, list[_Party]]:
    if guest.data is None or not guest.data.path.exists():
        where = "no [data] path" if guest.data is None else f"{guest.data.path} is missing"
        raise ConfigError(f"audit needs the guest's file, with its labels: {where}")
    table = load_table(guest.data, require_label=True)
    assert table.y is not None  # require_label
    y = np.asarray(table.y, dtype=np.float64)
    if not np.isin(y, (0.0, 1.0)).all() or np.unique(y).size != 2:
        raise ConfigError(f"{guest.data.path}: the audit's label attack needs 0/1 labels")
    g = _Party(guest.id, np.asarray(table.X, dtype=np.float64), table.ids, str(guest.data.path))
    real: list[_Party | None] = []
    for h in hosts:
        if h.data is not None and h.data.path.exists():
            t = load_table(h.data, require_label=False)
            X = t.X.toarray() if hasattr(t.X, "toarray") else t.X
            real.append(_Party(h.id, np.asarray(X, dtype=np.float64), t.ids, str(h.data.path)))
        else:
            real.append(None)
    common = g.ids
    for p in real:
        if p is not None:
            common = np.intersect1d(common, p.ids)
    if common.size < 4 * MIN_KNOWN:
        raise ConfigError(f"only {common.size} ids are in every party's file: too few to audit")
    rng = np.random.default_rng(options.seed)
    common = rng.permutation(common)[: options.rows]
    out: list[_Party] = []
    for h, p in zip(hosts, real, strict=True):
        if p is None:
            why = "no [data] path" if h.data is None else f"{h.data.path} not on this machine"
            out.append(_stand_in(h, common.size, options, why))
        else:
            at = {v: i for i, v in enumerate(p.ids.tolist())}
            out.append(_Party(p.name, p.X[[at[v] for v in common.tolist()]], common, p.source))
    at = {v: i for i, v in enumerate(g.ids.tolist())}
    index = [at[v] for v in common.tolist()]
    return _Party(g.name, g.X[index], common, g.source), y[index], out


def _settings(guest: PartyConfig, options: AuditOptions) -> list[tuple[str, dict[str, Any]]]:
    """``(option, HeteroConfig settings)``: the files' own settings first, then the options
    that reduce the label leak (docs/explanation/defences.md), minus any equal to the first."""
    t = guest.train
    own = {
        "complete_secure": t.complete_secure,
        "tree_num_per_party": t.tree_num_per_party,
        "host_depth": t.host_depth,
        "guest_depth": t.guest_depth,
        "purity_bound": t.purity_bound,
        "label_dp_epsilon": t.label_dp_epsilon,
    }
    off = dict.fromkeys(own, 0)
    depth = t.params.max_depth
    found = [("as configured", own)]
    if depth >= 2:
        found.append(
            (
                f"recommended: host_depth=1, guest_depth={depth - 1}, "
                f"purity_bound={RECOMMENDED_BOUND:g}",
                {**off, "host_depth": 1, "guest_depth": depth - 1, "purity_bound": 0.2},
            )
        )
    found.append(("mix: tree_num_per_party=1", {**off, "tree_num_per_party": 1}))
    found.append((f"purity_bound={RECOMMENDED_BOUND:g}", {**off, "purity_bound": 0.2}))
    out: list[tuple[str, dict[str, Any]]] = []
    for name, settings in found:
        if all(settings != s for _, s in out):
            out.append((name, {**settings, "purity_bound": float(settings["purity_bound"])}))
    return out


@dataclass
class _Federation:
    """The aligned rows and the run's settings, shared by every option's federation."""

    guest: _Party
    hosts: list[_Party]
    y: F64
    train: npt.NDArray[np.int64]
    test: npt.NDArray[np.int64]
    known: npt.NDArray[np.int64]
    params: Any
    scheme: str


def run_audit(
    paths: Sequence[Path],
    options: AuditOptions = AuditOptions(),
    progress: Callable[[str], None] | None = None,
) -> AuditReport:
    """Run the federation of the party files ``paths`` in process under each option and the
    attacks on what every party received (module docstring)."""
    t0 = time.perf_counter()
    guest_config, host_configs = _configs(paths)
    guest, y, hosts = _parties(guest_config, host_configs, options)
    n = y.size
    cut = n - n // 3
    train_rows = np.arange(cut)
    share = max(options.known_share, MIN_KNOWN / train_rows.size)
    fed = _Federation(
        guest,
        hosts,
        y,
        train_rows,
        np.arange(cut, n),
        known_rows(y[train_rows], [share], options.seed)[share],
        guest_config.train.params.with_updates(seed=options.seed),
        options.scheme,
    )
    report = AuditReport(n, cut, int(fed.known.size), options.key_bits, fed.scheme)
    for h in hosts:
        alone = host_alone(h.X[train_rows], y[train_rows], fed.known, fed.params)
        report.hosts.append(
            {"host": h.name, "source": h.source, "stand_in": h.stand_in, "alone": alone}
        )
    with pinned_pool(options.workers) as pool:
        pool.start()  # once, for every option's federation
        for name, settings in _settings(guest_config, options):
            if progress is not None:
                progress(f"audit: training under {name}...")
            _option(report, fed, name, settings, options, pool)
    report.seconds = time.perf_counter() - t0
    return report


def _option(
    report: AuditReport,
    fed: _Federation,
    name: str,
    settings: dict[str, Any],
    options: AuditOptions,
    pool: AnyExecutor,
) -> None:
    """One option's federation and the attacks on it, added to ``report``."""
    config = HeteroConfig(
        key_bits=options.key_bits,
        allow_insecure_key=options.key_bits < 2048,
        scheme=fed.scheme,
        workers=options.workers,
        precompute=False,
        **settings,
    )
    train, test = fed.train, fed.test
    run = federate(
        fed.guest.X[train],
        fed.y[train],
        [h.X[train] for h in fed.hosts],
        fed.guest.X[test],
        [h.X[test] for h in fed.hosts],
        fed.params,
        config,
        options.workers,
        pool,
    )
    per_host = []
    for i, h in enumerate(fed.hosts):
        found = label_attack(flat_groups(run.views[i]), fed.y[train], fed.known, h.X[train])
        attack = max(found.values())
        per_host.append(
            {
                "attack": attack,
                "excess": attack - report.hosts[i]["alone"],
                "trees_seen": run.views[i].informed,
            }
        )
    report.options.append(
        {"option": name, "test_auc": auc(fed.y[test], run.proba), "hosts": per_host}
    )
    if not report.order:
        report.order = _orders(run, fed.hosts, test)


def _orders(
    run: Run, hosts: list[_Party], test_rows: npt.NDArray[np.int64]
) -> list[dict[str, Any]]:
    """The guest's feature-order attack on each host, under the files' own settings."""
    out = []
    for i, h in enumerate(hosts):
        top = int(np.argmax(run.hosts[i].feature_importance()))
        feature = h.X[test_rows, top]
        bits = feature_order(run.bits[i], feature)
        scores = abs(spearman(run.proba, feature))
        out.append({"host": h.name, "feature": top, "bits": bits["spearman"], "scores": scores})
    return out


def format_report(report: AuditReport) -> str:
    """The audit's table, as the command prints it."""
    lines = [
        f"audit: {report.rows} aligned rows ({report.train_rows} to train, "
        f"{report.rows - report.train_rows} held out for the test AUC); "
        f"{report.key_bits}-bit {report.scheme} keys for the audit only (the attacks read no "
        "ciphertext: the key size changes the time, not the figures); "
        f"{report.seconds:.1f} s",
    ]
    base = report.options[0]
    for i, h in enumerate(report.hosts):
        lines.append("")
        mark = " [STAND-IN]" if h["stand_in"] else ""
        lines.append(f"host {h['host']!r}{mark} ({h['source']}):")
        lines.append(
            f"  label inference from the row sets it sees, knowing {report.known} labels "
            f"(AUC on the other rows); from its own features alone: {h['alone']:.3f}"
        )
        head = f"  {'option':<58} {'attack':>7} {'excess':>8} {'test AUC':>9} {'trees seen':>11}"
        lines.append(head)
        for opt in report.options:
            fig = opt["hosts"][i]
            lines.append(
                f"  {opt['option']:<58} {fig['attack']:>7.3f} {fig['excess']:>+8.3f} "
                f"{opt['test_auc']:>9.3f} {fig['trees_seen']:>11}"
            )
        if any(opt["hosts"][i]["trees_seen"] == 0 for opt in report.options):
            lines.append(
                "  (trees seen 0: under that option the host took part in no tree and its "
                "features went unused; with purity_bound, the guest's trees never fell below it)"
            )
        first = base["hosts"][i]["excess"]
        for opt in report.options[1:]:
            now = opt["hosts"][i]["excess"]
            if first > 0:
                lines.append(
                    f"  -> {opt['option'].split(':')[0]}: excess {first:+.3f} -> {now:+.3f} "
                    f"({max(now, 0.0) / first:.2f} x), test AUC "
                    f"{opt['test_auc'] - base['test_auc']:+.3f}"
                )
    for o in report.order:
        lines.append("")
        lines.append(
            f"guest: orders host {o['host']!r}'s feature #{o['feature']} (its most used) from "
            f"the inference bits with Spearman {o['bits']:.3f}; the scores alone give "
            f"{o['scores']:.3f}"
        )
    return "\n".join(lines)
