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


@pytest.mark.parametrize("kind", ["distinct", "few values", "half empty"])
def test_a_repaired_first_page_is_the_best_of_the_keys_now(kind, monkeypatch):
    """A first page repaired from the reserve of the ranking before, as
    keys move (a claim's trees: better for pack, worse for spread, some
    past the reserve's bound), is the stable sort's head of the keys now,
    step after step; a reserve that no longer holds enough is dropped.
    The ranking's keys, followed as a patch over its first ones (written
    in once it grows past its bound), are the keys now."""
    monkeypatch.setattr(order, "MOST_PATCHED", 40)
    rng = np.random.default_rng(47)
    keys, count = _keys(kind, 5000, rng), 100
    ranked = order.Ranked(np.arange(len(keys)), keys)
    reserves: dict = {}
    head = order._head(keys, count, reserves)
    assert head.tolist() == np.argsort(keys, kind="stable")[:count].tolist()
    repaired = 0
    for step in range(300):
        keys = keys.copy()
        moved = np.unique(rng.integers(0, len(keys), 1 + step % 5))
        if step % 3:  # into the first page or within it
            keys[moved] = np.minimum(keys[moved], -rng.random(len(moved)))
        else:  # out of it
            keys[moved] = rng.random(len(moved)) * 2 - 1
        heads, reserves = order._repaired(reserves, moved, keys[moved])
        base, patch = order._patched(ranked, moved, keys[moved])
        ranked = ranked._replace(keys=base, patch=patch)
        assert order._keys(ranked).tolist() == keys.tolist(), step
        expected = np.argsort(keys, kind="stable")[:count].tolist()
        if count in heads:
            repaired += 1
            assert heads[count].tolist() == expected, step
        else:
            reserves = {}
            assert order._head(keys, count, reserves).tolist() == expected
    assert repaired > 200
