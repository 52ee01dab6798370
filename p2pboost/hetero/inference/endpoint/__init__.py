"""The guest's endpoint for external clients: scores over a WebSocket (``p2pboost serve``).

A bank's or a hospital's own applications ask the guest for scores; the guest asks the hosts
(one round trip per micro-batch, :mod:`p2pboost.hetero.inference.predictor`). This module is the
door those applications knock on::

    async with GuestPredictor(node, GuestModel.load("guest.json")) as predictor:
        await serve_endpoint(predictor, "0.0.0.0:8765", tls=TLSConfig.from_dir("certs/guest"))

Protocol: JSON text messages over one WebSocket at ``/``. A message is one request
``{"id": 17, "features": [0.3, null, 5]}`` (``null`` is a missing value; ``features`` may be
left out when the predictor has a ``guest_store``) or a JSON list of them. Every message gets
exactly one reply, in the order the messages came on that connection: ``{"id": 17, "score":
0.93}`` (a list of floats for multi-class models), ``{"id": 17, "error": {"type":
"UnknownIdError", "message": "..."}}``, or a list of those for a list. A client may send many
messages without waiting (pipelining): requests go straight to the predictor's micro-batcher,
so concurrent requests from every connection share batches.

``GET /healthz`` answers ``200`` with the predictor's counters as JSON (plain HTTP, for load
balancers and probes); ``GET /readyz`` answers ``200`` once every host's link is up (``503``
naming the hosts away until then); ``GET /metrics`` answers Prometheus text
(:mod:`p2pboost.metrics`; ``501`` without the ``metrics`` extra). Here they sit behind the
client certificate like everything else (any certificate of the federation's CA); a party's
plain-HTTP probe port on loopback serves the same three (``[serve] probe``,
docs/how-to/operations.md). Other plain HTTP (such as ``POST /predict``) is not offered here: an
application that wants it embeds the predictor in its own web framework, as
``examples/embedding`` does with aiohttp.

Security, in the order the checks happen:

* **Mutual TLS by default.** The endpoint presents the party's certificate and requires a
  client certificate from the federation's CA (an application gets one with ``p2pboost certs
  request`` and the CA holder's ``p2pboost certs sign``). Certificates of the model's hosts are
  refused (HTTP 403): a host that could ask for scores would learn the guest's predictions,
  which the protocol never shows it. ``clients`` narrows the accepted party ids further.
  ``allow_plaintext=True`` serves ``ws://`` instead, and only on a loopback address, for a
  sidecar or a test on the same machine.
* **No browsers.** Requests carrying an ``Origin`` header are refused: a web page must not be
  able to borrow a client certificate installed in a browser (cross-site WebSocket hijacking)
  or reach a plaintext endpoint on localhost.
* **Everything a client sends is validated**: message size (the connection is closed with code
  1009 when over ``max_message_bytes``), JSON syntax (no ``NaN``/``Infinity``), shape, ids
  (int64 or strings of at most 256 characters; of one kind per endpoint, learned from the
  guest's store or the first scored request, since hosts look ids up in stores of one kind),
  feature count and types. A bad request gets an error reply and the connection goes on; one
  client's garbage never fails another client's requests.
* **Bounded memory per connection**: at most ``max_in_flight`` requests await their replies;
  beyond that the endpoint stops reading (TCP back-pressure) until the client reads replies.
"""

from __future__ import annotations

from p2pboost.hetero.inference.endpoint._client import stream_scores
from p2pboost.hetero.inference.endpoint._server import (
    DEFAULT_LISTEN,
    HEALTH_PATH,
    METRICS_PATH,
    READY_PATH,
    EndpointLimits,
    probe_routes,
    serve_endpoint,
)

__all__ = [
    "DEFAULT_LISTEN",
    "HEALTH_PATH",
    "METRICS_PATH",
    "READY_PATH",
    "EndpointLimits",
    "probe_routes",
    "serve_endpoint",
    "stream_scores",
]
