"""The ``p2pboost`` command (click).

Every subcommand returns its exit status. Errors from p2pboost's exception tree (and from the
operating system: a file that cannot be written) end the command with one clear line on
stderr, ``p2pboost: error: ...`` (with ``--log-format json``, one JSON record at level error
instead), and exit status 1, never a traceback; usage errors are click's, with status 2
(raised as ``SystemExit`` by :func:`main`, as argparse does). Results go to stdout, the last
line one JSON object where a command has a result (``demo``, ``party``, ``predict``);
progress and logs go to stderr (see :mod:`p2pboost.app._console`). What only one command needs
(matplotlib for ``report``, the serving stack) is imported inside that command.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from p2pboost import __version__
from p2pboost.app._console import Console, JsonFormatter, unconfigure
from p2pboost.app._signals import stop_on_sigterm
from p2pboost.app.demo import DEFAULT_KEY_BITS, DEFAULT_MODE, DEFAULT_TIMEOUT, MODES
from p2pboost.app.explain import predict_changes, predict_options
from p2pboost.crypto.keys import SCHEMES
from p2pboost.exceptions import ConfigError, P2PBoostError

__all__ = ["cli", "main"]

_FILE = click.Path(exists=False, dir_okay=False, path_type=Path)
_DIR = click.Path(file_okay=False, path_type=Path)


def _console() -> Console:
    console = click.get_current_context().find_object(Console)
    return console if console is not None else Console()


class _Command(click.Group):
    """The top-level group: reports p2pboost's errors in the chosen log style.

    Text: one line ``p2pboost: error: ...``. ``--log-format json``: one JSON record at level
    error, so a service's log shipper never meets a line it cannot parse.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (P2PBoostError, OSError) as exc:
            console = ctx.find_object(Console)
            if console is not None and console.log_format == "json":
                logging.getLogger("p2pboost").error("%s", _one_line(exc))
                raise click.exceptions.Exit(1) from None
            raise


#: Where ``--help`` sends a reader for more: pages of the docs, by their path in the source tree
#: (the package has no hosted docs site; tests/cli checks that each page exists).
_DOCS_EPILOG = (
    "Guides: docs/README.md. Every command and option: docs/reference/cli.md; every key of a "
    "party file: docs/reference/config.md (in the p2pboost source tree)."
)


@click.group(
    cls=_Command,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_DOCS_EPILOG,
)
@click.version_option(__version__, prog_name="p2pboost", message="%(prog)s %(version)s")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or info logs on stderr.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per log record on stderr (for services; no bars).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@click.pass_context
def cli(ctx: click.Context, quiet: bool, log_format: str, log_level: str) -> None:
    """Peer-to-peer federated gradient boosting (SecureBoost) over mutual-TLS WebSockets."""
    console = Console(quiet=quiet, log_format=log_format, log_level=log_level)
    ctx.obj = console
    handler = console.configure()
    ctx.call_on_close(lambda: unconfigure(handler))


# -- p2pboost certs ---------------------------------------------------------------------------


@cli.group()
def certs() -> None:
    """Certificates for mutual TLS between the parties of a federation."""


@certs.command("init")
@click.option("--out", required=True, type=_DIR, help="Output directory.")
@click.option("--parties", required=True, help="Comma-separated party ids.")
@click.option("--days", type=click.IntRange(min=1), default=365, show_default=True)
def certs_init(out: Path, parties: str, days: int) -> int:
    """Create a CA and a key + certificate for every party.

    Writes OUT/ca/{ca.pem,ca-key.pem} and OUT/<party>/{ca.pem,cert.pem,key.pem}.
    """
    from p2pboost import certs as certs_mod

    ids = [p.strip() for p in parties.split(",") if p.strip()]
    written = certs_mod.init(out, ids, days=days)
    click.echo(f"CA: {out / 'ca'} (keep ca-key.pem offline)")
    for party, directory in written.items():
        click.echo(f"{party}: {directory}")
    return 0


@certs.command("request")
@click.option("--party", required=True, help="This party's id.")
@click.option("--out", required=True, type=_DIR, help="Output directory.")
def certs_request(party: str, out: Path) -> int:
    """Create this party's key and a certificate signing request.

    Writes OUT/key.pem (mode 0600, never leaves this machine) and OUT/<party>.csr (send it to
    the CA holder).
    """
    from p2pboost import certs as certs_mod

    csr = certs_mod.request(party, out)
    click.echo(f"key: {out / certs_mod.PARTY_KEY} (keep it here)")
    click.echo(f"request: {csr} (send it to the CA holder)")
    return 0


@certs.command("sign")
@click.option("--ca", required=True, type=_DIR, help="CA directory (ca.pem, ca-key.pem).")
@click.option("--csr", required=True, type=_FILE, help="The party's .csr file.")
@click.option("--out", required=True, type=_FILE, help="Certificate file to write.")
@click.option("--party", default=None, help="Refuse unless the CSR requests this party id.")
@click.option("--days", type=click.IntRange(min=1), default=365, show_default=True)
def certs_sign(ca: Path, csr: Path, out: Path, party: str | None, days: int) -> int:
    """Check a party's CSR and sign it with the federation's CA."""
    from p2pboost import certs as certs_mod

    signed = certs_mod.sign(csr, ca, out, party_id=party, days=days)
    click.echo(f"certificate for party {signed!r}: {out}")
    return 0


# -- p2pboost demo ----------------------------------------------------------------------------

_DEMO_HELP = """Run a federation on this machine and print its test metric.

Every party is a separate process over mutual-TLS WebSockets on 127.0.0.1 (temporary
certificates). Data: scikit-learn's bundled breast-cancer set (no download), or your own
CSVs: --guest and --host (hetero; they share an id column, the guest's holds the 0/1 label),
--client per client (homo; the same columns and a 0/1 label in each) or --data (plain).
hetero: guest (label + features) and host (features); homo: clients with disjoint rows and
a server; plain: the plaintext core in this process. The last line is one JSON object: mode,
trees, s_per_tree, metric and its value.
"""


@cli.command("demo", help=_DEMO_HELP)
@click.option("--mode", type=click.Choice(MODES), default=DEFAULT_MODE, show_default=True)
@click.option("--trees", type=int, default=10, show_default=True, help="Boosting rounds.")
@click.option("--depth", type=int, default=5, show_default=True, help="Maximum tree depth.")
@click.option(
    "--key-bits",
    type=int,
    default=DEFAULT_KEY_BITS,
    show_default=True,
    help="Key size (hetero). The demo's data is public; real deployments use 2048.",
)
@click.option(
    "--scheme",
    type=click.Choice(SCHEMES),
    default="paillier",
    show_default=True,
    help="Additive encryption of the gradients (hetero): Paillier or Okamoto-Uchiyama.",
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds before every party is stopped.",
)
@click.option("--guest", "guest_csv", type=_FILE, help="The guest's CSV (id, label, features).")
@click.option("--host", "host_csv", type=_FILE, help="The host's CSV (id, features).")
@click.option(
    "--client",
    "client_csvs",
    type=_FILE,
    multiple=True,
    help="A client's CSV (id, label, features; homo; give two or more).",
)
@click.option(
    "--data", "data_csv", type=_FILE, help="The CSV to train on (id, label, features; plain)."
)
@click.option("--id-column", default="id", show_default=True, help="Id column of both CSVs.")
@click.option("--label-column", default="y", show_default=True, help="Label column (guest).")
@click.option("--out", "out", type=_DIR, default=None, help="Save every party's model file here.")
def demo(
    mode: str,
    trees: int,
    depth: int,
    key_bits: int,
    scheme: str,
    timeout: float,
    guest_csv: Path | None,
    host_csv: Path | None,
    client_csvs: tuple[Path, ...],
    data_csv: Path | None,
    id_column: str,
    label_column: str,
    out: Path | None,
) -> int:
    from p2pboost.app.demo import run_demo
    from p2pboost.app.demo_data import LabelledData, VerticalData, csv_labelled, csv_vertical

    if trees < 1 or depth < 1:
        raise ConfigError("--trees and --depth must be at least 1")
    if not timeout > 0:
        raise ConfigError("--timeout must be > 0")
    if (guest_csv is None) != (host_csv is None):
        raise ConfigError("give both --guest and --host, or neither")
    if guest_csv is not None and mode != "hetero":
        raise ConfigError("--guest and --host are for --mode hetero")
    if client_csvs and mode != "homo":
        raise ConfigError("--client is for --mode homo")
    if data_csv is not None and mode != "plain":
        raise ConfigError("--data is for --mode plain")
    data: VerticalData | LabelledData | None = None
    if guest_csv is not None and host_csv is not None:
        data = csv_vertical(guest_csv, host_csv, id_column=id_column, label_column=label_column)
    elif client_csvs or data_csv is not None:
        files: list[Path] = list(client_csvs) if data_csv is None else [data_csv]
        data = csv_labelled(files, id_column=id_column, label_column=label_column)
    console = _console()
    log = logging.getLogger("p2pboost.app.demo")
    result = run_demo(
        mode,
        trees=trees,
        depth=depth,
        key_bits=key_bits,
        scheme=scheme,
        timeout=timeout,
        progress=None if console.quiet else log.info,
        data=data,
        on_tree=console.tree_progress("demo"),
        out=out,
    )
    if not console.quiet:
        click.echo(
            f"p2pboost demo ({result.mode}): {result.trees} trees, "
            f"{result.s_per_tree * 1000:.1f} ms per tree, test {result.metric} {result.value:.4f}"
        )
    click.echo(result.to_json())
    return 0


# -- p2pboost party / predict / serve ---------------------------------------------------------

_CONFIG = click.option(
    "--config",
    "config_path",
    required=True,
    type=_FILE,
    help="This party's TOML file (every key: docs/reference/config.md).",
)


def _run_party(config_path: Path, task: str | None, *, resume: bool = False, **predict: Any) -> int:
    from p2pboost.app.config import load_config
    from p2pboost.app.party import run_party

    config = load_config(config_path).with_task(task).with_predict(**predict)
    if resume:
        config = config.with_resume()
    reporter = _console().reporter(config.id)
    try:
        result = asyncio.run(stop_on_sigterm(run_party(config, reporter)))
    except KeyboardInterrupt:
        _stopped(config.id, "interrupted")
        return 130
    except asyncio.CancelledError:
        _stopped(config.id, "stopped (SIGTERM)")
        return 143
    click.echo(json.dumps(result.to_dict()))
    return 0


def _stopped(party: str, how: str) -> None:
    """A clean stop's one line, no traceback: ``p2pboost: host: stopped (SIGTERM)``, or with
    ``--log-format json`` a record at level info (a stop asked for is not an error)."""
    if _console().log_format == "json":
        logging.getLogger(f"p2pboost.{party}").info("%s", how)
    else:
        click.echo(f"p2pboost: {party}: {how}", err=True)


@cli.command("party")
@_CONFIG
@click.option(
    "--task",
    type=click.Choice(["psi", "train", "predict", "serve"]),
    default=None,
    help="Override the file's task.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue vertical training from the checkpoints in [train] checkpoint_dir.",
)
def party(config_path: Path, task: str | None, resume: bool) -> int:
    """Run one party's node and task from its config file.

    Tasks: psi (common ids to workdir/intersection.csv), train (the party's model file),
    predict (guest: id,score CSV; hosts answer), serve (guest endpoint; hosts answer). The last
    stdout line is a JSON summary. With --resume a vertical party continues its training where
    every party's checkpoint is (the others continue on their own: see docs).
    """
    return _run_party(config_path, task, resume=resume)


@cli.command("predict")
@_CONFIG
@predict_options
def predict(config_path: Path, contributions: bool, reasons: int | None, force: bool) -> int:
    """Batch prediction: `party --task predict` (guest writes id,score; hosts answer)."""
    return _run_party(config_path, "predict", **predict_changes(contributions, reasons, force))


@cli.command("serve")
@_CONFIG
def serve(config_path: Path) -> int:
    """Online serving: `party --task serve` (guest endpoint at [serve] listen; hosts answer)."""
    return _run_party(config_path, "serve")


@cli.command("binning")
@_CONFIG
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
    reporter = _console().reporter(config.id)
    result = asyncio.run(stop_on_sigterm(run_binning(config, options, reporter)))
    click.echo(json.dumps(result.to_dict()))
    return 0


@cli.command("audit")
@click.argument("configs", nargs=-1, required=True, type=_FILE)
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


@cli.command("stability")
@_CONFIG
@click.option("--batch", required=True, type=_FILE, help="The new rows (this party's columns).")
@click.option("--scores", type=_FILE, default=None, help="Guest: id,score of the new rows.")
@click.option(
    "--train-scores", type=_FILE, default=None, help="Guest: id,score of the training rows."
)
@click.option(
    "--out", type=_FILE, default=None, help="Result file (default workdir/stability.json)."
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


# -- p2pboost init ----------------------------------------------------------------------------


@cli.command("init")
@click.argument("directory", type=_DIR)
@click.option("--guest", default=None, help="Vertical: the label holder's party id.")
@click.option("--hosts", default="", help="Vertical: comma-separated host ids.")
@click.option("--server", default=None, help="Horizontal: the server's party id.")
@click.option("--clients", default="", help="Horizontal: comma-separated client ids.")
@click.option("--trees", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--key-bits", type=click.IntRange(min=1024), default=2048, show_default=True)
@click.option("--port", type=click.IntRange(1024, 65000), default=8443, show_default=True)
@click.option("--force", is_flag=True, help="Write into a directory that is not empty.")
def init(
    directory: Path,
    guest: str | None,
    hosts: str,
    server: str | None,
    clients: str,
    trees: int,
    key_bits: int,
    port: int,
    force: bool,
) -> int:
    """A ready federation on this machine: certificates, one config per party, data, commands."""
    from p2pboost.app.scaffold import init_federation

    fed = init_federation(
        directory,
        guest=guest,
        hosts=[h for h in hosts.split(",") if h],
        server=server,
        clients=[c for c in clients.split(",") if c],
        trees=trees,
        key_bits=key_bits,
        port=port,
        force=force,
    )
    click.echo(f"wrote {fed.directory}: {', '.join(p.name for p in fed.configs.values())}")
    click.echo(f"run, in {fed.directory}, one terminal each (see {fed.readme.name}):")
    for command in fed.commands():
        click.echo(f"  {command}")
    return 0


# -- p2pboost config check ---------------------------------------------------------------------


@cli.group("config")
def config_group() -> None:
    """Party config files."""


@config_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def config_check(file: Path, as_json: bool) -> int:
    """Check a party's file and what it points to, without running it (exit 1 on a problem)."""
    from p2pboost.app.check import check_config

    report = check_config(file)
    if as_json:
        click.echo(json.dumps(report.to_dict()))
    else:
        for line in report.checked:
            click.echo(f"ok       {line}")
        for line in report.problems:
            click.echo(f"PROBLEM  {line}")
        click.echo(f"{file}: " + ("ready" if report.ok else f"{len(report.problems)} problem(s)"))
    return 0 if report.ok else 1


# -- p2pboost inspect / report ----------------------------------------------------------------


@cli.command("inspect")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
def inspect_model(model: Path, as_json: bool) -> int:
    """What a model file holds (this party's view only)."""
    from p2pboost.app.model_info import describe, format_description

    description = describe(model)
    click.echo(json.dumps(description) if as_json else format_description(description))
    return 0


@cli.command("report")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=_DIR,
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


@cli.command("export")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["xgboost", "onnx"]),
    default="xgboost",
    show_default=True,
    help="The file format to write: XGBoost JSON or ONNX (needs p2pboost[onnx]).",
)
@click.option("--out", required=True, type=_FILE, help="The file to write.")
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


# -- entry point ------------------------------------------------------------------------------


#: The top-level group's options, accepted after the subcommand too (see :func:`hoist_globals`).
_GLOBAL_FLAGS = ("-q", "--quiet")
_GLOBAL_VALUES = ("--log-format", "--log-level")


def hoist_globals(args: Sequence[str]) -> list[str]:
    """``args`` with the top-level options moved to the front, where click reads them, so
    ``p2pboost party guest.toml --log-format json`` means ``p2pboost --log-format json party
    guest.toml`` (no subcommand has an option of these names); nothing after ``--`` moves."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        if arg in _GLOBAL_FLAGS or (arg.split("=", 1)[0] in _GLOBAL_VALUES and "=" in arg):
            front.append(arg)
        elif arg in _GLOBAL_VALUES and i + 1 < len(args):
            front += args[i : i + 2]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


def _json_mode(args: Sequence[str]) -> bool:
    """Whether the command line asks for JSON logs (then every error is a JSON record too)."""
    for i, arg in enumerate(args):
        if arg == "--":
            return False
        if arg == "--log-format=json" or (
            arg == "--log-format" and i + 1 < len(args) and args[i + 1] == "json"
        ):
            return True
    return False


def _json_error(message: str) -> None:
    """One JSON record on stderr, as the console's formatter writes them."""
    record = logging.LogRecord("p2pboost", logging.ERROR, __file__, 0, message, (), None)
    click.echo(JsonFormatter().format(record), err=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (the console script exits with it).

    With ``--log-format json`` everything written to stderr is JSON, bad command lines too.
    """
    args = hoist_globals(list(argv) if argv is not None else sys.argv[1:])
    json_mode = _json_mode(args)
    try:
        status = cli.main(args=args, prog_name="p2pboost", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # a group alone: its help, status 2
        exc.show()
        return exc.exit_code
    except click.UsageError as exc:
        # As argparse and click's standalone mode: SystemExit(2), so code calling main()
        # sees a bad command line like any argument parser's.
        if json_mode:
            _json_error("usage: " + " ".join(exc.format_message().split()))
        else:
            exc.show()
        raise SystemExit(exc.exit_code) from None
    except click.ClickException as exc:
        if json_mode:
            _json_error(" ".join(exc.format_message().split()))
        else:
            exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("p2pboost: aborted", err=True)
        return 130
    except (P2PBoostError, OSError) as exc:
        click.echo(f"p2pboost: error: {_one_line(exc)}", err=True)
        return 1
    return status if isinstance(status, int) else 0


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
