"""The tables of a party's file, one by one: ``[peers]``, ``[data]``, ``[train]``,
``[predict]``, ``[serve]``, ``[node]`` and ``[compute]``; for each, its settings (a frozen
dataclass), the keys it accepts and its strict reader.

Apart from :mod:`p2pboost.app.config`, which reads the file's top level, calls these readers
and checks what concerns several tables at once (roles, peers, validation), because a table is
a concept of its own: what it holds, which keys it knows and what values it accepts are
decided here, without the rest of the file. :mod:`p2pboost.app.config` re-exports the
settings classes (``DataConfig``, ``TrainConfig``...) and the key lists, which remain
importable from there. Each reader fails with a :class:`ConfigError` naming the file, the
key and the problem (see :class:`~p2pboost.app._toml.Reader`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from p2pboost.app._config_roles import Role
from p2pboost.app._toml import Reader as _Reader
from p2pboost.app._toml import boost_params
from p2pboost.crypto.keys import SCHEMES
from p2pboost.exceptions import ConfigError, InputError
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.config import check_label_dp, check_layered_depth, check_modes
from p2pboost.net.node import NodeConfig

__all__ = [
    "SECURE_KEY_BITS",
    "ComputeConfig",
    "DataConfig",
    "NodeSettings",
    "PredictConfig",
    "ServeConfig",
    "TrainConfig",
]

#: Paillier keys below this size need ``insecure_key_bits = true``.
SECURE_KEY_BITS = 2048


@dataclass(frozen=True, slots=True)
class DataConfig:
    """The party's CSV: one row per sample, an id column, numeric features.

    ``sparse`` (a vertical host's training): keep mostly-zero features as a sparse matrix
    (``"auto"``: when at most a third of the cells are non-zero; True; False: always dense).
    """

    path: Path
    id_column: str = "id"
    label_column: str | None = None
    features: tuple[str, ...] = ()
    sparse: bool | str = "auto"
    #: Validation rows (same columns), scored after every round or tree: a homo client's, or
    #: a vertical guest's and each host's (aligned by PSI like the training rows).
    valid_path: Path | None = None


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Boosting parameters plus the run's own settings.

    ``eval_train`` evaluates the metric on the training rows after every tree (shown in the
    progress bar); it costs the hosts one bit per row and split node, and both hetero parties
    must agree on it (the guest checks that the hosts' evaluation sets match its own).
    ``checkpoint_dir`` (relative to ``workdir``; ``""`` turns checkpoints off) is where a
    vertical party, or a horizontal server, saves its progress after every tree or round;
    ``p2pboost party --resume`` continues from there (a horizontal client keeps none: it
    rejoins). ``init_model`` (in ``workdir``) is this party's file of a model that training
    continues with ``n_estimators`` more trees (hetero: every party gives its own file; homo:
    the server's file, the clients receive its trees).
    """

    params: BoostParams = field(default_factory=BoostParams)
    key_bits: int = SECURE_KEY_BITS
    insecure_key_bits: bool = False
    scheme: str = "paillier"
    psi: bool = True
    model: Path = Path("model.json")
    eval_train: bool = True
    #: Checkpoints after every tree or round, in ``workdir`` (hetero parties and the homo
    #: server; None: none are written).
    checkpoint_dir: Path | None = Path("checkpoints")
    #: Continue from the checkpoints (the CLI's ``--resume``; not a file key).
    resume: bool = False
    #: This party's file of a model to continue with more trees (warm start).
    init_model: Path | None = None
    #: Hetero guest: the first rounds on the guest's features only (HeteroConfig).
    complete_secure: int = 0
    #: Hetero guest: mix mode (rounds per party in turn) and layered mode (HeteroConfig).
    tree_num_per_party: int = 0
    host_depth: int = 0
    guest_depth: int = 0
    #: Hetero guest: guest-only rounds until its tree's gradient purity is below this bound
    #: (0: off; HeteroConfig.purity_bound).
    purity_bound: float = 0.0
    #: Hetero guest: label differential privacy towards the hosts, the whole run's epsilon
    #: (0: off; HeteroConfig.label_dp_epsilon).
    label_dp_epsilon: float = 0.0
    #: Hetero host: bytes of encrypted histograms kept between layers, in MiB (None: no bound).
    memory_budget_mb: float | None = None
    #: Homo server and clients (agreed): the metric aggregated over the clients' validation
    #: rows after every round, and early stopping on it (HomoConfig).
    eval_metric: str | None = None
    early_stopping_rounds: int | None = None
    #: Homo server or client (this party's own): accept a federation of exactly two clients,
    #: whose secure aggregation the server and one client can undo together, without the
    #: warning (HomoConfig.allow_two_clients).
    allow_two_clients: bool = False
    #: Homo server: send the clients the trees' covers and gains (by default zeros in their
    #: place; HomoConfig.share_statistics).
    share_statistics: bool = False


@dataclass(frozen=True, slots=True)
class PredictConfig:
    """Batch prediction: which CSV (default: the data one), where scores go, how to align."""

    path: Path | None = None
    output: Path = Path("predictions.csv")
    align: Literal["ids", "psi"] = "ids"
    #: Private inference (the guest learns scores only): the guest's choice; a host that
    #: sets it answers only that mode (None: the guest's choice).
    private: bool | None = None
    #: Guest: also write every row's TreeSHAP contributions (``p2pboost predict
    #: --contributions``) and the top ``reasons`` reason codes to ``explanations``.
    contributions: bool = False
    reasons: int = 0
    explanations: Path = Path("explanations.csv")
    #: Overwrite an existing ``explanations`` file (``--force``).
    force: bool = False
    #: Host: consent to per-feature explanations; the guest gets an opaque token per split,
    #: and this host keeps which token is which feature in ``feature_tokens``.
    explain_features: bool = False
    feature_tokens: Path = Path("feature_tokens.csv")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """The guest's endpoint for external clients (``p2pboost serve``)."""

    listen: str = "127.0.0.1:8765"
    max_batch: int = 512
    max_wait_ms: float = 0.0
    host_timeout: float = 5.0
    #: ``host:port`` on loopback for plain-HTTP /healthz, /readyz and /metrics (None: off).
    probe: str | None = None
    #: As ``[predict] private``, for the sessions of ``serve``.
    private: bool | None = None


@dataclass(frozen=True, slots=True)
class ComputeConfig:
    """Where the party's CPU work runs: a local process pool (no ``scheduler``, the default)
    or the Dask cluster whose scheduler is ``scheduler`` (``tls://host:port``), reached with
    the certificate in ``tls`` (a directory of the party's *cluster* CA, not the
    federation's); ``key_workers``: the cluster workers trusted with a private key, or
    ``"all"`` (default:
    none, decryption stays on this machine); ``connect_timeout`` in seconds."""

    scheduler: str | None = None
    tls: Path | None = None
    key_workers: tuple[str, ...] | Literal["all"] = ()
    connect_timeout: float = 30.0


_NODE_DEFAULTS = NodeConfig()


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """The node timeouts a deployment tunes (see :class:`~p2pboost.net.node.NodeConfig`).

    ``reconnect_timeout`` also bounds how long a party waits for a peer that never answers:
    a wrong address fails after this long, naming the peer.
    """

    reconnect_timeout: float = _NODE_DEFAULTS.reconnect_timeout
    connect_timeout: float = _NODE_DEFAULTS.connect_timeout
    heartbeat_interval: float = _NODE_DEFAULTS.heartbeat_interval
    heartbeat_timeout: float = _NODE_DEFAULTS.heartbeat_timeout
    close_timeout: float = _NODE_DEFAULTS.close_timeout

    def node_config(self) -> NodeConfig:
        return NodeConfig(**dataclasses.asdict(self))


# -- the schema of each table -----------------------------------------------------------------

_DATA = ("path", "id_column", "label_column", "features", "sparse", "valid_path")
#: [train] keys that are not BoostParams fields.
_TRAIN_EXTRA = (
    "key_bits",
    "insecure_key_bits",
    "scheme",
    "psi",
    "model",
    "eval_train",
    "checkpoint_dir",
    "init_model",
    "complete_secure",
    "tree_num_per_party",
    "host_depth",
    "guest_depth",
    "purity_bound",
    "label_dp_epsilon",
    "eval_metric",
    "early_stopping_rounds",
    "memory_budget_mb",
    "allow_two_clients",
    "share_statistics",
)
#: [train] keys a vertical host may set: its own files and bounds, the two settings the
#: parties compare before a run (psi, eval_train), and the constraints on its own features
#: (monotone directions by name; the run's interaction groups). The rest are the guest's.
_HOST_TRAIN = (
    "psi",
    "eval_train",
    "model",
    "checkpoint_dir",
    "init_model",
    "memory_budget_mb",
    "monotone_constraints",
    "interaction_constraints",
)
_BOOST = tuple(f.name for f in dataclasses.fields(BoostParams))
_PREDICT = (
    "path",
    "output",
    "align",
    "private",
    "contributions",
    "reasons",
    "explanations",
    "explain_features",
    "feature_tokens",
)
_SERVE = tuple(f.name for f in dataclasses.fields(ServeConfig))
_NODE = tuple(f.name for f in dataclasses.fields(NodeSettings))
_COMPUTE = tuple(f.name for f in dataclasses.fields(ComputeConfig))
_ALIGN = ("ids", "psi")


def _address(reader: _Reader, key: str, value: str) -> str:
    """``host:port`` or ``wss://host:port``; the transport takes both."""
    parts = urlsplit(value if "://" in value else f"wss://{value}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "wss" or not parts.hostname or port is None:
        raise reader.fail(key, f"{value!r} is not an address (use host:port or wss://host:port)")
    return value


# -- reading each table -----------------------------------------------------------------------


def _peers(reader: _Reader) -> dict[str, str | None]:
    peers: dict[str, str | None] = {}
    for peer in reader.table:
        address = reader.get_str(peer, empty=True)
        peers[peer] = _address(reader, peer, address) if address else None
    if not peers:
        raise ConfigError(f"{reader.source}: [peers] must name at least one other party")
    return peers


def _data(reader: _Reader, base: Path, role: Role) -> DataConfig:
    reader.check_keys(_DATA)
    features = reader.table.get("features", [])
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise reader.fail("features", "expected a list of column names")
    label = reader.get_str("label_column")
    if label is not None and role in (Role.HOST, Role.SERVER):
        raise reader.fail("label_column", f"a {role.value} holds no labels; remove the key")
    if label is None and role in (Role.GUEST, Role.CLIENT):
        raise ConfigError(
            f"{reader.source}: a {role.value} needs data.label_column (the label's column)"
        )
    sparse = reader.table.get("sparse", "auto")
    if sparse not in (True, False, "auto"):
        raise reader.fail("sparse", f'expected true, false or "auto", not {sparse!r}')
    if "sparse" in reader.table and role is not Role.HOST:
        raise reader.fail("sparse", f"only a host keeps its features sparse, not a {role.value}")
    valid = reader.get_str("valid_path")
    if valid is not None and role is Role.SERVER:
        raise reader.fail("valid_path", "the homo server holds no rows; its clients validate")
    return DataConfig(
        path=base / reader.required("path"),
        id_column=reader.get_str("id_column", "id") or "id",
        label_column=label,
        features=tuple(features),
        sparse=sparse,
        valid_path=None if valid is None else base / valid,
    )


def _train(reader: _Reader, role: Role | None = None) -> TrainConfig:
    reader.check_keys(_BOOST + _TRAIN_EXTRA)
    if role is Role.HOST:
        _refuse_guest_settings(reader)
    params = boost_params(reader)
    key_bits = reader.get_int("key_bits", SECURE_KEY_BITS)
    insecure = reader.get_bool("insecure_key_bits", False)
    if key_bits < SECURE_KEY_BITS and not insecure:
        raise reader.fail(
            "key_bits",
            f"{key_bits}-bit keys are insecure; use {SECURE_KEY_BITS} or more, or opt "
            "in explicitly with insecure_key_bits = true",
        )
    ckpt = reader.get_str("checkpoint_dir", "checkpoints", empty=True)
    complete = reader.get_int("complete_secure", 0)
    if complete < 0:
        raise reader.fail("complete_secure", "counts the first rounds on guest features: >= 0")
    per_party = reader.get_int("tree_num_per_party", 0)
    host_depth = reader.get_int("host_depth", 0)
    guest_depth = reader.get_int("guest_depth", 0)
    try:
        check_modes(complete, per_party, host_depth, guest_depth)
    except InputError as exc:
        raise ConfigError(f"{reader.source}: [train]: {exc}") from None
    purity = reader.get_float("purity_bound", 0.0)
    if not 0.0 <= purity < 1.0:
        raise reader.fail("purity_bound", "a gradient purity in [0, 1) (0: off)")
    label_dp = reader.get_float("label_dp_epsilon", 0.0)
    try:
        check_label_dp(label_dp)
    except InputError as exc:
        raise reader.fail("label_dp_epsilon", str(exc)) from None
    if label_dp and params.dp is not None:
        raise reader.fail(
            "label_dp_epsilon",
            "a dp model is already differentially private for whole rows, labels included: "
            "choose one (leave label_dp_epsilon at 0 with [train.dp])",
        )
    layered = check_layered_depth(host_depth, guest_depth, params.max_depth)
    if layered is not None:
        raise reader.fail("host_depth", layered)
    budget = (
        reader.get_float("memory_budget_mb", -1.0) if "memory_budget_mb" in reader.table else None
    )
    if budget is not None and budget < 0:
        raise reader.fail("memory_budget_mb", "bounds the host's histograms in MiB: >= 0")
    scheme = reader.get_str("scheme", "paillier") or "paillier"
    if scheme not in SCHEMES:
        raise reader.fail("scheme", f"unknown encryption scheme {scheme!r}; one of {SCHEMES}")
    return TrainConfig(
        params=params,
        key_bits=key_bits,
        insecure_key_bits=insecure,
        scheme=scheme,
        psi=reader.get_bool("psi", True),
        model=Path(reader.get_str("model", "model.json") or "model.json"),
        eval_train=reader.get_bool("eval_train", True),
        checkpoint_dir=Path(ckpt) if ckpt else None,
        init_model=Path(init) if (init := reader.get_str("init_model")) else None,
        complete_secure=complete,
        tree_num_per_party=per_party,
        host_depth=host_depth,
        guest_depth=guest_depth,
        purity_bound=purity,
        label_dp_epsilon=label_dp,
        memory_budget_mb=budget,
        eval_metric=reader.get_str("eval_metric"),
        early_stopping_rounds=(
            reader.get_int("early_stopping_rounds", 0)
            if "early_stopping_rounds" in reader.table
            else None
        ),
        allow_two_clients=reader.get_bool("allow_two_clients", False),
        share_statistics=reader.get_bool("share_statistics", False),
    )


def _non_negative(reader: _Reader, key: str) -> int:
    value = reader.get_int(key, 0)
    if value < 0:
        raise reader.fail(key, f"must be >= 0, got {value}")
    return value


def _predict(reader: _Reader, base: Path) -> PredictConfig:
    reader.check_keys(_PREDICT)
    path = reader.get_str("path")
    align = reader.get_str("align", "ids") or "ids"
    if align not in _ALIGN:
        raise reader.fail("align", f"{align!r}: choose one of {', '.join(_ALIGN)}")
    return PredictConfig(
        path=None if path is None else base / path,
        output=Path(reader.get_str("output", "predictions.csv") or "predictions.csv"),
        align="psi" if align == "psi" else "ids",
        private=_private(reader),
        contributions=reader.get_bool("contributions", False),
        reasons=_non_negative(reader, "reasons"),
        explanations=Path(reader.get_str("explanations", "explanations.csv") or "explanations.csv"),
        explain_features=reader.get_bool("explain_features", False),
        feature_tokens=Path(
            reader.get_str("feature_tokens", "feature_tokens.csv") or "feature_tokens.csv"
        ),
    )


def _private(reader: _Reader) -> bool | None:
    """``private``: unset means the guest's choice (for a host) or the bits (for a guest)."""
    return reader.get_bool("private", False) if "private" in reader.table else None


def _refuse_guest_settings(reader: _Reader) -> None:
    """A host's boosting and key settings would be silently ignored (the guest grows the
    trees and makes the key pair, and sends the hosts what they need): refused instead, with
    the party that owns them named."""
    theirs = [k for k in reader.table if k not in _HOST_TRAIN]
    if theirs:
        raise ConfigError(
            f"{reader.source}: [train] {', '.join(theirs)}: the guest owns "
            f"{'this setting' if len(theirs) == 1 else 'these settings'} (it grows the trees "
            "and makes the keys; hosts follow it): remove "
            f"{'it' if len(theirs) == 1 else 'them'} from this host's file and set "
            f"{'it' if len(theirs) == 1 else 'them'} in the guest's. A host's [train] may set "
            f"only {', '.join(_HOST_TRAIN)}"
        )


def _serve(reader: _Reader) -> ServeConfig:
    reader.check_keys(_SERVE)
    d = ServeConfig()
    serve = ServeConfig(
        listen=_address(reader, "listen", reader.get_str("listen", d.listen) or d.listen),
        max_batch=reader.get_int("max_batch", d.max_batch),
        max_wait_ms=reader.get_float("max_wait_ms", d.max_wait_ms),
        host_timeout=reader.get_float("host_timeout", d.host_timeout),
        probe=_probe(reader, reader.get_str("probe")),
        private=_private(reader),
    )
    if serve.max_batch < 1:
        raise reader.fail("max_batch", "must be at least 1")
    if serve.max_wait_ms < 0 or not serve.host_timeout > 0:
        raise ConfigError(f"{reader.source}: serve: max_wait_ms >= 0 and host_timeout > 0")
    return serve


def _probe(reader: _Reader, value: str | None) -> str | None:
    """The probe port's ``host:port``: plain HTTP, so a loopback address only."""
    if not value:
        return None
    host, _, port = value.rpartition(":")
    loopback = host in ("localhost", "127.0.0.1", "[::1]") or host.startswith("127.")
    if not loopback or not port.isdigit() or int(port) > 65535:
        raise reader.fail(
            "probe",
            f"{value!r}: the probe port speaks plain HTTP, so it listens on this machine only: "
            'give "127.0.0.1:PORT" (probes from elsewhere use the endpoint, with a client '
            "certificate)",
        )
    return value


def _node(reader: _Reader) -> NodeSettings:
    reader.check_keys(_NODE)
    d = NodeSettings()
    settings = NodeSettings(**{name: reader.get_float(name, getattr(d, name)) for name in _NODE})
    try:
        settings.node_config()
    except ConfigError as exc:
        raise ConfigError(f"{reader.source}: [node]: {exc}") from None
    return settings


def _compute(reader: _Reader, base: Path) -> ComputeConfig:
    reader.check_keys(_COMPUTE)
    scheduler = reader.get_str("scheduler")
    tls = reader.get_str("tls")
    workers = reader.table.get("key_workers", [])
    if workers != "all" and (
        not isinstance(workers, list) or not all(isinstance(w, str) and w for w in workers)
    ):
        raise reader.fail("key_workers", 'expected "all" or a list of worker addresses or names')
    timeout = reader.get_float("connect_timeout", ComputeConfig().connect_timeout)
    if scheduler is None:
        if tls is not None or workers:
            raise reader.fail("scheduler", "missing: tls and key_workers need a scheduler")
        return ComputeConfig()
    if not scheduler.startswith("tls://"):
        raise reader.fail("scheduler", f"{scheduler!r} must be a tls:// address")
    if tls is None:
        raise reader.fail("tls", "missing: the cluster's certificate directory")
    if not timeout > 0:
        raise reader.fail("connect_timeout", "must be > 0")
    trusted: tuple[str, ...] | Literal["all"] = "all" if workers == "all" else tuple(workers)
    return ComputeConfig(scheduler, base / tls, trusted, timeout)
