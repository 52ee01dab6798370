"""The node runtime: one reliable link per peer, sessions and channels multiplexed on it.

Layering (enforced by ``lint-imports``): ``net`` knows bytes, frames, sessions and the codec;
it knows nothing of the federated protocols above it. One job per module:

* :mod:`~p2pboost.net.node` - :class:`~p2pboost.net.node.Node`: dialing, accepting, time;
* :mod:`~p2pboost.net._mux` - sessions, channels, credit and frame dispatch;
* :mod:`~p2pboost.net._link` - sequence numbers, acks, resend and heart-beats per peer;
* :mod:`~p2pboost.net._frames` - the wire format of frames (pure: bytes in, values out).
"""
