"""The order trees are offered in ([placement] allocation_candidates_order,
doc/api.md "Order, cap and limit"): ``id`` (ascending root id), or by how
used each tree is, judged on the classes a request asks for: the mean,
over those of the classes the tree has capacity of, of its used share of
that capacity (ties by root id). ``spread`` offers the least used trees
first, ``pack`` the most used (the drain plan orders its targets the
same way, doc/drain.md).

Without a limit, or without the catalog, every tree is read and the
anchors' plans are searched in ``positions``' order (``tree_sums`` and
``key`` over the snapshot, as the drain plan ranks its targets). A
limited search over the catalog reads only the best trees: ``ranked``
ranks every tree on the catalog's columns and the usage of every
provider of the requested classes, ``pages`` takes the best by a partial
sort, and each page read is searched in ``positions``' order at the
usage it read: the page's own order where the ranking was made at that
usage (``Ranked.usage``, the catalog's usage in memory) with the keys
``positions`` computes, bit for bit (``_exact``). A ranking may serve
the requests of the same shape for ``[placement]
allocation_candidates_order_age`` seconds: which trees are read then
lags that much behind the claims, their order and whether a candidate
fits never do.
"""

import time
import typing
from collections.abc import Collection
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence

import numpy as np

from placement.objects.allocation_candidates import providers
from placement.objects.catalog import columns as catalog_columns

if typing.TYPE_CHECKING:
    from placement.objects.catalog import store

ORDERS = ("id", "spread", "pack")
# A first page is partitioned among the keys up to a bound taken from
# every SAMPLE-th key (``_best``).
SAMPLE = 16
# Rankings kept per catalog (request shapes: order, flavor, narrowed
# trees; 1.6 MB each at 100,000 hosts); past them all are forgotten.
MOST_RANKINGS = 32
# The largest amount the int64 columns judge: a larger one is the
# snapshot's (Python ints).
_COLUMN_MAX = 2**62

# {(root, class): [capacity, used]}
Sums = dict[tuple[int, int], list[int]]


def tree_sums(snapshot: providers.Snapshot) -> Sums:
    """{(root, class): [capacity, used]} of every tree of ``snapshot``."""
    sums: Sums = {}
    every = snapshot.providers
    for (rp, rc), inventory in snapshot.inventories.items():
        # Inventory.capacity without a call per inventory.
        total, reserved, ratio, _, _, _, used = inventory
        capacity = int((total - reserved) * ratio)
        key = (every[rp].root_id, rc)
        entry = sums.get(key)
        if entry is None:
            sums[key] = [capacity, used]
        else:
            entry[0] += capacity
            entry[1] += used
    return sums


def used_share(sums: Sums, root: int, classes: Iterable[int]) -> float:
    """The mean over ``classes`` the tree has capacity of of its used
    share of that capacity (0 for none)."""
    shares = 0.0
    counted = 0
    for rc in classes:
        entry = sums.get((root, rc))
        if entry and entry[0]:
            shares += entry[1] / entry[0]
            counted += 1
    return shares / counted if counted else 0.0


def key(order: str, sums: Sums, root: int, classes: Iterable[int]) -> tuple:
    """Where a tree comes in ``order`` (spread or pack) for a request
    asking ``classes``: least used first (spread) or most used first
    (pack); then by root id."""
    share = used_share(sums, root, classes)
    return (share if order == "spread" else -share, root)


def positions(
    order: str, snapshot: providers.Snapshot, classes: Collection[int]
) -> dict[int, int]:
    """{root: its place in ``order``} of the snapshot's trees."""
    sums = tree_sums(snapshot)
    roots = {p.root_id for p in snapshot.providers.values()}
    roots.update(*snapshot.serves.values())
    ranked = sorted(roots, key=lambda root: key(order, sums, root, classes))
    return {root: i for i, root in enumerate(ranked)}


class Ranked(typing.NamedTuple):
    """Trees and their keys in ``order`` (smaller first), by root id."""

    roots: np.ndarray  # root ids, ascending
    keys: np.ndarray  # aligned with ``roots``
    # The catalog's usage in memory (catalog.used.Used) the keys were
    # made at, where they are exactly ``key``'s at that usage; else None.
    usage: object = None
    # {count: indexes of the ``count`` best}: a kept ranking's first
    # page, partitioned once (``pages``)
    heads: dict | None = None


def ranked(
    catalog: "store.Catalog",
    index: providers.Index,
    order: str,
    amounts: Sequence[tuple[int, int]],
    roots: Sequence[int] | None,
    age: float = 0.0,
    classes: Sequence[int] = (),
) -> Ranked | None:
    """The trees that may serve ``amounts`` ((class, amount) of every
    group), with their keys in ``order``: for each amount, some provider
    of the tree has room for it (what the search judges first: a tree
    without it gives no candidate). ``roots``: only these trees (None:
    all). From the catalog's columns and the usage of every provider of
    the requested classes (``index.usage_columns``: one statement, or
    none where the catalog holds usage), or the ranking of a request of
    the same shape made less than ``age`` seconds ago. None where the
    columns cannot judge (an amount past int64: the snapshot's way then).
    ``classes``: the requested classes in the order ``positions`` is
    given them (the shares are summed in it, as ``used_share`` sums).
    """
    if any(not 0 < amount < _COLUMN_MAX for _, amount in amounts):
        return None
    columns = catalog_columns.of(catalog)
    wanted = {rc for rc, _ in amounts}
    classes = tuple(
        rc for rc in dict.fromkeys((*classes, *sorted(wanted))) if rc in wanted
    )
    shape = (
        order,
        tuple(sorted(amounts)),
        None if roots is None else tuple(roots),
        classes,
    )
    now = time.monotonic()
    made = columns.rankings.get(shape)
    if made is not None and now - made[0] < age:
        return made[1]
    found = _ranked(columns, index, order, amounts, roots, classes)
    if age > 0:
        if len(columns.rankings) >= MOST_RANKINGS:
            columns.rankings.clear()
        columns.rankings[shape] = (now, found)
    return found


def _ranked(columns, index, order, amounts, roots, classes):
    size = len(columns.roots)
    wanted = tuple(sorted({rc for rc, _ in amounts}))
    if any(rc not in columns.stock for rc in wanted):
        return Ranked(np.empty(0, dtype=np.int64), np.empty(0), None, {})
    used_of = index.usage_columns(wanted, columns.stock)
    memory = getattr(index, "used", None)
    shares = np.zeros(size)
    counted = np.zeros(size)
    exact = True
    for rc in classes:
        used = used_of[rc]
        capacity = columns.capacity(rc)
        held = capacity > 0
        # A class with one row per tree (flat clouds): its usage column
        # is the trees' (a float64 sum of one value is that value); else
        # the sums per tree the usage in memory keeps.
        per_tree = columns.per_tree(rc)
        total = used if per_tree else _totals(columns.stock[rc], used, memory, rc, size)
        # Adding 0.0 where a tree holds none leaves its sum as it was.
        shares += np.divide(total, capacity, out=np.zeros(size), where=held)
        counted += held
        exact = exact and _exact(columns, rc, used, None if per_tree else total)
    fitting = None
    for rc, amount in amounts:
        # catalog_columns.fits(...) > 0, one comparison per row
        room = used_of[rc] <= columns.most_used(rc, amount)
        if columns.per_tree(rc):
            tree = room
        else:
            tree = np.zeros(size, dtype=bool)
            tree[columns.stock[rc].root[room]] = True
        fitting = tree if fitting is None else fitting & tree
    if roots is not None:
        fitting &= np.isin(columns.roots, roots)
    share = np.divide(shares, counted, out=np.zeros(size), where=counted > 0)
    at = np.flatnonzero(fitting)
    return Ranked(
        columns.roots[at],
        share[at] if order == "spread" else -share[at],
        memory if exact else None,
        {},
    )


def _totals(stock, used, memory, rc, size):
    """Per tree, the sum of ``used`` (aligned with ``stock``'s rows):
    the usage in memory's kept sums where it is that usage, else summed."""
    if memory is not None:
        total = memory.tree_totals(rc, stock.rp, stock.root, size)
        if total is not None:
            return total
    return np.bincount(stock.root, used, size)


def _exact(columns, rc, used, total):
    """Whether a class's shares in the columns are ``used_share``'s to
    the bit: every limit Python's ``int`` of the same product (not
    clipped, not negative: floor and truncation agree), every tree's
    capacity and usage (``total``; None: ``used`` is the trees')
    summed exactly in float64."""
    if not columns.exact_limits(rc) or (len(used) and used.min() < 0):
        return False
    total = used if total is None else total
    return bool(not len(total) or total.max() < catalog_columns.FLOAT_EXACT)


def pages(trees: Ranked, first: int) -> Iterator[list[int]]:
    """The ranked trees' root ids in order, in pages growing from
    ``first``. The first page is a partial sort (the trees past it are
    sorted only if the search goes on to them)."""
    roots, keys, _, heads = trees
    if not len(roots):
        return
    head = None if heads is None else heads.get(first)
    if head is None:
        head = _best(keys, first)
        if heads is not None:
            heads[first] = head  # read only from now on
    yield roots[head].tolist()
    rest = np.ones(len(roots), dtype=bool)
    rest[head] = False
    at = np.flatnonzero(rest)
    at = at[np.argsort(keys[at], kind="stable")]
    start, size = 0, 2 * first
    while start < len(at):
        yield roots[at[start : start + size]].tolist()
        start += size
        size = min(2 * size, providers.CHUNK)


def _best(keys: np.ndarray, count: int) -> np.ndarray:
    """The indexes of the ``count`` smallest ``keys``, ties by index
    (root id): an O(n) partition, then a sort of those only."""
    if count >= len(keys):
        return np.argsort(keys, kind="stable")
    least = keys.min()
    tied = np.flatnonzero(keys == least)
    if len(tied) >= count:
        # The best all tie (spread's empty trees): by index. A partition
        # among so many equal keys is the slowest case of introselect.
        return tied[:count]
    # The partition among the keys up to a bound that a sample of every
    # SAMPLE-th key shows to hold at least ``count`` of them: the best
    # are all there, in index order still.
    within = None
    if len(keys) >= 8 * SAMPLE and len(keys) >= 8 * count:
        sample = keys[::SAMPLE]
        bound = np.partition(sample, 2 * count // SAMPLE + 8)[2 * count // SAMPLE + 8]
        within = np.flatnonzero(keys <= bound)
        if len(within) < count:
            within = None
    if within is None:
        within = np.arange(len(keys))
    some = keys[within]
    threshold = some[np.argpartition(some, count - 1)[count - 1]]
    below = within[some < threshold]
    tied = within[some == threshold][: count - len(below)]
    head = np.concatenate((below, tied))
    head.sort()
    return head[np.argsort(keys[head], kind="stable")]
