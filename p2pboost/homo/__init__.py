"""Horizontal (homo) SecureBoost: clients hold rows, a server sees only aggregated sums.

One coroutine per role over one channel per client; the server drives, every client answers
(messages: :mod:`~p2pboost.homo._messages`)::

    server                                        client (each)
    ------                                        ------
    hello {version, settings digest, run id} ->   checks it agrees; joined {n_features}
    epoch {members, threshold}               ->   X25519 keys, signed: advert
    adverts {every member's signed keys}     ->   verifies them; sealed {Shamir shares}
    shares {the shares sealed to it}         ->   keeps them; ready
    stats | bins | grid | root | children    ->   its vector, masked twice: masked {y, z}
      | eval {round, arguments}
    (all sent: the sum of the z is exact; otherwise)
    [survivors {round, survivors, dropped}   ->   signs the set, once an epoch: signed]
    [unmask {..., every signature}           ->   t signed that set: round keys, reveal]
    [recover {round, self_of, key_of}        ->   Shamir shares: recovered]
    model / tree / done                      ->   builds the same model as everyone else

Every aggregate is a sum over the clients computed by secure aggregation
(:mod:`p2pboost.crypto.secagg`) on fixed-point integers mod 2**64, so on the same bin edges the
model equals the core's on the union of the rows. The modules, one job each:

- :mod:`~p2pboost.homo.config`: the settings every party agrees on, identities, phases, result;
- :mod:`~p2pboost.homo.server`: :func:`~p2pboost.homo.server.server_train`, the stages and the
  trees (through the core's grower schedule and round loop);
- :mod:`~p2pboost.homo._federation`: the server's view of the clients (membership, key epochs,
  aggregation rounds, dropouts, unmasking and recovery);
- :mod:`~p2pboost.homo.client`: the client as a sans-I/O state machine and
  :func:`~p2pboost.homo.client.client_train`; :mod:`~p2pboost.homo._client_keys`: its keys and
  the rules under which it signs and reveals; :mod:`~p2pboost.homo._model`: its copy of the
  model and the vectors its rows give;
- :mod:`~p2pboost.homo._vectors`: the layout of every aggregated vector, written by clients and
  read by the server in one place; :mod:`~p2pboost.homo._binning`: federated binning;
- :mod:`~p2pboost.homo.estimators`: the ``HomoServer`` / ``HomoClient`` facade.

Dropout: a client that does not answer a round in ``round_timeout`` (or whose session fails)
is dropped; the round is completed (once ``t`` survivors signed the survivor set), keys are
renewed among the survivors (a new epoch) and the current stage restarts with them. A client
that sends something invalid ends the run with a
:class:`~p2pboost.exceptions.RemoteProtocolError` naming it.
"""
