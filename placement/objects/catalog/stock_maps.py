"""A whole read's inventories as the catalog's maps (``Catalog._whole``:
per provider its (class, Inventory) pairs, per class its inventories),
made from the joined columns they were read as (``rows.Joined``) in array
operations rather than row by row: at 1,000,000 providers (1,500,000
inventories) the rows' dicts and the loop over them took 3 s of CPU in
placement-api's master (issue 44). Equal inventories are one object, and
so are equal lists of pairs, as ``rows.Interned`` makes them."""

import itertools
import typing

import numpy as np

from placement.objects.catalog import rows
from placement.objects.catalog import runs


class Maps(typing.NamedTuple):
    by_provider: dict  # rp -> ((class, Inventory), ...) by class, rp in order
    idle: dict  # class -> {(rp, class): Inventory}, rp in order
    held: dict  # class -> [rp], in order


def of(inventories: tuple, one: rows.Interned) -> Maps:
    """The maps of ``inventories`` (``rows.Joined.inventories``: provider,
    class, total, reserved, min_unit, max_unit, step_size, ratio)."""
    rp, rc, *numbers = inventories
    kind, kinds = _kinds(numbers, one)
    by_provider = _by_provider(rp, rc, kind, kinds, one)
    order = np.lexsort((rp, rc))
    rp, rc, kind = rp[order], rc[order], kind[order]
    idle, held = {}, {}
    for start, end in _runs(rc):
        found = rp[start:end].tolist()
        cls = int(rc[start])
        held[cls] = found
        idle[cls] = dict(
            zip(
                zip(found, itertools.repeat(cls)),
                map(kinds.__getitem__, kind[start:end].tolist()),
            )
        )
    return Maps(by_provider, idle, held)


def _kinds(numbers, one):
    """(per row, the index of its Inventory in the list; the list): rows
    sorted by their values, a new Inventory where any differs from the
    row before (the ratio by its bits)."""
    keys = [c.view(np.int64) if c.dtype == np.float64 else c for c in numbers]
    count = len(keys[0])
    order = np.lexsort(keys[::-1])
    new = np.zeros(count, dtype=bool)
    new[:1] = True
    for column in keys:
        ordered = column[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    kind = np.empty(count, dtype=np.int64)
    kind[order] = np.cumsum(new) - 1
    first = order[new]
    total, reserved, least, most, step, ratio = (c[first].tolist() for c in numbers)
    kinds = [
        one(rows.Inventory(*values, 0))
        for values in zip(total, reserved, ratio, least, most, step)
    ]
    return kind, kinds


def _by_provider(rp, rc, kind, kinds, one):
    """{rp: ((class, Inventory), ...) by class}: providers with as many
    inventories together, each distinct list of pairs made once."""
    order = np.lexsort((rc, rp))
    rp, rc, kind = rp[order], rc[order], kind[order]
    # Each row's (class, Inventory) pair as a small int.
    pairs, code = np.unique(rc * len(kinds) + kind, return_inverse=True)
    code = code.reshape(-1)
    pair_of = [(int(p) // len(kinds), kinds[int(p) % len(kinds)]) for p in pairs]
    return runs.grouped(rp, code, lambda listed: one(tuple(pair_of[p] for p in listed)))


def _runs(values):
    """(start, end) of each run of equal ``values``."""
    starts = runs.starts(values)
    return zip(starts.tolist(), np.append(starts[1:], len(values)).tolist())
