"""``p2pboost init DIR``: a ready federation on this machine, for trials.

Setting up parties by hand is a CA, a certificate per party, a TOML per party whose peers,
listen addresses and ``[train]`` blocks must agree, and the commands in the right order. This
writes all of it into one directory: ``certs/`` (a CA and every party's key and certificate),
one ``<party>.toml`` each (ids, roles, who dials whom on 127.0.0.1, the same ``[train]``
block), one ``<party>.csv`` each unless the caller brings data, and a ``README.md`` with the
commands (one terminal per party). Run them and the federation trains over mutual TLS.

A fifth of the rows (``HOLDOUT``, drawn by id with a fixed seed; vertically the same ids at
every party) is held out in ``<party>-holdout.csv``: every party's ``[predict] path`` names it,
so ``p2pboost predict`` scores rows the model never saw (scoring the training rows reports an
AUC near 1 that says nothing), and vertically it is also the parties' ``[data] valid_path``:
the learning curve shows the held-out metric, and the guest compares the federated model with
one trained on its own features alone. Nothing chooses the model on these rows (no early
stopping is set), so the predict step's metric on them stays a fair estimate.

The data, when none is given, is scikit-learn's bundled breast-cancer set (public; the
``demo`` extra has scikit-learn): vertical, the guest holds the label and the first 10
features and the hosts share the other 20 (ids in the open: the parties align them with
PSI); horizontal, every client holds a disjoint share of the rows with the label. To try your
own data, replace the CSVs (an ``id`` column, numeric features, ``y`` for the label holder).

Of two parties the one whose id sorts first dials the other (see the config reference), so
each party listens only if a peer dials it; ports count up from ``port``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from p2pboost import certs
from p2pboost.app._tables import write_csv
from p2pboost.app.config import SECURE_KEY_BITS
from p2pboost.exceptions import ConfigError, InputError

__all__ = ["Federation", "init_federation", "write_toml"]

#: Guest features of the bundled data set (the rest go to the hosts).
GUEST_FEATURES = 10
#: The share of the rows held out for validation and scoring.
HOLDOUT = 0.2
_PARTY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


@dataclass(frozen=True)
class Federation:
    """What :func:`init_federation` wrote: each party's config, in start order, and the
    README."""

    directory: Path
    configs: dict[str, Path]
    readme: Path

    def commands(self) -> list[str]:
        """One ``p2pboost party`` command per party, listeners first (run in ``directory``)."""
        return [f"p2pboost party --config {path.name}" for path in self.configs.values()]

    def predict_commands(self, server: str | None = None) -> list[str]:
        """``p2pboost predict`` per party that scores (not a horizontal ``server``), in the
        same order: each scores its held-out rows (``[predict] path``)."""
        return [
            f"p2pboost predict --config {path.name}"
            for party, path in self.configs.items()
            if party != server
        ]


def init_federation(
    directory: str | os.PathLike[str],
    *,
    guest: str | None = None,
    hosts: Sequence[str] = (),
    server: str | None = None,
    clients: Sequence[str] = (),
    trees: int = 10,
    key_bits: int = SECURE_KEY_BITS,
    port: int = 8443,
    force: bool = False,
) -> Federation:
    """Write a vertical (``guest`` and ``hosts``) or horizontal (``server`` and ``clients``)
    federation into ``directory`` (see the module docstring)."""
    vertical = guest is not None
    if vertical == (server is not None):
        raise InputError("give either a guest and hosts, or a server and clients")
    lead = guest if vertical else server
    assert lead is not None
    members = list(hosts if vertical else clients)
    if not members or (not vertical and len(members) < 2):
        raise InputError("a guest needs at least one host, a server at least two clients")
    parties = [lead, *members]
    if len(set(parties)) != len(parties) or not all(_PARTY_ID.fullmatch(p) for p in parties):
        raise InputError(f"party ids must be distinct (letters, digits, '-', '_'): {parties}")
    if trees < 1:
        raise InputError("trees must be at least 1")
    out = Path(directory)
    if out.exists() and any(out.iterdir()) and not force:
        raise ConfigError(f"{out} is not empty; choose another directory or pass --force")
    out.mkdir(parents=True, exist_ok=True)
    certs.init(out / "certs", parties)
    _write_data(out, lead, members, vertical)
    ports = {p: port + i for i, p in enumerate(parties)}
    listens = {b for a in members for b in (lead, a) if b == max(lead, a)}
    train: dict[str, Any] = {"n_estimators": trees, "max_depth": 4}
    if vertical:
        train |= {"key_bits": key_bits, "insecure_key_bits": key_bits < SECURE_KEY_BITS}
    configs = {}
    for party in sorted(parties, key=lambda p: (p not in listens, p)):
        role = _role(party, lead, vertical)
        peers = members if party == lead else [lead]
        top: dict[str, Any] = {"id": party, "role": role, "task": "train"}
        top |= {"certs": f"certs/{party}", "workdir": f"out-{party}"}
        if party in listens:
            top["listen"] = f"127.0.0.1:{ports[party]}"
        tables: dict[str, dict[str, Any]] = {
            "peers": {p: (f"wss://127.0.0.1:{ports[p]}" if p > party else "") for p in peers}
        }
        if role != "server":
            tables["data"] = {"path": f"{party}.csv", "id_column": "id"}
            if role in ("guest", "client"):
                tables["data"]["label_column"] = "y"
            if vertical:  # the held-out rows: the learning curve and the guest-only lift
                tables["data"]["valid_path"] = holdout(party)
        if role in ("guest", "server", "client"):
            tables["train"] = train
        if role != "server":  # predict scores the held-out rows, not the training rows
            tables["predict"] = {"path": holdout(party)}
        configs[party] = write_toml(out / f"{party}.toml", top, tables)
    fed = Federation(out, configs, out / "README.md")
    fed.readme.write_text(_readme(fed, vertical, key_bits, server), encoding="utf-8")
    return fed


def holdout(party: str) -> str:
    """The file of ``party``'s held-out rows (in the federation's directory)."""
    return f"{party}-holdout.csv"


def _role(party: str, lead: str, vertical: bool) -> str:
    if party == lead:
        return "guest" if vertical else "server"
    return "host" if vertical else "client"


def _write_data(out: Path, lead: str, members: Sequence[str], vertical: bool) -> None:
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError:  # the parties bring their own CSVs
        return
    data = load_breast_cancer()
    X, y = np.asarray(data.data), np.asarray(data.target, dtype=int)
    ids = [f"p{i}" for i in range(len(y))]
    held = np.zeros(len(y), dtype=bool)  # the same ids for every party
    held[np.random.default_rng(1).permutation(len(y))[: round(HOLDOUT * len(y))]] = True

    def write(party: str, header: list[str], rows: list[list[Any]], kept: Sequence[int]) -> None:
        write_csv(out / f"{party}.csv", header, [rows[r] for r in kept if not held[r]])
        write_csv(out / holdout(party), header, [rows[r] for r in kept if held[r]])

    every = range(len(y))
    if vertical:
        rows = [[i, int(t), *x] for i, t, x in zip(ids, y, X[:, :GUEST_FEATURES], strict=True)]
        write(lead, ["id", "y", *_names("g", GUEST_FEATURES)], rows, every)
        blocks = np.array_split(np.arange(GUEST_FEATURES, X.shape[1]), len(members))
        for host, cols in zip(members, blocks, strict=True):
            rows = [[i, *x] for i, x in zip(ids, X[:, cols], strict=True)]
            write(host, ["id", *_names(f"{host}_", cols.size)], rows, every)
        return
    order = np.random.default_rng(0).permutation(len(y))
    rows = [[ids[r], int(y[r]), *X[r]] for r in every]
    for client, part in zip(members, np.array_split(order, len(members)), strict=True):
        write(client, ["id", "y", *_names("x", X.shape[1])], rows, sorted(part.tolist()))


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{j}" for j in range(n)]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_toml(path: Path, top: dict[str, Any], tables: dict[str, dict[str, Any]]) -> Path:
    """A party file: top-level keys, then one table each (strings, numbers, booleans)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in top.items()]
    for name, table in tables.items():
        lines += ["", f"[{name}]", *(f"{k} = {_toml_value(v)}" for k, v in table.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _readme(fed: Federation, vertical: bool, key_bits: int, server: str | None) -> str:
    kind = "vertical (hetero)" if vertical else "horizontal (homo)"
    steps = "\n".join(f"{n}. `{cmd}`" for n, cmd in enumerate(fed.commands(), start=1))
    scoring = "\n".join(f"- `{cmd}`" for cmd in fed.predict_commands(server))
    together = (
        "the guest asks every host for its part of each row, so start them in this order too"
        if vertical
        else "each client scores on its own machine"
    )
    valid = (
        "\nThe held-out rows are also every party's `[data] valid_path`: the learning curve "
        "shows\ntheir metric, and the guest compares the federated model with one trained on "
        "its own\nfeatures alone (`p2pboost inspect out-<guest>/model.json`). With "
        "`early_stopping_rounds`\nthey would choose the model: then score other rows.\n"
        if vertical
        else ""
    )
    key = (
        f"\nThe key is {key_bits} bits"
        + (" (insecure: for trials on public data only)." if key_bits < SECURE_KEY_BITS else ".")
        if vertical
        else ""
    )
    return f"""# A {kind} federation on this machine

Written by `p2pboost init`. Each party is a config file (`*.toml`), a certificate directory
(`certs/<party>/`, from the CA in `certs/ca/`) and, unless you bring your own, a CSV.
Check a party's file alone with `p2pboost config check <party>.toml`.

Start every party in its own terminal, in this directory, in this order (parties that are
dialed listen first; a party that starts early waits for the others):

{steps}

Each writes its model file to `out-<party>/model.json` and prints one JSON line.{key}
Then `p2pboost inspect out-<party>/model.json` shows what each file holds, and
`p2pboost report out-<party>/model.json` draws it beside the model.

A fifth of the rows is held out in `<party>-holdout.csv` (the same ids at every party) and
named by each party's `[predict] path`, so scoring reports how the model does on rows it
never saw ({together}):

{scoring}
{valid}"""
