"""Vertical (hetero) SecureBoost: the guest holds labels, hosts hold other features.

Everything of the vertical family lives here: training (:mod:`~p2pboost.hetero.train` with
the guest's and hosts' halves in :mod:`~p2pboost.hetero._guest` and
:mod:`~p2pboost.hetero._host`, their pool kernels in :mod:`~p2pboost.hetero._kernels`), the
per-party model files (:mod:`~p2pboost.hetero.model`), one-round inference
(:mod:`~p2pboost.hetero.inference` math, :mod:`~p2pboost.hetero.predict` batch protocol,
:mod:`~p2pboost.hetero.serve` and :mod:`~p2pboost.hetero.serving` online), the hosts' row
lookup (:mod:`~p2pboost.hetero.feature_store`), the guest's scoring endpoint
(:mod:`~p2pboost.hetero.endpoint`) and the blocking estimators
(:mod:`~p2pboost.hetero.estimators`).
"""
