"""Row subsampling in horizontal training: each client draws its own rows.

The core draws ``round(subsample * n)`` rows per round from one generator over all rows
(:func:`~p2pboost.gbdt.sampling.row_sample`); no party of a horizontal federation sees all
rows, so each client applies the same rule to its own: ``round(subsample * n_c)`` of its rows,
without replacement, from a generator seeded by the round's seed (which the server derives from
``params.seed`` and the round number, and sends with the round's first request) and the
client's name. A round's
trees share its sample, as in the core. The union's sample is then a draw of the same kind
(sizes rounded per client); given the same draws (``train(row_sample=...)``), the core grows
the same trees, which the tests check. The server never learns which rows a client sampled,
only how many (the gradient grid's row count, as before).
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.sampling import row_sample

__all__ = ["client_sample", "round_seed"]

I64 = npt.NDArray[np.int64]
#: Separates the round seeds' generator from every other use of ``params.seed``.
_STREAM = 0x5A3D


def round_seed(params: BoostParams, round_: int) -> int:
    """The server's seed for round ``round_`` (0: no sampling): a function of the round alone,
    so a warm start's rounds draw what the same rounds of one longer run draw."""
    if params.subsample >= 1.0:
        return 0
    return int(np.random.default_rng([params.seed, _STREAM, round_]).integers(1, 2**62))


def client_sample(seed: int, client: str, n_rows: int, rate: float) -> I64 | None:
    """The rows client ``client`` samples in the round of ``seed`` (None: every row)."""
    if seed == 0 or rate >= 1.0:
        return None
    tag = int.from_bytes(hashlib.sha256(client.encode()).digest()[:8], "big")
    return row_sample(np.random.default_rng([seed, tag]), n_rows, rate)
