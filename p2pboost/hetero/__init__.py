"""Vertical (hetero) SecureBoost: the guest holds labels, hosts hold other features.

The vertical family is two wings around a few shared modules:

* :mod:`~p2pboost.hetero.training`: the training protocol, by role (the entry points
  :mod:`~p2pboost.hetero.training.guest` and :mod:`~p2pboost.hetero.training.host`, the
  per-tree halves :mod:`~p2pboost.hetero.training.guest_tree` and
  :mod:`~p2pboost.hetero.training.host_tree`, the host's worker-resident shards with their
  candidate arithmetic and row layout, checkpoints, modes and where a run starts);
* :mod:`~p2pboost.hetero.inference`: one-round inference (the forest math
  :mod:`~p2pboost.hetero.inference.forest`, the batch protocol
  :mod:`~p2pboost.hetero.inference.batch`, online sessions
  :mod:`~p2pboost.hetero.inference.session` behind the
  :class:`~p2pboost.hetero.inference.predictor.GuestPredictor`, the hosts' row lookup
  :mod:`~p2pboost.hetero.inference.feature_store` and the guest's scoring endpoint
  :mod:`~p2pboost.hetero.inference.endpoint`). It imports nothing of training;
* shared by both: the per-party model files (:mod:`~p2pboost.hetero.model`), the protocol's
  settings (:mod:`~p2pboost.hetero.config`), the messages of every vertical family
  (:mod:`~p2pboost.hetero._messages`), and the blocking estimators over both wings
  (:mod:`~p2pboost.hetero.estimators`).
"""
