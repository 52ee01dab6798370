"""p2pboost: peer-to-peer federated gradient boosting over WebSockets with mutual TLS."""

from __future__ import annotations

from p2pboost.certs import TLSConfig
from p2pboost.config import PartyConfig, load_config
from p2pboost.endpoint import EndpointLimits, serve_endpoint, stream_scores
from p2pboost.estimators import HeteroGuest, HeteroHost
from p2pboost.exceptions import (
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
    ProtocolError,
    RemoteProtocolError,
    SessionClosed,
    TransportError,
    UnknownIdError,
)
from p2pboost.feature_store import ArrayStore, CallbackStore, FeatureStore
from p2pboost.gbdt.booster import Booster, train
from p2pboost.gbdt.callbacks import EarlyStopping
from p2pboost.gbdt.estimators import GBDTClassifier, GBDTRegressor
from p2pboost.gbdt.params import BoostParams
from p2pboost.homo import HomoClient, HomoServer
from p2pboost.model import GuestModel, HostModel
from p2pboost.node import (
    Channel,
    Node,
    NodeConfig,
    NodeStats,
    PeerStats,
    Session,
    SessionState,
    StreamWriter,
)
from p2pboost.party import PartyResult, run_party
from p2pboost.protocols.hetero_train import HeteroConfig
from p2pboost.protocols.homo_train import ClientIdentity, HomoConfig
from p2pboost.serving import GuestPredictor, Prediction, ServingStats, serve_host

__version__ = "0.1.0.dev0"

__all__ = [
    "ArrayStore",
    "BoostParams",
    "Booster",
    "CallbackStore",
    "Channel",
    "ClientIdentity",
    "CodecError",
    "ConfigError",
    "CryptoError",
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
