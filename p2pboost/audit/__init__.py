"""Privacy you can measure: the known attacks on vertical SecureBoost, run on what each party
legitimately receives.

- :mod:`p2pboost.audit.views`: a federation's received transport messages, recorded below each
  node and decoded as the node decodes them (what a host sees of each tree, what the guest
  receives at inference);
- :mod:`p2pboost.audit.attacks`: the attacks as pure functions (label propagation over row
  sets, the instance-clustering / ID2Graph attack; feature order from nested inference bits);
- :mod:`p2pboost.audit.suite`: a whole federation in one process and the attacks on it, which
  ``p2pboost audit`` and ``python -m benchmarks attacks`` run.

The package sits above the testing kit (it runs federations over the in-memory fabric) and
below the application; the library never imports it.
"""
