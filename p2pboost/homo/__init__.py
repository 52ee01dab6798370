"""Horizontal (homo) SecureBoost: clients hold rows, a server sees only aggregated sums.

Training is in :mod:`~p2pboost.homo.train` (server and client roles over secure
aggregation), federated binning in :mod:`~p2pboost.homo._binning`, and the blocking facade
in :mod:`~p2pboost.homo.estimators`.
"""
