"""The ``p2pboost`` command (click).

Every subcommand returns its exit status. Errors from p2pboost's exception tree (and from the
operating system: a file that cannot be written) end the command with one clear line on
stderr, ``p2pboost: error: ...`` (with ``--log-format json``, one JSON record at level error
instead), and exit status 1, never a traceback; usage errors are click's, with status 2
(raised as ``SystemExit`` by :func:`main`, as argparse does). Results go to stdout, the last
line one JSON object where a command has a result (``demo``, ``party``, ``predict``);
progress and logs go to stderr (see :mod:`p2pboost.app._console`). What only one command needs
(matplotlib for ``report``, the serving stack) is imported inside that command.

This module holds the top-level group, its entry point and the commands that run parties
(``demo``, ``party``, ``predict``, ``serve``); the other commands live in modules of their
own by concept (see ``_ELSEWHERE``), so that each module stays about one thing, and are
registered on the group here.
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
from p2pboost.app._cli_analysis import audit, binning, stability
from p2pboost.app._cli_models import export, inspect_model, report
from p2pboost.app._cli_options import CONFIG, DIR, FILE
from p2pboost.app._cli_options import console as _console
from p2pboost.app._cli_setup import certs, config_group, init
from p2pboost.app._console import Console, JsonFormatter, unconfigure
from p2pboost.app._signals import stop_on_sigterm
from p2pboost.app.demo import DEFAULT_KEY_BITS, DEFAULT_MODE, DEFAULT_TIMEOUT, MODES
from p2pboost.app.explain import predict_changes, predict_options
from p2pboost.crypto.keys import SCHEMES
from p2pboost.exceptions import ConfigError, P2PBoostError

__all__ = ["cli", "main"]


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
@click.option("--guest", "guest_csv", type=FILE, help="The guest's CSV (id, label, features).")
@click.option("--host", "host_csv", type=FILE, help="The host's CSV (id, features).")
@click.option(
    "--client",
    "client_csvs",
    type=FILE,
    multiple=True,
    help="A client's CSV (id, label, features; homo; give two or more).",
)
@click.option(
    "--data", "data_csv", type=FILE, help="The CSV to train on (id, label, features; plain)."
)
@click.option("--id-column", default="id", show_default=True, help="Id column of both CSVs.")
@click.option("--label-column", default="y", show_default=True, help="Label column (guest).")
@click.option("--out", "out", type=DIR, default=None, help="Save every party's model file here.")
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
@CONFIG
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
@CONFIG
@predict_options
def predict(config_path: Path, contributions: bool, reasons: int | None, force: bool) -> int:
    """Batch prediction: `party --task predict` (guest writes id,score; hosts answer)."""
    return _run_party(config_path, "predict", **predict_changes(contributions, reasons, force))


@cli.command("serve")
@CONFIG
def serve(config_path: Path) -> int:
    """Online serving: `party --task serve` (guest endpoint at [serve] listen; hosts answer)."""
    return _run_party(config_path, "serve")


# -- the commands of their own modules -------------------------------------------------------

#: The subcommands kept in modules of their own, by concept: setting up a federation
#: (:mod:`p2pboost.app._cli_setup`), analysing its data (:mod:`p2pboost.app._cli_analysis`) and
#: reading model files (:mod:`p2pboost.app._cli_models`). ``--help`` lists every command by
#: name whatever module holds it.
_ELSEWHERE: tuple[click.Command, ...] = (
    certs,
    init,
    config_group,
    binning,
    audit,
    stability,
    inspect_model,
    report,
    export,
)
for _command in _ELSEWHERE:
    cli.add_command(_command)


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
