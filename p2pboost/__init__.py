"""p2pboost: peer-to-peer federated gradient boosting over WebSockets with mutual TLS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from p2pboost import _old_names
from p2pboost.app.config import PartyConfig, load_config
from p2pboost.app.party import PartyResult, run_party
from p2pboost.certs import TLSConfig
from p2pboost.exceptions import (
    ClusterError,
    CodecError,
    ConfigError,
    CryptoError,
    DeadlineExceeded,
    HandshakeError,
    InputError,
    ModelError,
    NotFittedError,
    P2PBoostError,
    PeerDisconnected,
    PeerUnreachable,
    ProtocolError,
    RemoteProtocolError,
    SessionClosed,
    TransportError,
    UnknownIdError,
)
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.callbacks import EarlyStopping
from p2pboost.gbdt.params import BoostParams, DPParams
from p2pboost.hetero.config import HeteroConfig
from p2pboost.hetero.estimators import HeteroGuest, HeteroHost
from p2pboost.hetero.inference.endpoint import EndpointLimits, serve_endpoint, stream_scores
from p2pboost.hetero.inference.feature_store import ArrayStore, CallbackStore, FeatureStore
from p2pboost.hetero.inference.predictor import GuestPredictor, Prediction, ServingStats, serve_host
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.homo.config import ClientIdentity, HomoConfig
from p2pboost.homo.estimators import HomoClient, HomoServer
from p2pboost.net.node import (
    Channel,
    Node,
    NodeConfig,
    NodeStats,
    PeerStats,
    Session,
    SessionState,
    StreamWriter,
)

if TYPE_CHECKING:
    from p2pboost.gbdt.estimators import GBDTClassifier, GBDTRegressor

__version__ = "0.1.0.dev0"

#: Loaded on first use (PEP 562): they derive from scikit-learn's classes when it is installed,
#: and importing scikit-learn takes about a second that a party's processes need not pay.
_LAZY = {
    "GBDTClassifier": "p2pboost.gbdt.estimators",
    "GBDTRegressor": "p2pboost.gbdt.estimators",
    "simulate": "p2pboost.simulate",  # the module: ``from p2pboost import simulate``
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        return module if module.__name__ == f"p2pboost.{name}" else getattr(module, name)
    raise AttributeError(f"module 'p2pboost' has no attribute {name!r}")


__all__ = [
    "ArrayStore",
    "BoostParams",
    "Booster",
    "CallbackStore",
    "Channel",
    "ClientIdentity",
    "ClusterError",
    "CodecError",
    "ConfigError",
    "CryptoError",
    "DPParams",
    "DeadlineExceeded",
    "EarlyStopping",
    "EndpointLimits",
    "FeatureStore",
    "GBDTClassifier",
    "GBDTRegressor",
    "GuestModel",
    "GuestPredictor",
    "HandshakeError",
    "HeteroConfig",
    "HeteroGuest",
    "HeteroHost",
    "HomoClient",
    "HomoConfig",
    "HomoServer",
    "HostModel",
    "InputError",
    "ModelError",
    "Node",
    "NodeConfig",
    "NodeStats",
    "NotFittedError",
    "P2PBoostError",
    "PartyConfig",
    "PartyResult",
    "PeerDisconnected",
    "PeerStats",
    "PeerUnreachable",
    "Prediction",
    "ProtocolError",
    "RemoteProtocolError",
    "ServingStats",
    "Session",
    "SessionClosed",
    "SessionState",
    "StreamWriter",
    "TLSConfig",
    "TransportError",
    "UnknownIdError",
    "__version__",
    "load_config",
    "run_party",
    "serve_endpoint",
    "serve_host",
    "stream_scores",
    "train",
]

# ``import transports`` (the transports' name until 0.1) keeps working for one release, with a
# DeprecationWarning, unless another installed package holds that name (see p2pboost._old_names).
_old_names.install()
