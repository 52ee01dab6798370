"""The commands that set up a federation before anything runs: ``p2pboost certs`` (the
federation's CA and each party's certificate), ``p2pboost init`` (a ready federation on this
machine) and ``p2pboost config check`` (a party's file and what it points to).

Apart from :mod:`p2pboost.app.cli` because they are a concept of their own: none of them
starts a node or reads a model, and each is done before a party's first ``party``.
:mod:`p2pboost.app.cli` registers them on the top-level group.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from p2pboost.app._cli_options import DIR, FILE

__all__ = ["certs", "config_group", "init"]


# -- p2pboost certs ---------------------------------------------------------------------------


@click.group()
def certs() -> None:
    """Certificates for mutual TLS between the parties of a federation."""


@certs.command("init")
@click.option("--out", required=True, type=DIR, help="Output directory.")
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
@click.option("--out", required=True, type=DIR, help="Output directory.")
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
@click.option("--ca", required=True, type=DIR, help="CA directory (ca.pem, ca-key.pem).")
@click.option("--csr", required=True, type=FILE, help="The party's .csr file.")
@click.option("--out", required=True, type=FILE, help="Certificate file to write.")
@click.option("--party", default=None, help="Refuse unless the CSR requests this party id.")
@click.option("--days", type=click.IntRange(min=1), default=365, show_default=True)
def certs_sign(ca: Path, csr: Path, out: Path, party: str | None, days: int) -> int:
    """Check a party's CSR and sign it with the federation's CA."""
    from p2pboost import certs as certs_mod

    signed = certs_mod.sign(csr, ca, out, party_id=party, days=days)
    click.echo(f"certificate for party {signed!r}: {out}")
    return 0


# -- p2pboost init ----------------------------------------------------------------------------


@click.command("init")
@click.argument("directory", type=DIR)
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


@click.group("config")
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
