"""What every federated protocol shares, and the protocols that are shared.

* :mod:`~p2pboost.protocols._messages` - the message kit: frozen dataclasses, one validation
  path that names the peer, the wire reference derived from them;
* :mod:`~p2pboost.protocols._tasks` - task helpers (structured concurrency: no task outlives
  the call that made it);
* :mod:`~p2pboost.protocols.psi` - private set intersection, the vertical family's first step.

The checkpoint file format lives in :mod:`p2pboost.checkpoint_files` (it needs only the codec),
the blocking facade of the estimators in :mod:`p2pboost.net._blocking` (it needs only the node).
"""
