"""The analysis commands on a party's data: ``p2pboost binning`` (federated WOE/IV and
selection by IV), ``p2pboost audit`` (what each partner could infer, before a real run) and
``p2pboost stability`` (population stability of a new batch against the training rows).

Apart from :mod:`p2pboost.app.cli` because they are a concept of their own: each examines
the parties' data (what it says about the label, what it would leak, how it drifts) rather
than producing the model or the scores that ``party``, ``predict`` and ``serve`` produce.
Their work is in :mod:`p2pboost.app.binning`, :mod:`p2pboost.app.audit` and
:mod:`p2pboost.app.stability`, imported inside each command (a command pays only for what it
uses). :mod:`p2pboost.app.cli` registers them on the top-level group.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from p2pboost.app._cli_options import CONFIG, FILE, console
from p2pboost.app._signals import stop_on_sigterm

__all__ = ["audit", "binning", "stability"]


@click.command("binning")
@CONFIG
@click.option("--threshold", type=float, default=None, help="Guest: keep features with IV >= this.")
@click.option("--top-k", type=int, default=None, help="Guest: keep the k features of largest IV.")
@click.option(
    "--monotone",
    type=click.Choice(["auto", "increasing", "decreasing"]),
    default=None,
    help="Guest: merge adjacent bins until each feature's WOE is monotone.",
)
@click.option("--force", is_flag=True, help="Replace binning files that already exist.")
def binning(
    config_path: Path, threshold: float | None, top_k: int | None, monotone: Any, force: bool
) -> int:
    """Federated WOE/IV of every party's features and selection by IV (vertical parties).

    Aligns the rows by PSI as training does, then the guest writes workdir/binning.csv and
    binning.json (every party's WOE and IV); each host writes binning.json with its own kept
    features. The last stdout line is a JSON summary.
    """
    from p2pboost.app.binning import BinningOptions, run_binning
    from p2pboost.app.config import load_config

    config = load_config(config_path)
    options = BinningOptions(threshold, top_k, monotone, force)
    reporter = console().reporter(config.id)
    result = asyncio.run(stop_on_sigterm(run_binning(config, options, reporter)))
    click.echo(json.dumps(result.to_dict()))
    return 0


@click.command("audit")
@click.argument("configs", nargs=-1, required=True, type=FILE)
@click.option(
    "--known-share",
    type=float,
    default=0.01,
    show_default=True,
    help="Share of the rows whose labels a host is assumed to know (at least 20).",
)
@click.option(
    "--key-bits",
    type=click.Choice(["1024", "2048"]),
    default="1024",
    show_default=True,
    help="The audit's own key size (no figure depends on it).",
)
@click.option(
    "--rows", type=int, default=20000, show_default=True, help="Use at most this many aligned rows."
)
@click.option(
    "--scheme",
    type=click.Choice(["ou", "paillier"]),
    default="ou",
    show_default=True,
    help="The audit's own encryption (no figure depends on it).",
)
def audit(
    configs: tuple[Path, ...], known_share: float, key_bits: str, rows: int, scheme: str
) -> int:
    """What each partner could infer, before anything is trained for real: runs the vertical
    federation of these party files in this process (stand-ins for files not on this
    machine), the known attacks on what each party receives, and the options that reduce
    them (docs/explanation/defences.md)."""
    from p2pboost.app.audit import AuditOptions, format_report, run_audit

    if not 0 < known_share < 1:
        raise click.BadParameter("must be in (0, 1)", param_hint="--known-share")
    options = AuditOptions(
        key_bits=int(key_bits), scheme=scheme, known_share=known_share, rows=rows
    )
    report = run_audit(list(configs), options, lambda line: click.echo(line, err=True))
    click.echo(format_report(report))
    return 0


@click.command("stability")
@CONFIG
@click.option("--batch", required=True, type=FILE, help="The new rows (this party's columns).")
@click.option("--scores", type=FILE, default=None, help="Guest: id,score of the new rows.")
@click.option(
    "--train-scores", type=FILE, default=None, help="Guest: id,score of the training rows."
)
@click.option(
    "--out", type=FILE, default=None, help="Result file (default workdir/stability.json)."
)
@click.option("--force", is_flag=True, help="Replace the result file if it exists.")
def stability(
    config_path: Path,
    batch: Path,
    scores: Path | None,
    train_scores: Path | None,
    out: Path | None,
    force: bool,
) -> int:
    """Population stability (PSI) of this party's features, training rows against a new batch,
    in the model's bins; the guest also of its scores (files of `p2pboost predict`). Prints
    the table with bands (stable < 0.1 <= watch <= 0.25 < shift); the last line is JSON.
    """
    from p2pboost.app.config import load_config
    from p2pboost.app.stability import format_table, run_stability

    config = load_config(config_path)
    result, table = run_stability(
        config, batch, scores=scores, train_scores=train_scores, out=out, force=force
    )
    click.echo(format_table(table))
    click.echo(json.dumps(result.to_dict()))
    return 0
