"""The ``p2pboost`` command.

Each subcommand registers itself in :func:`build_parser` with a ``func`` that takes the parsed
arguments and returns the exit status. Errors from p2pboost's exception tree are printed as one
clear line on stderr with a non-zero exit status, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from p2pboost import __version__
from p2pboost.exceptions import ConfigError, P2PBoostError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="p2pboost",
        description="Peer-to-peer federated gradient boosting (SecureBoost) over mutual-TLS "
        "WebSockets.",
    )
    parser.add_argument("--version", action="version", version=f"p2pboost {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_certs(commands)
    _add_demo(commands)
    return parser


# -- p2pboost demo ----------------------------------------------------------------------------


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from p2pboost.demo import DEFAULT_KEY_BITS, DEFAULT_MODE, DEFAULT_TIMEOUT, MODES

    demo = commands.add_parser(
        "demo",
        help="run a federation on this machine on bundled data and print its test metric",
        description="Run every party as a separate process over mutual-TLS WebSockets on "
        "127.0.0.1 (temporary certificates), on scikit-learn's bundled breast-cancer data (no "
        "download), and end with one JSON line: mode, trees, s_per_tree, metric and its value. "
        "hetero: guest (label + 10 features) and host (20 features); homo: two clients with "
        "disjoint rows and a server; plain: the plaintext core in this process.",
    )
    demo.add_argument("--mode", choices=MODES, default=DEFAULT_MODE, help="what to run")
    demo.add_argument("--trees", type=int, default=10, help="boosting rounds")
    demo.add_argument("--depth", type=int, default=5, help="maximum tree depth")
    demo.add_argument(
        "--key-bits",
        type=int,
        default=DEFAULT_KEY_BITS,
        help=f"Paillier key size for hetero (default {DEFAULT_KEY_BITS}, for speed; real "
        "deployments default to 2048)",
    )
    demo.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds before every party is stopped (default {DEFAULT_TIMEOUT:g})",
    )
    demo.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from p2pboost.demo import run_demo

    if args.trees < 1 or args.depth < 1:
        raise ConfigError("--trees and --depth must be at least 1")
    if not args.timeout > 0:
        raise ConfigError("--timeout must be > 0")
    result = run_demo(
        args.mode,
        trees=args.trees,
        depth=args.depth,
        key_bits=args.key_bits,
        timeout=args.timeout,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(
        f"p2pboost demo ({result.mode}): {result.trees} trees, "
        f"{result.s_per_tree * 1000:.1f} ms per tree, test {result.metric} {result.value:.4f}"
    )
    print(result.to_json())
    return 0


# -- p2pboost certs ---------------------------------------------------------------------------


def _add_certs(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    certs = commands.add_parser(
        "certs",
        help="create the federation's CA, keys and certificates",
        description="Certificates for mutual TLS between the parties of a federation "
        "(see p2pboost.certs).",
    )
    certs.set_defaults(func=lambda _args: _usage(certs))
    sub = certs.add_subparsers(dest="certs_command", metavar="ACTION")

    init = sub.add_parser(
        "init",
        help="create a CA and a key + certificate for every party",
        description="Write OUT/ca/{ca.pem,ca-key.pem} and OUT/<party>/{ca.pem,cert.pem,key.pem}.",
    )
    init.add_argument("--out", required=True, help="output directory")
    init.add_argument("--parties", required=True, help="comma-separated party ids")
    init.add_argument("--days", type=int, default=365, help="certificate validity (days)")
    init.set_defaults(func=_certs_init)

    request = sub.add_parser(
        "request",
        help="create this party's key and a certificate signing request",
        description="Write OUT/key.pem (mode 0600, never leaves this machine) and "
        "OUT/<party>.csr (send it to the CA holder).",
    )
    request.add_argument("--party", required=True, help="this party's id")
    request.add_argument("--out", required=True, help="output directory")
    request.set_defaults(func=_certs_request)

    sign = sub.add_parser(
        "sign",
        help="sign a party's CSR with the federation's CA",
        description="Check the CSR and write the party's certificate.",
    )
    sign.add_argument("--ca", required=True, help="CA directory (ca.pem, ca-key.pem)")
    sign.add_argument("--csr", required=True, help="the party's .csr file")
    sign.add_argument("--out", required=True, help="certificate file to write")
    sign.add_argument("--party", help="refuse unless the CSR requests this party id")
    sign.add_argument("--days", type=int, default=365, help="certificate validity (days)")
    sign.set_defaults(func=_certs_sign)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _certs_init(args: argparse.Namespace) -> int:
    from p2pboost import certs

    parties = [p.strip() for p in args.parties.split(",") if p.strip()]
    written = certs.init(args.out, parties, days=args.days)
    print(f"CA: {Path(args.out) / 'ca'} (keep ca-key.pem offline)")
    for party, directory in written.items():
        print(f"{party}: {directory}")
    return 0


def _certs_request(args: argparse.Namespace) -> int:
    from p2pboost import certs

    csr = certs.request(args.party, args.out)
    print(f"key: {Path(args.out) / certs.PARTY_KEY} (keep it here)")
    print(f"request: {csr} (send it to the CA holder)")
    return 0


def _certs_sign(args: argparse.Namespace) -> int:
    from p2pboost import certs

    party = certs.sign(args.csr, args.ca, args.out, party_id=args.party, days=args.days)
    print(f"certificate for party {party!r}: {args.out}")
    return 0


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
