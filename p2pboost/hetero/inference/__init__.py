"""Vertical inference: the trained forest evaluated across the parties, in one round.

The forest's math (:mod:`~p2pboost.hetero.inference.forest`), the batch protocol over aligned
rows (:mod:`~p2pboost.hetero.inference.batch`), online sessions with rows looked up by id
(:mod:`~p2pboost.hetero.inference.session`, driven by the guest's
:class:`~p2pboost.hetero.inference.predictor.GuestPredictor`), the hosts' row lookup
(:mod:`~p2pboost.hetero.inference.feature_store`) and the guest's scoring endpoint
(:mod:`~p2pboost.hetero.inference.endpoint`). Nothing here imports
:mod:`p2pboost.hetero.training` (an import-linter contract says so): a serving process never
loads the training protocol.
"""
