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
``positions`` computes, bit for bit (``_exact``); for a ranking kept
from an older usage, the page ordered again from the columns at the
usage in memory now (``ordered_now``). A ranking may serve
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
# Keys a followed ranking holds as changes over its base keys
# (``Ranked.patch``) before it writes them into a copy of the base.
MOST_PATCHED = 4096

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
    keys: np.ndarray  # aligned with ``roots``, before ``patch`` (``_keys``)
    # The catalog's usage in memory (catalog.used.Used) the keys were
    # made at, where they are exactly ``key``'s at that usage; else None.
    usage: object = None
    # {count: indexes of the ``count`` best}: a ranking's first page,
    # partitioned once (``pages``)
    heads: dict | None = None
    # {count: (indexes of the 2 x ``count`` best in order, their keys,
    # the last's key, its index)}: every other index's (key, index) is
    # past the last's, so a ranking followed from this one repairs its
    # first page from them (``_followed``)
    reserves: dict | None = None
    # (indexes, their keys now) of a ranking followed across claims: the
    # keys that changed since ``keys``, kept apart so that following one
    # does not copy every tree's key (a request's cold read and write of
    # them cost more than the rest of following it)
    patch: tuple[np.ndarray, np.ndarray] | None = None


def _keys(ranked: Ranked) -> np.ndarray:
    """``ranked``'s keys with its patch written in (a copy where it has
    one)."""
    if ranked.patch is None:
        return ranked.keys
    keys = ranked.keys.copy()
    keys[ranked.patch[0]] = ranked.patch[1]
    return keys


def _patched(ranked: Ranked, moved: np.ndarray, keys: np.ndarray) -> tuple:
    """(base keys, patch) of ``ranked`` with the keys at indexes ``moved``
    now ``keys``: the patch grown (the latest key of each index), or,
    past MOST_PATCHED, written into a copy of the base."""
    if ranked.patch is not None:
        at = np.concatenate((ranked.patch[0], moved))
        now = np.concatenate((ranked.patch[1], keys))
        # The last of each index's keys: the first of the reversed.
        at, last = np.unique(at[::-1], return_index=True)
        moved, keys = at, now[::-1][last]
    if len(moved) <= MOST_PATCHED:
        return ranked.keys, (moved, keys)
    base = ranked.keys.copy()
    base[moved] = keys
    return base, None


class _Made(typing.NamedTuple):
    """A ranking and what following it to another usage needs."""

    ranked: Ranked
    used: dict  # {class: its usage column the keys were made at}
    totals: dict  # {class: per tree, its usage (exact ints)}
    rooms: list  # per amount: per tree, its rows with room; None per tree
    fitting: np.ndarray  # per tree (bool): in ``ranked``
    allowed: np.ndarray | None  # per tree (bool): of the asked roots


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
    the same shape made less than ``age`` seconds ago. An older one made
    at the usage in memory is followed to the usage now: only the trees
    whose usage changed are ranked again (``_followed``). None where the
    columns cannot judge (an amount past int64: the snapshot's way then).
    ``classes``: the requested classes in the order ``positions`` is
    given them (the shares are summed in it, as ``used_share`` sums).
    """
    if any(not 0 < amount < _COLUMN_MAX for _, amount in amounts):
        return None
    columns = catalog_columns.of(catalog)
    classes = _summed(amounts, classes)
    shape = (
        order,
        tuple(sorted(amounts)),
        None if roots is None else tuple(roots),
        classes,
    )
    now = time.monotonic()
    made = columns.rankings.get(shape)
    if made is not None and now - made[0] < age:
        return made[1].ranked
    found = None
    if made is not None:
        found = _followed(columns, index, order, amounts, classes, made[1])
    if found is None:
        found = _ranked(columns, index, order, amounts, roots, classes)
    if age > 0 or found.ranked.usage is not None:
        if len(columns.rankings) >= MOST_RANKINGS:
            columns.rankings.clear()
        columns.rankings[shape] = (now, found)
    return found.ranked


def _summed(amounts, classes):
    """The requested classes of ``amounts`` in the order their shares are
    summed: ``classes``' (as ``positions`` is given them), then by id."""
    wanted = {rc for rc, _ in amounts}
    return tuple(
        rc for rc in dict.fromkeys((*classes, *sorted(wanted))) if rc in wanted
    )


def ordered_now(
    catalog: "store.Catalog",
    index: providers.Index,
    order: str,
    amounts: Sequence[tuple[int, int]],
    classes: Sequence[int] = (),
) -> typing.Callable[[list[int]], list[int]] | None:
    """For a ranking kept from an older usage (``ranked`` within its
    age): a page of its trees (root ids) in their order at the usage in
    memory now, bit for bit ``positions``' order of the page's snapshot,
    from the columns (no tree read). None without usage in memory or
    where the columns cannot judge it exactly (the page's snapshot then
    orders it)."""
    memory = getattr(index, "used", None)
    columns = catalog_columns.of(catalog)
    summed = _summed(amounts, classes)
    if memory is None or any(rc not in columns.stock for rc in summed):
        return None
    totals, exact = _totals_at(
        columns, summed, index.usage_columns(summed, columns.stock), memory
    )
    if not exact:
        return None

    def ordered(page: list[int]) -> list[int]:
        roots = np.array(page, dtype=np.int64)
        shares = _shares(columns, summed, totals, columns.positions(roots), len(roots))
        return roots[
            np.lexsort((roots, shares if order == "spread" else -shares))
        ].tolist()

    return ordered


def _totals_at(columns, classes, used_of, memory):
    """({class: per tree, its usage}, whether every class's shares are
    ``used_share``'s to the bit, ``_exact``) at the usage columns
    ``used_of``."""
    size = len(columns.roots)
    totals = {}
    exact = True
    for rc in classes:
        used = used_of[rc]
        # A class with one row per tree (flat clouds): its usage column
        # is the trees' (a float64 sum of one value is that value); else
        # the sums per tree the usage in memory keeps.
        per_tree = columns.per_tree(rc)
        total = used if per_tree else _totals(columns.stock[rc], used, memory, rc, size)
        totals[rc] = total
        exact = exact and _exact(columns, rc, used, None if per_tree else total, memory)
    return totals, exact


def _ranked(columns, index, order, amounts, roots, classes):
    size = len(columns.roots)
    wanted = tuple(sorted({rc for rc, _ in amounts}))
    if any(rc not in columns.stock for rc in wanted):
        none = np.empty(0, dtype=np.int64)
        return _Made(Ranked(none, np.empty(0), None, {}), {}, {}, [], none, None)
    used_of = index.usage_columns(wanted, columns.stock)
    memory = getattr(index, "used", None)
    totals, exact = _totals_at(columns, classes, used_of, memory)
    share = _shares(columns, classes, totals, slice(None), size)
    fitting = None
    rooms = []
    for rc, amount in amounts:
        # catalog_columns.fits(...) > 0, one comparison per row
        room = used_of[rc] <= columns.most_used(rc, amount)
        if columns.per_tree(rc):
            tree = room
            rooms.append(None)
        else:
            # How many of each tree's rows have room: followed by the
            # rows a claim changes (``_followed``).
            count = np.bincount(columns.stock[rc].root[room], minlength=size)
            tree = count > 0
            rooms.append(count)
        fitting = tree if fitting is None else fitting & tree
    allowed = None
    if roots is not None:
        allowed = np.isin(columns.roots, roots)
        fitting &= allowed
    at = np.flatnonzero(fitting)
    ranked = Ranked(
        columns.roots[at],
        share[at] if order == "spread" else -share[at],
        memory if exact else None,
        {},
        {},
    )
    return _Made(ranked, used_of, totals, rooms, fitting, allowed)


def _shares(columns, classes, totals, trees, size):
    """The mean used share of ``trees`` (tree indexes, or a slice; ``size``
    of them) over ``classes`` they hold, from ``totals`` {class: per tree,
    its usage}: summed in ``classes``' order, as ``used_share`` sums."""
    shares = np.zeros(size)
    counted = np.zeros(size)
    for rc in classes:
        capacity = columns.capacity(rc)[trees]
        held = capacity > 0
        # Adding 0.0 where a tree holds none leaves its sum as it was.
        shares += np.divide(totals[rc][trees], capacity, out=np.zeros(size), where=held)
        counted += held
    return np.divide(shares, counted, out=np.zeros(size), where=counted > 0)


def _followed(columns, index, order, amounts, classes, made):
    """``made`` (a ranking at the usage in memory) followed to the usage
    in memory now, the same as ``_ranked`` would make it: the keys and
    room of the trees whose usage of the requested classes changed made
    again, the first pages repaired from the reserves (``_repaired``).
    None where it cannot be followed (no usage in memory, sums no longer
    exact)."""
    before = made.ranked
    memory = getattr(index, "used", None)
    if memory is None or before.usage is None:
        return None
    used_of = index.usage_columns(tuple(made.used), columns.stock)
    # The rows a claim changed, as the usage in memory followed them;
    # else found by comparing the columns.
    since = memory.changed_since(before.usage)
    changed = {}
    for rc, used in used_of.items():
        old = made.used[rc]
        if used is old:
            continue
        if len(used) != len(old):
            return None
        if since is not None and used is memory.amount.get(rc):
            rows = since.get(rc, np.empty(0, dtype=np.int64))
        else:
            rows = np.flatnonzero(used != old)
        if len(rows):
            changed[rc] = rows
    if not changed:
        return made._replace(ranked=before._replace(usage=memory), used=used_of)
    size = len(columns.roots)
    totals = dict(made.totals)
    trees = []
    for rc, rows in changed.items():
        used = used_of[rc]
        if columns.per_tree(rc):
            values = used[rows]
            if values.min() < 0 or values.max() >= catalog_columns.FLOAT_EXACT:
                return None
            totals[rc] = used
            trees.append(rows)
        else:
            stock = columns.stock[rc]
            # Kept as int64 only while exact (catalog.used.Used).
            total = memory.tree_totals(rc, stock.rp, stock.root, size)
            if total is None or total.dtype != np.int64:
                return None
            totals[rc] = total
            trees.append(stock.root[rows])
    # (np.unique costs more than this for the few trees of a claim.)
    moved = np.array(sorted(set(np.concatenate(trees).tolist())), dtype=np.int64)
    keys = _shares(columns, classes, totals, moved, len(moved))
    if order != "spread":
        keys = -keys
    fit = np.ones(len(moved), dtype=bool)
    if made.allowed is not None:
        fit &= made.allowed[moved]
    rooms = list(made.rooms)
    for i, (rc, amount) in enumerate(amounts):
        most = columns.most_used(rc, amount)
        if rooms[i] is None:
            fit &= used_of[rc][moved] <= most[moved]
            continue
        rows = changed.get(rc)
        if rows is not None:
            now = (used_of[rc][rows] <= most[rows]).astype(rooms[i].dtype)
            count = rooms[i].copy()
            np.add.at(
                count,
                columns.stock[rc].root[rows],
                now - (made.used[rc][rows] <= most[rows]),
            )
            rooms[i] = count
        fit &= rooms[i][moved] > 0
    if np.array_equal(fit, made.fitting[moved]):
        fitting = made.fitting
        places = np.searchsorted(before.roots, columns.roots[moved[fit]])
        new, patch = _patched(before, places, keys[fit])
        heads, reserves = _repaired(before.reserves or {}, places, keys[fit])
    else:
        # Trees came into the ranking or left it: its positions move.
        fitting = made.fitting.copy()
        fitting[moved] = fit
        every = np.zeros(size)
        every[np.flatnonzero(made.fitting)] = _keys(before)
        every[moved] = keys
        at = np.flatnonzero(fitting)
        before = before._replace(roots=columns.roots[at])
        new, heads, reserves, patch = every[at], {}, {}, None
    ranked = Ranked(before.roots, new, memory, heads, reserves, patch)
    return _Made(ranked, used_of, totals, rooms, fitting, made.allowed)


def _repaired(reserves, moved, now):
    """({count: first page}, reserves) of a ranking whose keys at
    indexes ``moved`` changed (to ``now``), from the ``reserves`` made
    before: every index outside one was past its bound and still is where
    it did not move, so a reserve with the moved indexes now within the
    bound put in (those past it taken out) still holds the ``count`` best
    while it holds ``count`` indexes. The moved are few: each is put in
    its place by binary searches, the reserve not sorted again; the
    reserve's keys are its own (no read of every tree's)."""
    heads, kept = {}, {}
    for count, (reserve, held, key, index) in reserves.items():
        still = (reserve[:, np.newaxis] != moved).all(axis=1)
        stays, ordered = reserve[still], held[still]
        coming = (now < key) | ((now == key) & (moved <= index))
        comes, values = moved[coming], now[coming]
        if len(stays) + len(comes) < count:
            continue
        by = np.lexsort((comes, values))
        comes, values = comes[by], values[by]
        places = []
        for tree, value in zip(comes.tolist(), values.tolist()):
            low = int(np.searchsorted(ordered, value, "left"))
            high = int(np.searchsorted(ordered, value, "right"))
            places.append(low + int(np.searchsorted(stays[low:high], tree)))
        if places:  # (np.insert costs 10 us even where none come in)
            stays = np.insert(stays, places, comes)
            ordered = np.insert(ordered, places, values)
        kept[count] = (stays, ordered, key, index)
        heads[count] = stays[:count]
    return heads, kept


def _totals(stock, used, memory, rc, size):
    """Per tree, the sum of ``used`` (aligned with ``stock``'s rows):
    the usage in memory's kept sums where it is that usage, else summed."""
    if memory is not None:
        total = memory.tree_totals(rc, stock.rp, stock.root, size)
        if total is not None:
            return total
    return np.bincount(stock.root, used, size)


def _exact(columns, rc, used, total, memory=None):
    """Whether a class's shares in the columns are ``used_share``'s to
    the bit: every limit Python's ``int`` of the same product (not
    clipped, not negative: floor and truncation agree), every tree's
    capacity and usage (``total``; None: ``used`` is the trees')
    summed exactly in float64. The usage in memory's columns are read
    only, a new array where the usage changed: the judgement is kept
    with the arrays it was made on and ``memory`` (the usage in memory,
    catalog.used.Used), taken again at the same arrays, and followed to
    a later usage in memory by the rows that changed since (``used``
    its column, one row per tree): two passes over every row per class
    saved."""
    found = columns.exact_usage.get(rc)
    if found is not None and found[0] is used and found[1] is total:
        return found[2]
    exact = None
    if (
        found is not None
        and found[2]
        and total is None
        and found[1] is None
        and found[3] is not None
        and memory is not None
        and used is memory.amount.get(rc)
        and len(used) == len(found[0])
    ):
        since = memory.changed_since(found[3])
        if since is not None:
            values = used[since.get(rc, np.empty(0, dtype=np.int64))]
            exact = not len(values) or bool(
                values.min() >= 0 and values.max() < catalog_columns.FLOAT_EXACT
            )
    if exact is None:
        exact = columns.exact_limits(rc) and not (len(used) and used.min() < 0)
        if exact:
            every = used if total is None else total
            exact = bool(not len(every) or every.max() < catalog_columns.FLOAT_EXACT)
    if not used.flags.writeable and (total is None or not total.flags.writeable):
        mine = memory is not None and used is memory.amount.get(rc)
        columns.exact_usage[rc] = (used, total, exact, memory if mine else None)
    return exact


def pages(trees: Ranked, first: int) -> Iterator[list[int]]:
    """The ranked trees' root ids in order, in pages growing from
    ``first``. The first page is a partial sort (the trees past it are
    sorted only if the search goes on to them)."""
    roots, _, _, heads, reserves, _ = trees
    if not len(roots):
        return
    head = None if heads is None else heads.get(first)
    keys = None
    if head is None:
        keys = _keys(trees)
        head = _head(keys, first, reserves)
        if heads is not None:
            heads[first] = head  # read only from now on
    yield roots[head].tolist()
    if keys is None:
        keys = _keys(trees)
    rest = np.ones(len(roots), dtype=bool)
    rest[head] = False
    at = np.flatnonzero(rest)
    at = at[np.argsort(keys[at], kind="stable")]
    start, size = 0, 2 * first
    while start < len(at):
        yield roots[at[start : start + size]].tolist()
        start += size
        size = min(2 * size, providers.CHUNK)


def _head(keys: np.ndarray, count: int, reserves: dict | None) -> np.ndarray:
    """``_best(keys, count)``; where ``reserves`` is given, the twice as
    many best kept in it for the rankings followed from this one."""
    if reserves is None or 2 * count >= len(keys):
        return _best(keys, count)
    reserve = _best(keys, 2 * count)
    held = keys[reserve]
    reserves[count] = (reserve, held, held[-1], reserve[-1])
    return reserve[:count]


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
