"""The catalog's usage columns (catalog/used.py): lookups, and the merge
that follows the log, sharing what did not change and never writing an
array a catalog holds."""

import weakref

import numpy as np
import pytest

from placement.objects.catalog import used


def _array(*values):
    out = np.array(values, dtype=np.int64)
    out.flags.writeable = False
    return out


def _used():
    return used.Used(
        rp={1: _array(2, 5, 9), 3: _array(5)},
        amount={1: _array(4, 0, 7), 3: _array(100)},
        ids=_array(2, 5, 9, 11),
        generation=_array(1, 2, 3, 4),
        modified=_array(100, -1, 300, 400),
        inventoried=_array(50, 60, -1, 70),
    )


def test_lookups():
    mine = _used()
    assert mine.of(1, np.array([9, 2, 11, 5])).tolist() == [7, 4, 0, 0]
    assert mine.of(7, np.array([9])).tolist() == [0]
    assert mine.pairs([1, 3]) == {(2, 1): 4, (9, 1): 7, (5, 3): 100}
    assert mine.pairs([1], [5, 9, 11]) == {(9, 1): 7}
    assert mine.generation_of(9) == 3
    assert mine.generation_of(10) is None
    assert mine.generation_of(12) is None
    assert mine.last_change(9) == (3, 300, None)  # no inventories
    assert mine.last_change(5) == (2, None, 60)  # neither time
    assert mine.last_change(10) is None
    # Aligned with the very holders: the column itself, shared.
    assert mine.column(1, mine.rp[1]) is mine.amount[1]
    assert mine.column(1, np.array([2, 5, 9])) is mine.amount[1]
    assert mine.column(1, np.array([2, 3, 9])).tolist() == [4, 0, 7]


def test_a_claim_copies_one_column_and_shares_the_keys():
    keys, values = _array(2, 5, 9), _array(4, 0, 7)
    new_keys, new_values = used._merged(keys, values, {5}, {5: 3})
    assert new_keys is keys
    assert new_values.tolist() == [4, 3, 7]
    assert values.tolist() == [4, 0, 7]
    assert not new_values.flags.writeable
    # Nothing changed: both shared.
    same_keys, same_values = used._merged(keys, values, {5, 9}, {5: 0, 9: 7})
    assert same_keys is keys and same_values is values


@pytest.mark.parametrize(
    ("named", "now", "keys", "values"),
    [
        ({5}, {}, [2, 9], [4, 7]),  # a holder gone
        ({6}, {6: 1}, [2, 5, 6, 9], [4, 0, 1, 7]),  # a new one
        ({1, 5, 10}, {1: 8, 10: 2}, [1, 2, 9, 10], [8, 4, 7, 2]),
        ({2, 5, 9}, {}, [], []),
    ],
)
def test_holders_come_and_go(named, now, keys, values):
    new_keys, new_values = used._merged(_array(2, 5, 9), _array(4, 0, 7), named, now)
    assert new_keys.tolist() == keys
    assert new_values.tolist() == values
    assert not (new_keys.flags.writeable or new_values.flags.writeable)


def test_few_named_found_one_by_one_as_the_arrays_find_them(monkeypatch):
    rng = np.random.default_rng(7)
    for _ in range(300):
        keys = _array(*np.unique(rng.integers(1, 30, size=rng.integers(0, 8))))
        values = _array(*rng.integers(0, 3, size=len(keys)))
        named = {int(i) for i in rng.integers(1, 30, size=rng.integers(1, 5))}
        now = {rp: int(rng.integers(0, 3)) for rp in named if rng.random() < 0.8}
        few = used._merged(keys, values, named, now)
        monkeypatch.setattr(used, "_FEW", 0)
        arrays = used._merged(keys, values, named, now)
        monkeypatch.undo()
        assert [a.tolist() for a in few] == [a.tolist() for a in arrays]
        # Shared where the arrays' way shares them.
        assert [a is b for a, b in zip(few, (keys, values))] == [
            a is b for a, b in zip(arrays, (keys, values))
        ]
        assert not (few[0].flags.writeable or few[1].flags.writeable)


def test_tree_totals_are_kept_and_follow_a_claim():
    mine = _used()
    root = _array(0, 1, 0)  # holders 2 and 9 in tree 0, 5 in tree 1
    totals = mine.tree_totals(1, mine.rp[1], root, 3)
    assert totals.tolist() == [11, 0, 0]
    assert mine.tree_totals(1, mine.rp[1], root, 3) is totals
    # Not this usage's holders: none.
    assert mine.tree_totals(3, _array(2), _array(0), 3) is None
    # A claim on 5 and a release on 9: the sums follow, none written.
    new = used.Used(
        dict(mine.rp),
        {**mine.amount, 1: _array(4, 3, 2)},
        mine.ids,
        mine.generation,
        mine.modified,
        mine.inventoried,
    )
    new.totals = dict(mine.totals)
    mine._follow_totals(new, 1)
    assert new.totals[1][1].tolist() == [6, 3, 0]
    assert new.tree_totals(1, new.rp[1], root, 3) is new.totals[1][1]
    assert totals.tolist() == [11, 0, 0]
    # Holders come: summed again when asked.
    moved = used.Used(
        {**mine.rp, 1: _array(2, 5)},
        {**mine.amount, 1: _array(4, 3)},
        mine.ids,
        mine.generation,
        mine.modified,
        mine.inventoried,
    )
    moved.totals = dict(mine.totals)
    mine._follow_totals(moved, 1)
    assert 1 not in moved.totals


def test_tree_totals_with_negative_usage_are_summed_each_time():
    mine = used.Used(
        rp={1: _array(2, 5)},
        amount={1: _array(-1, 3)},
        ids=_array(2, 5),
        generation=_array(1, 1),
        modified=_array(0, 0),
        inventoried=_array(0, 0),
    )
    totals = mine.tree_totals(1, mine.rp[1], _array(0, 0), 1)
    assert totals.tolist() == [2.0] and totals.dtype == np.float64
    assert 1 not in mine.totals


def test_table_by_id_and_by_search():
    mine = used.Used(
        rp={1: _array(2, 5, 9), 3: _array(5, 10**7)},  # class 3: sparse ids
        amount={1: _array(4, 0, 7), 3: _array(100, 6)},
        ids=_array(2, 5, 9, 11, 10**7),
        generation=_array(1, 2, 3, 4, 5),
        modified=_array(0, 0, 0, 0, 0),
        inventoried=_array(0, 0, 0, 0, 0),
    )
    rps = np.array([10**7, 9, 11, 2, 5, 10**8, 0])
    assert mine.table([1, 3, 4], rps).tolist() == [
        [-1, 6, -1],
        [7, -1, -1],
        [-1, -1, -1],
        [4, -1, -1],
        [0, 100, -1],
        [-1, -1, -1],
        [-1, -1, -1],
    ]
    assert mine.rows[1][1] is not None and mine.rows[3][1] is None
    assert mine.table([1], np.array([], dtype=np.int64)).shape == (0, 1)


def test_changed_since_walks_the_advances_back():
    first, second, third = _used(), _used(), _used()
    second.before, second.changed = weakref.ref(first), {1: _array(1)}
    third.before, third.changed = weakref.ref(second), {1: _array(2), 3: _array()}
    found = third.changed_since(first)
    assert {rc: rows.tolist() for rc, rows in found.items()} == {1: [2, 1], 3: []}
    assert third.changed_since(third) == {}
    assert third.changed_since(first, steps=1) is None  # too far back
    assert third.changed_since(_used()) is None  # not one it came from
    second.changed[3] = None  # holders came or went there
    assert third.changed_since(first) is None
    del first  # a Used between is gone: not known
    assert third.changed_since(second) is not None
    assert second.before() is None
