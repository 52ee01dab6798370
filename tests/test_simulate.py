"""``p2pboost.simulate``: refusals (the working paths run in the simulation tutorial, see
tests/test_docs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from p2pboost import simulate
from p2pboost.exceptions import InputError


def test_what_cannot_be_a_federation_is_refused() -> None:
    X, y = np.zeros((4, 2)), np.array([0.0, 1.0, 0.0, 1.0])
    with pytest.raises(InputError, match="at least one host"):
        simulate.vertical((X, y), [])
    with pytest.raises(InputError, match="at least two clients"):
        simulate.horizontal([(X, y)])
