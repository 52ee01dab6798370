"""The messages of federated WOE/IV binning (``hetero-woe``, :mod:`p2pboost.hetero.woe`).

One encrypted pass: the host says what it holds, the guest sends its key and the binning
setting, then every aligned row's encrypted label indicator in chunks; the host answers once
with its encrypted event counts and plaintext row counts per bin, and the guest tells it which
of its features the selection keeps (indices into the host's own columns: the names never
leave the host). The field rules bound what a peer can make us allocate; what depends on the
run (row counts, the guest's event total) is checked by :mod:`p2pboost.hetero.woe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import numpy.typing as npt

from p2pboost.crypto.additive import CiphertextBatch
from p2pboost.crypto.keys import AnyPublicKey
from p2pboost.crypto.ou import OUPublicKey
from p2pboost.crypto.paillier import PublicKey
from p2pboost.gbdt.params import MAX_BIN_LIMIT
from p2pboost.protocols._messages import Array, Instance, Int, Message, OneOf

__all__ = [
    "MAX_FEATURES",
    "MAX_ROWS",
    "VERSION",
    "WoeBye",
    "WoeCounts",
    "WoeHello",
    "WoeKept",
    "WoeLabels",
    "WoeSetup",
]

I64 = npt.NDArray[np.int64]

#: The protocol's version (both sides must speak the same).
VERSION = 1
#: Largest row count a host may announce (as in vertical training).
MAX_ROWS = 100_000_000
#: Most features one host may bin.
MAX_FEATURES = 1_000_000
#: Cells of one counts message: every feature's value bins and its missing bin.
MAX_CELLS = MAX_FEATURES * (MAX_BIN_LIMIT + 1)
_VERSION = Int(0, 1 << 16)


class WoeMessage(Message):
    FAMILY = "hetero-woe"


@dataclass(frozen=True)
class WoeHello(WoeMessage, tag="hello"):
    """Host -> guest: its protocol version and the shape of its aligned table."""

    version: Annotated[int, _VERSION]
    n_rows: Annotated[int, Int(1, MAX_ROWS)]
    n_features: Annotated[int, Int(1, MAX_FEATURES)]


@dataclass(frozen=True)
class WoeSetup(WoeMessage, tag="setup"):
    """Guest -> host: the public key the labels are encrypted under (Paillier or OU) and the
    number of quantile bins (``max_bin``, as in training)."""

    version: Annotated[int, _VERSION]
    key: Annotated[AnyPublicKey, OneOf((Instance(PublicKey), Instance(OUPublicKey)))]
    max_bin: Annotated[int, Int(2, MAX_BIN_LIMIT)]


@dataclass(frozen=True)
class WoeLabels(WoeMessage, tag="labels"):
    """Guest -> host: the encrypted label indicators (1: event) of rows ``start ..``."""

    start: Annotated[int, Int(0, MAX_ROWS)]
    ct: Annotated[CiphertextBatch, Instance(CiphertextBatch)]


@dataclass(frozen=True)
class WoeCounts(WoeMessage, tag="counts"):
    """Host -> guest: per feature its number of value bins (``n_value``); then, feature after
    feature, for each value bin and the missing bin the row count (``rows``, plaintext) and
    the encrypted event count (``events``, in the same order)."""

    n_value: Annotated[I64, Array("int64", max_len=MAX_FEATURES)]
    rows: Annotated[I64, Array("int64", max_len=MAX_CELLS)]
    events: Annotated[CiphertextBatch, Instance(CiphertextBatch)]

    def check(self) -> str | None:
        if self.n_value.size and (self.n_value.min() < 1 or self.n_value.max() > MAX_BIN_LIMIT):
            return f"n_value: every feature has 1 to {MAX_BIN_LIMIT} value bins"
        cells = int(self.n_value.sum()) + self.n_value.size
        if self.rows.size != cells or len(self.events) != cells:
            return f"rows and events must hold {cells} cells (value bins and a missing bin each)"
        if self.rows.size and self.rows.min() < 0:
            return "rows: counts are never negative"
        return None


@dataclass(frozen=True)
class WoeKept(WoeMessage, tag="kept"):
    """Guest -> host: the host's own features the selection keeps (column indices, ascending);
    nothing else of the result."""

    features: Annotated[I64, Array("int64", max_len=MAX_FEATURES)]

    def check(self) -> str | None:
        f = self.features
        if f.size and (f.min() < 0 or np.any(np.diff(f) <= 0)):
            return "features: distinct non-negative indices in ascending order"
        return None


@dataclass(frozen=True)
class WoeBye(WoeMessage, tag="bye"):
    """Host -> guest: the kept features arrived; the run is over."""

    ok: Annotated[int, Int(1, 1)] = 1
