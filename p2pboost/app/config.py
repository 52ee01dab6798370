"""One party's configuration file (TOML), read strictly.

A federation is run by people at different organisations who each edit one small file; a typo
there (``n_estimator``) silently falling back to a default would train the wrong model hours
later. So every table accepts only the keys it knows: anything else is a :class:`ConfigError`
naming the file, the key and the closest valid key. Values are type-checked here and the
boosting parameters range-checked by :meth:`BoostParams.validate`, so a bad file fails at
start-up, before any peer is contacted. Relative paths are resolved against the config file's
directory (so the same file works whatever directory the command is started from), except
``train.model`` and ``predict.output``, which live in ``workdir``.

::

    id = "guest"                    # this party (must match its certificate)
    role = "guest"                  # guest | host (hetero), server | client (homo)
    task = "train"                  # psi | train | predict | serve
    listen = "127.0.0.1:8443"       # needed when a peer with a smaller id dials us
    certs = "certs/guest"           # ca.pem, cert.pem, key.pem
    workdir = "out"

    [peers]                         # id = "wss://host:port", or "" for a peer that dials us
    host = "wss://127.0.0.1:8444"

    [data]
    path = "guest.csv"
    id_column = "id"
    label_column = "y"              # guest and homo clients only
    features = []                   # default: every other column
    sparse = "auto"                 # host: mostly-zero features kept sparse (true | false)

    [train]                         # BoostParams by name, plus the keys in _TRAIN_EXTRA
    n_estimators = 25
    key_bits = 2048                 # < 2048 needs insecure_key_bits = true
    scheme = "paillier"             # or "ou" (Okamoto-Uchiyama; hetero guest only)
    checkpoint_dir = "checkpoints"  # in workdir; "" for none (party --resume continues)
    init_model = "old-model.json"   # warm start: this party's model file, in workdir

    [predict]                       # path (default: data.path), output, align, private
    [serve]                         # listen, max_batch, max_wait_ms, host_timeout, private
    [node]                          # reconnect_timeout, connect_timeout, heartbeats, close
    [compute]                       # a Dask cluster for this party's work (vertical roles)
    scheduler = "tls://10.0.0.5:8786"
    tls = "cluster/party"           # ca.pem, cert.pem, key.pem of the party's cluster CA

This module reads the file's top level, builds the whole :class:`PartyConfig` and checks what
concerns several tables at once (roles, peers, dialing, validation); each table's settings,
keys and reader are in :mod:`p2pboost.app._config_tables`, one concept per module, and the
roles and tasks in :mod:`p2pboost.app._config_roles`. Every name is imported from here.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2pboost.app._config_roles import Role, Task
from p2pboost.app._config_tables import _BOOST as _BOOST
from p2pboost.app._config_tables import _COMPUTE as _COMPUTE
from p2pboost.app._config_tables import _DATA as _DATA
from p2pboost.app._config_tables import _NODE as _NODE
from p2pboost.app._config_tables import _PREDICT as _PREDICT
from p2pboost.app._config_tables import _SERVE as _SERVE
from p2pboost.app._config_tables import _TRAIN_EXTRA as _TRAIN_EXTRA
from p2pboost.app._config_tables import (
    SECURE_KEY_BITS,
    ComputeConfig,
    DataConfig,
    NodeSettings,
    PredictConfig,
    ServeConfig,
    TrainConfig,
    _address,
    _compute,
    _data,
    _node,
    _peers,
    _predict,
    _serve,
)
from p2pboost.app._config_tables import _train as _train
from p2pboost.app._toml import Reader as _Reader
from p2pboost.app._toml import enum_of as _enum
from p2pboost.exceptions import ConfigError, InputError
from p2pboost.gbdt.metrics import get_metric
from p2pboost.homo.config import HomoConfig

__all__ = [
    "SECURE_KEY_BITS",
    "ComputeConfig",
    "DataConfig",
    "NodeSettings",
    "PartyConfig",
    "PredictConfig",
    "Role",
    "ServeConfig",
    "Task",
    "TrainConfig",
    "load_config",
    "parse_config",
]

# Each table's settings, keys and reader are in p2pboost.app._config_tables, the roles in
# p2pboost.app._config_roles: imported here, so every name above (and the key lists _DATA,
# _BOOST... that the reference page's check reads, and [train]'s reader _train) is still
# found in this module.


@dataclass(frozen=True, slots=True)
class PartyConfig:
    """One party's whole configuration, paths resolved. Build it with :func:`load_config`."""

    source: Path
    id: str
    role: Role
    task: Task
    certs: Path
    workdir: Path
    peers: Mapping[str, str | None]
    listen: str | None = None
    data: DataConfig | None = None
    train: TrainConfig = field(default_factory=TrainConfig)
    predict: PredictConfig = field(default_factory=PredictConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    node: NodeSettings = field(default_factory=NodeSettings)
    compute: ComputeConfig = field(default_factory=ComputeConfig)

    @property
    def model_path(self) -> Path:
        return self.workdir / self.train.model

    @property
    def init_model_path(self) -> Path | None:
        """This party's file of the model a warm start continues (None: a fresh model)."""
        return None if self.train.init_model is None else self.workdir / self.train.init_model

    @property
    def checkpoint_path(self) -> Path | None:
        """Where this party's training checkpoints go (None: nowhere)."""
        ckpt = self.train.checkpoint_dir
        return None if ckpt is None else self.workdir / ckpt

    def with_resume(self) -> PartyConfig:
        """The same party continuing its training from its checkpoints (the CLI's
        ``--resume``), which must be on; a horizontal client keeps none (it rejoins the run
        as it is), so for it this changes nothing."""
        if self.role is Role.CLIENT:
            return self
        if self.train.checkpoint_dir is None:
            raise ConfigError(f"{self.source}: --resume needs [train] checkpoint_dir")
        return dataclasses.replace(self, train=dataclasses.replace(self.train, resume=True))

    @property
    def output_path(self) -> Path:
        return self.workdir / self.predict.output

    @property
    def private_inference(self) -> bool | None:
        """``private`` of the task's table: ``[serve]`` for ``serve``, ``[predict]`` otherwise
        (a guest's choice of private inference; a host's insistence on one mode, or None)."""
        return self.serve.private if self.task is Task.SERVE else self.predict.private

    def with_predict(self, **changes: Any) -> PartyConfig:
        """The same party with ``[predict]`` settings changed (the CLI's ``predict`` flags)."""
        return dataclasses.replace(self, predict=dataclasses.replace(self.predict, **changes))

    def with_task(self, task: Task | str | None) -> PartyConfig:
        """The same party doing another task (the CLI's ``--task``)."""
        if task is None:
            return self
        return dataclasses.replace(self, task=_enum(Task, task, "task", self.source))


# -- the schema -------------------------------------------------------------------------------

#: The file's top-level keys and its tables (each table's keys: :mod:`p2pboost.app._config_tables`).
_TOP = ("id", "role", "task", "listen", "certs", "workdir")
_TABLES = ("peers", "data", "train", "predict", "serve", "node", "compute")


# -- loading ----------------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> PartyConfig:
    """Read, check and resolve one party's TOML file; :class:`ConfigError` on any problem."""
    source = Path(path)
    try:
        raw = tomllib.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {source}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {source}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return parse_config(raw, source)


def parse_config(raw: Mapping[str, Any], source: Path) -> PartyConfig:
    """:func:`load_config` on an already-parsed table (``source`` names it in errors and
    anchors its relative paths)."""
    top = _Reader(source, raw, "")
    top.check_keys(_TOP + _TABLES)
    base = source.resolve().parent
    role = _enum(Role, top.required("role"), "role", source)
    listen = top.get_str("listen")
    config = PartyConfig(
        source=source,
        id=top.required("id"),
        role=role,
        task=_enum(Task, top.get_str("task", "train") or "train", "task", source),
        certs=base / top.required("certs"),
        workdir=base / (top.get_str("workdir", ".") or "."),
        peers=_peers(top.sub("peers")),
        listen=None if listen is None else _address(top, "listen", listen),
        data=_data(top.sub("data"), base, role) if "data" in raw else None,
        train=_train(top.sub("train"), role),
        predict=_predict(top.sub("predict"), base),
        serve=_serve(top.sub("serve")),
        node=_node(top.sub("node")),
        compute=_compute(top.sub("compute"), base),
    )
    _check_roles(config)
    return config


def _check_roles(config: PartyConfig) -> None:
    """Who talks to whom: hosts and clients have exactly one peer; the others need data."""
    where = config.source
    if config.role in (Role.HOST, Role.CLIENT) and len(config.peers) != 1:
        other = "guest" if config.role is Role.HOST else "server"
        raise ConfigError(
            f"{where}: a {config.role.value} talks to its {other} only: [peers] must name "
            f"exactly one party, not {len(config.peers)}"
        )
    if config.role is not Role.SERVER and config.data is None:
        raise ConfigError(f"{where}: a {config.role.value} needs a [data] table (path, id_column)")
    if config.role is Role.SERVER and config.data is not None:
        raise ConfigError(f"{where}: the homo server holds no data; remove the [data] table")
    if config.role is Role.CLIENT and config.train.init_model is not None:
        raise ConfigError(
            f"{where}: a homo client needs no train.init_model: the server continues its "
            "model file and sends the clients its trees"
        )
    train = config.train
    if config.role is Role.GUEST:
        _check_guest_validation(config)
    if not config.role.hetero:  # the horizontal settings every party must agree on
        try:
            HomoConfig(
                params=train.params,
                eval_metric=train.eval_metric,
                early_stopping_rounds=train.early_stopping_rounds,
            ).validate()
        except InputError as exc:
            raise ConfigError(f"{where}: [train]: {exc}") from None
    if config.compute.scheduler is not None and not config.role.hetero:
        raise ConfigError(
            f"{where}: [compute] serves the vertical roles (guest, host); a horizontal "
            f"{config.role.value} does its few big-integer operations in its own process"
        )
    _check_dialing(config)


def _check_guest_validation(config: PartyConfig) -> None:
    """A vertical guest's metric must exist, and early stopping needs validation rows (on the
    training rows the metric keeps improving, so it would never stop)."""
    train, where = config.train, config.source
    if train.eval_metric is not None:
        try:
            get_metric(train.eval_metric)
        except InputError as exc:
            raise ConfigError(f"{where}: [train] eval_metric: {exc}") from None
    if train.early_stopping_rounds is not None:
        if train.early_stopping_rounds < 1:
            raise ConfigError(f"{where}: [train] early_stopping_rounds must be >= 1")
        if config.data is None or config.data.valid_path is None:
            raise ConfigError(
                f"{where}: [train] early_stopping_rounds watches the validation rows: set "
                "[data] valid_path in the guest's file and in every host's"
            )


def _check_dialing(config: PartyConfig) -> None:
    """Of two parties, the one whose id sorts first dials: it needs the other's address, and
    the other must listen (the node enforces this too; here the message names the file)."""
    for peer, address in config.peers.items():
        if peer > config.id and address is None:
            raise ConfigError(
                f"{config.source}: peers.{peer} needs an address: {config.id!r} dials "
                f"{peer!r} (of two parties, the smaller id dials)"
            )
        if peer < config.id and config.listen is None:
            raise ConfigError(
                f'{config.source}: listen = "host:port" is required: {peer!r} dials '
                f"{config.id!r} (of two parties, the smaller id dials)"
            )
