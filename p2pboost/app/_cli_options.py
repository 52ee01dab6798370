"""What the ``p2pboost`` command's modules share: path types, ``--config``, the console.

The subcommands live in several modules by concept (:mod:`p2pboost.app.cli` itself, the
setup commands, the analysis commands, the model-file commands), each registered on the
top-level group by :mod:`p2pboost.app.cli`. They take their common options from here, so an
option reads the same in every command and no command module needs the group's own module
(which imports them all).
"""

from __future__ import annotations

from pathlib import Path

import click

from p2pboost.app._console import Console

__all__ = ["CONFIG", "DIR", "FILE", "console"]

#: A file argument or option (it need not exist yet: the command says what it wants).
FILE = click.Path(exists=False, dir_okay=False, path_type=Path)
#: A directory argument or option.
DIR = click.Path(file_okay=False, path_type=Path)

#: ``--config``: the party file of the commands that act as one party.
CONFIG = click.option(
    "--config",
    "config_path",
    required=True,
    type=FILE,
    help="This party's TOML file (every key: docs/reference/config.md).",
)


def console() -> Console:
    """The console of the running command (the top-level group's options), or a default."""
    found = click.get_current_context().find_object(Console)
    return found if found is not None else Console()
