"""The ``p2pboost`` command.

Each subcommand registers itself in :func:`build_parser` with a ``func`` that takes the parsed
arguments and returns the exit status. Errors from p2pboost's exception tree are printed as one
clear line on stderr with a non-zero exit status, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from p2pboost import __version__
from p2pboost.exceptions import P2PBoostError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="p2pboost",
        description="Peer-to-peer federated gradient boosting (SecureBoost) over mutual-TLS "
        "WebSockets.",
    )
    parser.add_argument("--version", action="version", version=f"p2pboost {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        status: int = func(args)
    except P2PBoostError as exc:
        print(f"p2pboost: error: {exc}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
