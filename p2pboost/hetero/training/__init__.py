"""Vertical training: the guest's and the hosts' sides of the SecureBoost protocol.

Entry points: :func:`p2pboost.hetero.training.guest.guest_train` and
:func:`p2pboost.hetero.training.host.host_train` (most users call them through
:class:`~p2pboost.HeteroGuest` and :class:`~p2pboost.HeteroHost`). This package may import
:mod:`p2pboost.hetero.inference` (a warm start's margins come from the prediction protocol);
the reverse is forbidden by an import-linter contract. Its ``__init__`` imports nothing, so a
worker process that runs a shard's tasks imports only :mod:`~p2pboost.hetero.training.shards`
and what that needs.
"""
