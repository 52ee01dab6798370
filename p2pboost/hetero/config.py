"""The settings of the vertical protocol, and the protocol's version: what both wings read.

:class:`HeteroConfig` holds the knobs of a vertical run (the encryption, the stream's chunks,
the pool, the SecureBoost modes); the model's own parameters are
:class:`~p2pboost.gbdt.params.BoostParams`. The rules that tie them together are checked here,
once: :func:`check_modes` (which mode settings combine) and :func:`check_layered_depth` (a
layered tree's depth), called by :class:`HeteroConfig`, by the training entry points and by the
command line's configuration reader alike, so that a rule never exists in two wordings.

This module imports nothing of the vertical family's wings, so training
(:mod:`p2pboost.hetero.training`), inference (:mod:`p2pboost.hetero.inference`) and the
application may all read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from p2pboost.crypto.keys import check_scheme
from p2pboost.exceptions import InputError

__all__ = ["VERSION", "HeteroConfig", "check_label_dp", "check_layered_depth", "check_modes"]

#: The vertical training protocol's version (2: hello, setup, tree and done carry the run id
#: and fingerprint chain of checkpoints; 5: a tree's start says how many outputs a row packs;
#: 6: setup carries min_child_weight, so hosts leave out candidates no child could satisfy;
#: 7: a split's larger child comes as a ``Derived`` package, its sums left to the guest;
#: 8: hello declares a host's constraints by feature token, packages may carry tokens;
#: 9: a prediction's bits may carry a consenting host's feature tokens, for explanations;
#: 10: a layer may come before the owner's answer, leaving out the left sets it decides).
VERSION = 10


@dataclass(frozen=True, slots=True)
class HeteroConfig:
    """Knobs of the protocol (not of the model: those are :class:`BoostParams`).

    ``scheme``: the additive encryption of the gradients, ``"paillier"`` (default) or ``"ou"``
    (Okamoto-Uchiyama: cheaper additions and encryption, see docs/explanation/ou.md); the
    guest chooses, the hosts follow its key. ``key_bits`` below 2048 needs
    ``allow_insecure_key`` (1024 is for tests and comparisons).
    ``chunk_rows``: rows of the first streamed chunk of gradients (one pool task each); each
    later chunk is twice the one before, up to ``max_chunk_rows`` ciphertexts (a multi-output
    row packed in ``k`` ciphertexts counts ``k`` times;
    :func:`~p2pboost.hetero.training.common.chunk_bounds`): the hosts start summing as soon as a
    small first chunk arrives, and the rest of the stream
    pays the per-task and per-message costs a few times rather than once per 2,048 rows.
    ``workers``:
    workers of the pool the protocol starts when no executor is given (threads of the party's
    process under the native kernel, whose loops release the GIL; processes under gmpy2:
    :func:`~p2pboost.workers.pool_kind`). ``precompute``:
    while the guest waits for the hosts, it makes the encryption randomisers of the next tree
    ahead of time on processors nobody else needs (under the native kernel on Linux, threads
    of the idle scheduling class; else its idle pool), at most ``stash_bytes`` of them kept,
    so that tree's encryption costs one product per row for those.
    ``hello_timeout``: seconds the guest waits for every host to start (its first message);
    a host that is connected but runs something else (another task, other settings) is then
    named instead of being waited for until the node gives up on the session.
    ``complete_secure``: the first that many rounds use the guest's features only (the
    SecureBoost paper's RL-SecureBoost, FATE's ``complete_secure``): the hosts receive no
    gradients and no partitions for them, so the first tree's instance spaces, which the paper
    shows reveal much of the labels, stay with the guest (docs/explanation/modes.md).
    ``tree_num_per_party`` (mix mode) and ``host_depth``/``guest_depth`` (layered mode): the
    SecureBoost+ modes of :mod:`p2pboost.hetero.training.modes`.
    ``purity_bound`` (0: off): the rounds after ``complete_secure``'s stay guest-only until the
    gradient purity of the guest's own last tree falls below this bound (in (0, 1); the
    guest's decision, the hosts see guest-only rounds as under ``complete_secure``;
    :mod:`p2pboost.hetero.training.defences`, docs/explanation/defences.md).
    ``label_dp_epsilon`` (None or 0: off): label differential privacy towards the hosts. The
    guest adds Laplace noise to every round's gradients before anything depends on them, so
    all the hosts observe (instance spaces, chosen splits, the number of trees) is
    epsilon-label-DP for the whole run (neighbours: one row's label changed); the epsilon
    spent is the model's ``label_privacy`` record (:mod:`p2pboost.hetero.training.label_dp`,
    docs/explanation/defences.md). ``label_dp_noise_seed``: tests and comparisons only (the
    noise is then reproducible and *not private*; the record says so); never a party-file
    setting. Without it the noise is keyed by ``os.urandom`` and the key never leaves the
    guest's process.
    """

    key_bits: int = 2048
    allow_insecure_key: bool = False
    scheme: str = "paillier"
    chunk_rows: int = 2048
    max_chunk_rows: int = 16384
    workers: int | None = None
    precompute: bool = True
    stash_bytes: int = 64 * 1024 * 1024
    hello_timeout: float = 120.0
    complete_secure: int = 0
    tree_num_per_party: int = 0
    host_depth: int = 0
    guest_depth: int = 0
    purity_bound: float = 0.0
    label_dp_epsilon: float | None = None
    label_dp_noise_seed: int | None = None

    def __post_init__(self) -> None:
        if self.complete_secure < 0:
            raise InputError("complete_secure counts rounds: it must be >= 0")
        check_modes(
            self.complete_secure, self.tree_num_per_party, self.host_depth, self.guest_depth
        )
        check_scheme(self.scheme)
        if isinstance(self.purity_bound, bool) or not 0.0 <= self.purity_bound < 1.0:
            raise InputError(f"purity_bound must be in [0, 1) (0: off), got {self.purity_bound!r}")
        check_label_dp(self.label_dp_epsilon, self.label_dp_noise_seed)
        if not self.hello_timeout > 0:
            raise InputError("hello_timeout must be > 0")
        if self.chunk_rows < 1:
            raise InputError("chunk_rows must be at least 1")
        if self.max_chunk_rows < self.chunk_rows:
            raise InputError(
                f"max_chunk_rows ({self.max_chunk_rows}) must be at least chunk_rows "
                f"({self.chunk_rows})"
            )
        if self.workers is not None and self.workers < 1:
            raise InputError("workers must be at least 1")
        if self.stash_bytes < 0:
            raise InputError("stash_bytes must be >= 0")


def check_modes(
    complete_secure: int, tree_num_per_party: int, host_depth: int, guest_depth: int
) -> None:
    """InputError naming the parameter for a combination the modes do not allow."""
    for name, value in (
        ("complete_secure", complete_secure),
        ("tree_num_per_party", tree_num_per_party),
        ("host_depth", host_depth),
        ("guest_depth", guest_depth),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{name} must be an integer >= 0, got {value!r}")
    if (host_depth > 0) != (guest_depth > 0):
        raise InputError("layered mode needs both host_depth and guest_depth (or neither)")
    if tree_num_per_party > 0 and host_depth > 0:
        raise InputError(
            "choose mix mode (tree_num_per_party) or layered mode (host_depth), not both"
        )


def check_label_dp(epsilon: object, seed: object = None) -> None:
    """InputError naming the setting for a label-DP epsilon that is not None, 0 or a finite
    number > 0, or a test noise seed that is not a non-negative integer (or is given with
    label DP off, where it would silently do nothing)."""
    if epsilon is not None and (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, int | float)
        or not math.isfinite(epsilon)
        or epsilon < 0
    ):
        raise InputError(
            f"label_dp_epsilon must be a finite number > 0 (None or 0: off), got {epsilon!r}"
        )
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"label_dp_noise_seed must be an integer >= 0, got {seed!r}")
    if not epsilon:
        raise InputError("label_dp_noise_seed seeds label DP's noise: set label_dp_epsilon too")


def check_layered_depth(host_depth: int, guest_depth: int, max_depth: int) -> str | None:
    """Why a layered run (``host_depth`` layers on the hosts' features, then ``guest_depth`` on
    the guest's) cannot grow trees of ``max_depth``, or None when it can (or is not layered).

    A layered tree is exactly ``host_depth + guest_depth`` layers deep, so ``max_depth`` must
    say the same; the message names the depth to set. The caller raises it in its own error
    type (the training call an :class:`~p2pboost.exceptions.InputError`, the configuration
    reader a :class:`~p2pboost.exceptions.ConfigError` naming the file and key).
    """
    if host_depth and host_depth + guest_depth != max_depth:
        return (
            f"layered mode grows host_depth + guest_depth = {host_depth + guest_depth} "
            f"layers: max_depth must be {host_depth + guest_depth}, not {max_depth}"
        )
    return None
