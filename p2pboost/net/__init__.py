"""The node runtime: one reliable link per peer, sessions and channels multiplexed on it.

Layering (enforced by ``lint-imports``): ``net`` knows bytes, frames, sessions and the codec;
it knows nothing of the federated protocols above it. One job per module, and the imports point
one way (node -> _mux -> _session -> _channel -> _states, _link -> _frames; every module may
read ``config``):

* :mod:`~p2pboost.net.node` - :class:`~p2pboost.net.node.Node`: lifecycle, dialing, accepting,
  time (heart-beats, timeouts, the watchdog) and statistics;
* :mod:`~p2pboost.net._mux` - admission, limits and the dispatch of every incoming frame;
* :mod:`~p2pboost.net._session` - sessions: their channels, and what each event does to them;
* :mod:`~p2pboost.net._states` - the transition tables of sessions and of peers' sides (the
  one place where a state can change, and an illegal change raises);
* :mod:`~p2pboost.net._channel` - channels: messages, streams and credit per channel;
* :mod:`~p2pboost.net._link` - sequence numbers, acks, resend and heart-beats per peer;
* :mod:`~p2pboost.net._frames` - the wire format of frames (pure: bytes in, values out);
* :mod:`~p2pboost.net.config` - ``NodeConfig`` and the statistics' value types;
* :mod:`~p2pboost.net.transport` - the default transport, and the transports' exceptions
  translated into p2pboost's.
"""
