"""The commands on a model file: ``p2pboost inspect`` (what it holds), ``p2pboost report``
(its plots) and ``p2pboost export`` (XGBoost JSON or ONNX).

Apart from :mod:`p2pboost.app.cli` because they are a concept of their own: each reads a
model file that training wrote and needs no peer, no node and no party file.
:mod:`p2pboost.app.cli` registers them on the top-level group.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from p2pboost.app._cli_options import DIR, FILE
from p2pboost.exceptions import ConfigError

__all__ = ["export", "inspect_model", "report"]


@click.command("inspect")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
def inspect_model(model: Path, as_json: bool) -> int:
    """What a model file holds (this party's view only)."""
    from p2pboost.app.model_info import describe, format_description

    description = describe(model)
    click.echo(json.dumps(description) if as_json else format_description(description))
    return 0


@click.command("report")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=DIR,
    default=None,
    help="Output directory (default: the model file's own directory).",
)
@click.option("--force", is_flag=True, help="Replace plot files that already exist.")
@click.option(
    "--stability",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A result file of `p2pboost stability`: its table and plot too.",
)
def report(model: Path, out: Path | None, force: bool, stability: Path | None) -> int:
    """Learning-curve and feature-importance plots (PNG) of this party's model.

    Writes <model>_importance.png and, when the file holds an evaluation history,
    <model>_learning_curve.png; an existing plot is replaced only with --force.
    """
    from p2pboost.app.report import write_report

    for path in write_report(model, out, overwrite=force, stability=stability):
        click.echo(str(path))
    return 0


@click.command("export")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["xgboost", "onnx"]),
    default="xgboost",
    show_default=True,
    help="The file format to write: XGBoost JSON or ONNX (needs p2pboost[onnx]).",
)
@click.option("--out", required=True, type=FILE, help="The file to write.")
@click.option(
    "--host-part",
    "host_parts",
    type=click.Path(dir_okay=False, path_type=Path),
    multiple=True,
    help="A vertical model: each host's model file, in the model's host order (its consent).",
)
@click.option(
    "--with-statistics",
    is_flag=True,
    help="Write the nodes' covers (sum_hessian) and gains into an XGBoost file: left out by "
    "default (they help reconstruct training rows); TreeSHAP on the export needs them.",
)
def export(
    model: Path, fmt: str, out: Path, host_parts: tuple[Path, ...], with_statistics: bool
) -> int:
    """A plaintext, horizontal or (with every host's part) vertical model as an XGBoost JSON
    or ONNX model file: the trees without per-node statistics unless --with-statistics (the
    model file itself is not changed)."""
    from p2pboost.app.model_info import load_model
    from p2pboost.files import atomic_write
    from p2pboost.gbdt.booster import Booster
    from p2pboost.gbdt.export import STATISTICS_OMITTED, to_xgboost
    from p2pboost.gbdt.export_onnx import to_onnx
    from p2pboost.hetero.model import GuestModel, HostModel, merged_model

    loaded = load_model(model)
    if isinstance(loaded, GuestModel) and host_parts:
        parts = [load_model(p) for p in host_parts]
        if not all(isinstance(p, HostModel) for p in parts):
            raise ConfigError("every --host-part must be a host's model file")
        loaded = merged_model(loaded, [p for p in parts if isinstance(p, HostModel)])
    elif host_parts:
        raise ConfigError("--host-part goes with a vertical guest's model file")
    if isinstance(loaded, GuestModel):
        raise ConfigError(
            f"{model} is the guest's part of a vertical model: give every host's part "
            f"(--host-part FILE per host, in the order {', '.join(loaded.hosts)}), which each "
            "host hands over only if it agrees to reveal its thresholds"
        )
    if not isinstance(loaded, Booster):
        raise ConfigError(
            f"{model} is a host's part of a vertical model: the guest exports the whole model "
            "with every host's part"
        )
    if fmt == "onnx":
        atomic_write(out, to_onnx(loaded))
    else:
        exported = to_xgboost(loaded, with_statistics=with_statistics)
        atomic_write(out, json.dumps(exported).encode("utf-8"))
        if not with_statistics:
            click.echo(f"per-node statistics {STATISTICS_OMITTED}", err=True)
    click.echo(str(out))
    return 0
