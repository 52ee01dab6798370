"""Row sampling in horizontal training: each client draws its own rows, by the core's rule.

No party of a horizontal federation sees all rows, so each client applies the core's rule
(:mod:`p2pboost.gbdt.sampling`) to its own, with a generator seeded by the round's seed (which
the server derives from ``params.seed`` and the round number, and sends with every ``grid``
request of the round) and the client's name:

* ``subsample``: ``round(subsample * n_c)`` of its rows, without replacement
  (:func:`~p2pboost.gbdt.sampling.row_sample`);
* GOSS (``goss``): the ``top_rate`` share of its rows with the largest ``|g|`` (summed over
  outputs) and a random ``other_rate`` share of the rest, whose gradients and hessians are
  multiplied by ``(1 - top_rate) / other_rate``
  (:func:`~p2pboost.gbdt.sampling.goss_sample`). The ranking is the client's own: the top
  rows are its largest gradients, not the union's.

A round's trees share its sample, as in the core. The union's sample is then a draw of the
same kind (sizes rounded per client); given the same draws (:func:`union_draws`, for
``train(row_sample=..., goss_sample=...)``), the core grows the same trees, which the tests
and the ``homo`` benchmark check. The server never learns which rows a client sampled, only
how many (the gradient grid's row count, as without sampling).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.rounds import GossSample, RowSample
from p2pboost.gbdt.sampling import goss_sample, row_sample

__all__ = ["UnionDraws", "client_goss", "client_rows", "client_sample", "round_seed", "union_draws"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
#: Separates the round seeds' generator from every other use of ``params.seed``.
_STREAM = 0x5A3D


def round_seed(params: BoostParams, round_: int) -> int:
    """The server's seed for round ``round_`` (0: no row sampling): a function of the round
    alone, so a warm start's rounds draw what the same rounds of one longer run draw."""
    if params.subsample >= 1.0 and not params.goss:
        return 0
    return int(np.random.default_rng([params.seed, _STREAM, round_]).integers(1, 2**62))


def _generator(seed: int, client: str) -> np.random.Generator:
    """Client ``client``'s generator in the round of ``seed`` (its own: the name is mixed in)."""
    tag = int.from_bytes(hashlib.sha256(client.encode()).digest()[:8], "big")
    return np.random.default_rng([seed, tag])


def client_sample(seed: int, client: str, n_rows: int, rate: float) -> I64 | None:
    """The rows client ``client`` samples in the round of ``seed`` (None: every row)."""
    if seed == 0 or rate >= 1.0:
        return None
    return row_sample(_generator(seed, client), n_rows, rate)


def client_goss(
    seed: int, client: str, grad: F64, top_rate: float, other_rate: float
) -> tuple[I64, F64]:
    """GOSS's rows and per-row gradient multipliers of client ``client`` in the round of
    ``seed``, from its rows' gradients ``grad`` ``(n_c, K)``."""
    return goss_sample(_generator(seed, client), grad, top_rate, other_rate)


def client_rows(
    params: BoostParams, seed: int, client: str, grad: F64, hess: F64
) -> tuple[F64, F64, I64 | None]:
    """A client's gradients and hessians for the round of ``seed`` (GOSS's multipliers
    applied) and the rows it samples (None: every row), as the core's round loop gives them
    (:meth:`~p2pboost.gbdt.rounds.RoundLoop.sample_rows`)."""
    if params.goss:
        rows, scale = client_goss(seed, client, grad, params.top_rate, params.other_rate)
        return grad * scale[:, None], hess * scale[:, None], rows
    return grad, hess, client_sample(seed, client, grad.shape[0], params.subsample)


@dataclass(frozen=True)
class UnionDraws:
    """The clients' draws as the core's hooks (None: the parameters draw nothing of that
    kind): ``train(params, X, y, row_sample=d.row_sample, goss_sample=d.goss_sample)`` on the
    union's rows, stacked in the clients' order, grows the federation's trees."""

    row_sample: RowSample | None
    goss_sample: GossSample | None


def union_draws(params: BoostParams, clients: Sequence[tuple[str, int]]) -> UnionDraws:
    """The draws of a federation whose clients ``(name, rows)`` hold the union's rows in this
    order, for the core (the reference the tests and the benchmark compare with)."""
    names = [name for name, _ in clients]
    offsets = np.cumsum([0, *(n for _, n in clients)])

    def check(n_rows: int) -> None:
        if n_rows != offsets[-1]:
            raise InputError(f"the core has {n_rows} rows, the clients {int(offsets[-1])}")

    def rows(round_: int, n_rows: int) -> I64:
        check(n_rows)
        seed = round_seed(params, round_)
        drawn = []
        for c, lo, hi in zip(names, offsets[:-1], offsets[1:], strict=True):
            d = client_sample(seed, c, int(hi - lo), params.subsample)
            drawn.append(np.arange(lo, hi) if d is None else d + lo)
        return np.concatenate(drawn).astype(np.int64)

    def goss(round_: int, grad: F64) -> tuple[I64, F64]:
        check(grad.shape[0])
        seed = round_seed(params, round_)
        picked, scales = [], []
        for c, lo, hi in zip(names, offsets[:-1], offsets[1:], strict=True):
            r, s = client_goss(seed, c, grad[lo:hi], params.top_rate, params.other_rate)
            picked.append(r + lo)
            scales.append(s)
        return np.concatenate(picked).astype(np.int64), np.concatenate(scales)

    return UnionDraws(
        row_sample=rows if params.subsample < 1.0 else None,
        goss_sample=goss if params.goss else None,
    )
