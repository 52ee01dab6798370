"""The plaintext gradient-boosting core: pure numpy, no I/O, no crypto.

It is the reference the federated protocols are checked against ("lossless": same bins and
parameters, same trees), so every step is deterministic and every histogram sum is exact
(gradients on a :mod:`~p2pboost.gbdt.fixedpoint` grid). One job per module:

* :mod:`~p2pboost.gbdt.params` - :class:`BoostParams`, validated in one place;
* :mod:`~p2pboost.gbdt.features` - a party's features as one value (:class:`Features`),
  checked once where they enter the library;
* :mod:`~p2pboost.gbdt.binning` - quantile bins per feature, a missing bin, raw thresholds;
* :mod:`~p2pboost.gbdt.objectives`, :mod:`~p2pboost.gbdt.metrics` - registries by name;
* :mod:`~p2pboost.gbdt.histogram` - vectorised (and sparse-aware) gradient histograms;
* :mod:`~p2pboost.gbdt.split` - gains, leaf weights, best split per node (pure functions the
  federated guest calls on decrypted sums), with a fixed tie-breaking rule;
* :mod:`~p2pboost.gbdt.tree`, :mod:`~p2pboost.gbdt.grower` - tree arrays and layer-wise growth
  in separate steps a protocol can drive;
* :mod:`~p2pboost.gbdt.sampling`, :mod:`~p2pboost.gbdt.callbacks` - subsampling/GOSS, early
  stopping;
* :mod:`~p2pboost.gbdt.booster` - :func:`train` and :class:`Booster` (JSON save/load);
* :mod:`~p2pboost.gbdt.estimators` - scikit-learn-style ``GBDTClassifier``/``GBDTRegressor``;
* :mod:`~p2pboost.gbdt.shap` - exact TreeSHAP from decisions, per feature or per group of
  features, and reason codes;
* :mod:`~p2pboost.gbdt.woe`, :mod:`~p2pboost.gbdt.stability` - WOE/IV and the population
  stability index from counts per bin (what model-risk review asks for).
"""
