"""A ranking's first page (allocation_candidates/order.py ``_best``): the
indexes of the ``count`` smallest keys, ties by index, as a stable sort
orders them, whatever the keys' spread (the sampled bound or not)."""

import numpy as np
import pytest

from placement.objects.allocation_candidates import order


def _keys(kind, n, rng):
    if kind == "distinct":
        return -rng.random(n)
    if kind == "few values":
        return -np.round(rng.random(n), 2)
    if kind == "half empty":
        return np.where(rng.random(n) < 0.5, 0.0, -rng.random(n))
    if kind == "sorted":
        return -np.sort(rng.random(n))[::-1]
    keys = np.zeros(n)  # "all tie but ten"
    keys[rng.integers(0, n, 10)] = -1.0
    return keys


@pytest.mark.parametrize(
    "kind", ["distinct", "few values", "half empty", "sorted", "all tie but ten"]
)
@pytest.mark.parametrize(("n", "count"), [(20000, 1016), (5000, 100), (300, 16)])
def test_best_is_a_stable_sort_s_head(kind, n, count):
    keys = _keys(kind, n, np.random.default_rng(47))
    expected = np.argsort(keys, kind="stable")[:count]
    assert order._best(keys, count).tolist() == expected.tolist()
