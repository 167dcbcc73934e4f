"""capacity._distinct is np.unique(values, return_inverse=True), by a
table for small values and by a sort for the others."""

import numpy as np
import pytest

from placement.objects import capacity


@pytest.mark.parametrize(
    "values",
    [
        [],
        [0],
        [5, 3, 5, 0, 3, 7],
        [2**20 - 1, 1, 2**20 - 1],
        [2**20, 4, 4],
        [2**62 - 1, 2**62 - 1, 9],
        [-1, 3, -1],
    ],
)
def test_distinct_is_unique_with_inverse(values):
    values = np.array(values, dtype=np.int64)
    found, at = capacity._distinct(values)
    expected, inverse = np.unique(values, return_inverse=True)
    assert found.tolist() == expected.tolist()
    assert at.tolist() == inverse.tolist()
