"""A catalog's inventories as columns (numpy arrays), per resource class,
for answers about the whole cloud in vector operations (the capacity of
a request: objects/capacity.py). Built once per catalog (``of``), kept
with it and shared by every request; a catalog read whole in
placement-api's master builds them before the fork, so its workers share
the arrays' pages (nothing ever writes them, and the reference counts
that copy-on-write copies are those of a few array objects, not of one
object per inventory)."""

import itertools
import json
import threading
import typing

import numpy as np
import orjson

if typing.TYPE_CHECKING:
    from placement.objects.catalog import store

_BUILDING = threading.Lock()


class Stock(typing.NamedTuple):
    """The inventories of one class, one row per provider holding it, in
    provider id order."""

    rp: np.ndarray  # provider ids (int64), ascending
    root: np.ndarray  # index of the provider's root in Columns.roots
    limit: np.ndarray  # floor((total - reserved) * allocation_ratio), int64
    min_unit: np.ndarray
    max_unit: np.ndarray
    step_size: np.ndarray
    # Some limit, or their sum, is past LIMIT_MAX (a ratio up to 3.4e38
    # makes limits of 2**127 and more): ``limit`` is then clipped, and
    # the class's counts are not for int64 columns (capacity.py scans).
    big: bool = False


# The largest sum of a class's limits the columns count with: per root,
# per aggregate and in total, the counts of instances stay below it, and
# so in int64.
LIMIT_MAX = 2**62
# (class, amount) pairs whose room test ``Columns.most_used`` keeps: past
# them all are forgotten.
MOST_AMOUNTS = 64
# Sums of whole numbers up to this are exact in float64.
FLOAT_EXACT = 2**52
# Rows by id (rows_by_id) are made where the largest id is below DENSE
# times the ids, plus DENSE_SLACK: 4 bytes per id, at most 16 bytes per
# row (or 256 KB) then.
DENSE, DENSE_SLACK = 4, 65536


class Columns:
    """Per class, its Stock; the roots in id order, their order by (name,
    uuid) and the head of each's entry in capacity's JSON; the root
    providers' aggregates as pairs."""

    def __init__(self, catalog: "store.Catalog") -> None:
        self.roots = np.array(catalog.roots, dtype=np.int64)
        position = {root: i for i, root in enumerate(catalog.roots)}
        names, uuids = catalog.names, catalog.uuids
        order = sorted(
            range(len(catalog.roots)),
            key=lambda i: (names[catalog.roots[i]], uuids[catalog.roots[i]]),
        )
        # Positions in ``roots`` in the order of their names.
        self.by_name = np.array(order, dtype=np.int64)
        pairs = [
            (position[root], aggregate)
            for root in catalog.roots
            for aggregate in catalog.aggregates.get(root, ())
        ]
        # The aggregates of roots in id order (``aggregate_uuids``), and
        # per pair the root's position and its aggregate's.
        held = sorted({a for _, a in pairs})
        at = {a: i for i, a in enumerate(held)}
        uuids = {i: u for u, i in catalog.aggregate_ids.items()}
        self.aggregate_uuids = [uuids[a] for a in held]
        self.member = np.array([p for p, _ in pairs], dtype=np.int64)
        self.aggregate = np.array([at[a] for _, a in pairs], dtype=np.int64)
        # Per root, the start of its entry in capacity's JSON answer,
        # '{"uuid":...,"name":...,"count":', as one row of bytes padded
        # with NULs (``heads``): the answer is written from these rows in
        # a few array operations, not from an object per root.
        self.heads = _heads(catalog)
        # The candidate order's recent rankings of the trees, by request
        # shape (allocation_candidates/order.py).
        self.rankings: dict = {}
        # {class: (usage column, sums per tree or None, whether they are
        # exact, the usage in memory)}: the order's last judgement of
        # them (order.py ``_exact``)
        self.exact_usage: dict = {}
        self._holds: dict[int, np.ndarray] = {}
        self._members = catalog.members
        self._member_rows: tuple[np.ndarray, np.ndarray] | None = None
        self._flat: bool | None = None
        self._root_of: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self._capacity: dict[int, np.ndarray] = {}
        self._per_tree: dict[int, bool] = {}
        self._exact: dict[int, bool] = {}
        self._roots_by_id: np.ndarray | None = None
        self._most_used: dict[tuple[int, int], np.ndarray] = {}
        self.stock = {rc: self._stock(idle) for rc, idle in catalog.idle.items()}

    def prepare(self) -> "Columns":
        """What requests make on first use, made now: in placement-api's
        master, before the fork, their pages are shared by every worker,
        and no worker walks the catalog's objects to make its own (each
        object it reads gets a reference count written, so a walk over
        every tree copied most of the catalog's pages into the worker; the
        tree members' rows took 50-100 ms of a worker's first request at
        1,000,000 providers)."""
        self._rows()
        self.flat()
        self.positions(self.roots[:0])
        self.roots_of(self.roots[:0])
        for rc in self.stock:
            self.holds(rc)
            self.exact_limits(rc)
            self.per_tree(rc)
        return self

    def positions(self, page: np.ndarray) -> np.ndarray:
        """The indexes in ``roots`` of the root ids ``page`` (roots of the
        catalog): by ``rows_by_id`` of the roots, made on first use."""
        if self._roots_by_id is None:
            self._roots_by_id = rows_by_id(self.roots)
        return find(self.roots, self._roots_by_id, page)[0]

    def members(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the provider ids of the trees of the roots at ``at`` (indexes
        into ``roots``), tree after tree; how many each tree has): from
        columns of every tree's members made on first use, no provider
        looked at."""
        starts, ids = self._rows()
        sizes = starts[at + 1] - starts[at]
        # Each tree's rows: its start, then one more per member.
        first = np.repeat(starts[at] - (np.cumsum(sizes) - sizes), sizes)
        return ids[first + np.arange(len(first))], sizes

    def flat(self) -> bool:
        """Whether every tree is its root alone (``members`` of any trees
        are their roots, one each; made on first use)."""
        if self._flat is None:
            starts, _ = self._rows()
            self._flat = bool((np.diff(starts) == 1).all())
        return self._flat

    def roots_of(self, rps: np.ndarray) -> np.ndarray:
        """The root id of each provider of ``rps`` (ids of the catalog's
        providers): from every provider's id and root in id order, made on
        first use, no provider looked at."""
        if self._root_of is None:
            starts, ids = self._rows()
            trees = np.repeat(self.roots, np.diff(starts))
            order = np.argsort(ids, kind="stable")
            self._root_of = (ids[order], trees[order], rows_by_id(ids[order]))
        ids, roots, by_id = self._root_of
        return roots[find(ids, by_id, rps)[0]]

    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(where each tree's members start, every tree's member ids, tree
        after tree in root id order), made on first use."""
        if self._member_rows is None:
            trees = [self._members.get(root, ()) for root in self.roots.tolist()]
            sizes = np.fromiter(map(len, trees), dtype=np.int64, count=len(trees))
            ids = np.fromiter(
                itertools.chain.from_iterable(trees),
                dtype=np.int64,
                count=int(sizes.sum()),
            )
            self._member_rows = (np.concatenate(([0], np.cumsum(sizes))), ids)
        return self._member_rows

    def capacity(self, rc: int) -> np.ndarray:
        """Per root (aligned with ``roots``), its tree's capacity of class
        ``rc`` (the sum of its limits, float64; made on first use)."""
        found = self._capacity.get(rc)
        if found is None:
            stock = self.stock[rc]
            found = self._capacity[rc] = np.bincount(
                stock.root, stock.limit.astype(float), len(self.roots)
            )
        return found

    def per_tree(self, rc: int) -> bool:
        """Whether ``stock[rc]`` has one row per tree, in ``roots``' order
        (flat clouds): a column of its rows is then one of the trees, no
        sum per tree needed (made on first use)."""
        found = self._per_tree.get(rc)
        if found is None:
            root = self.stock[rc].root
            found = self._per_tree[rc] = len(root) == len(self.roots) and bool(
                np.array_equal(root, np.arange(len(root)))
            )
        return found

    def exact_limits(self, rc: int) -> bool:
        """Whether the limits of ``stock[rc]`` are Python's ints of the
        same products (not clipped, none negative) and every tree's sum
        of them exact in float64 (made on first use)."""
        found = self._exact.get(rc)
        if found is None:
            stock, capacity = self.stock[rc], self.capacity(rc)
            found = self._exact[rc] = bool(
                not stock.big
                and (not len(stock.limit) or stock.limit.min() >= 0)
                and (not len(capacity) or capacity.max() < FLOAT_EXACT)
            )
        return found

    def most_used(self, rc: int, amount: int) -> np.ndarray:
        """Per row of ``stock[rc]``, the most it may use for one more
        allocation of ``amount`` (> 0) to fit: ``fits(stock, used,
        amount) > 0`` is ``used <= most_used`` (the int64 minimum where
        min_unit, max_unit or step_size refuse it). Made on first use, a
        few request amounts kept."""
        key = (rc, amount)
        found = self._most_used.get(key)
        if found is None:
            stock = self.stock[rc]
            allowed = (
                (stock.min_unit <= amount)
                & (amount <= stock.max_unit)
                & (amount % stock.step_size == 0)
            )
            found = np.where(allowed, stock.limit - amount, np.iinfo(np.int64).min)
            if len(self._most_used) >= MOST_AMOUNTS:
                self._most_used.clear()
            self._most_used[key] = found
        return found

    def holds(self, rc: int) -> np.ndarray:
        """Per root (aligned with ``roots``), whether some provider of its
        tree holds inventory of class ``rc`` (made on first use)."""
        found = self._holds.get(rc)
        if found is None:
            stock = self.stock.get(rc)
            found = np.zeros(len(self.roots), dtype=bool)
            if stock is not None:
                found[stock.root] = True
            self._holds[rc] = found
        return found

    def _stock(self, idle: dict) -> Stock:
        """Stock of one class from its ``idle`` {(rp, class): Inventory}.
        The inventories are a few distinct objects (equal ones are one
        object as read): each one's fields are read once, not once per
        row (1.4 s of CPU at 1,000,000 providers)."""
        count = len(idle)
        rp = np.fromiter((k[0] for k in idle), dtype=np.int64, count=count)
        order = np.argsort(rp, kind="stable")
        rp = rp[order]
        inventories = list(idle.values())
        objects = np.fromiter(map(id, inventories), dtype=np.uint64, count=count)
        _, first, at = np.unique(objects, return_index=True, return_inverse=True)
        kinds = [inventories[i] for i in first.tolist()]
        at = at.reshape(-1)[order]

        def column(field, dtype=np.int64):
            values = np.array([getattr(i, field) for i in kinds], dtype=dtype)
            return values[at]

        # Exactly Python's float product, then its floor: a whole number of
        # units fits when used + n * amount <= the product, i.e. <= its floor.
        product = (column("total") - column("reserved")).astype(np.float64) * column(
            "allocation_ratio", np.float64
        )
        limit = np.floor(product)
        with np.errstate(invalid="ignore", over="ignore"):
            big = not (
                np.all(np.abs(limit) < LIMIT_MAX)
                and float(np.sum(limit[limit > 0])) < LIMIT_MAX
            )
        if big:
            limit = np.clip(np.nan_to_num(limit), -LIMIT_MAX, LIMIT_MAX)
        return Stock(
            rp=rp,
            root=self.positions(self.roots_of(rp)),
            limit=limit.astype(np.int64),
            min_unit=column("min_unit"),
            max_unit=column("max_unit"),
            step_size=column("step_size"),
            big=big,
        )


def _heads(catalog: "store.Catalog") -> np.ndarray:
    """The JSON heads of the roots, in id order: one row each (uint8),
    padded with NUL bytes to the longest. JSON text holds no raw NUL (a
    string's U+0000 is written escaped), so the padding is told from the
    text by its byte alone. The rows take the longest head's width each:
    about 80 bytes for a name of 16 characters, 260 for the longest name
    a provider may have (200)."""
    uuids, names = catalog.uuids, catalog.names
    heads = [
        b'{"uuid":%s,"name":%s,"count":' % (_json(uuids[rp]), _json(names[rp]))
        for rp in catalog.roots
    ]
    return padded(heads)


def padded(texts: list[bytes]) -> np.ndarray:
    """``texts`` as the rows of a uint8 array, each padded with NUL bytes
    to the longest."""
    width = max(map(len, texts), default=0)
    return np.frombuffer(
        b"".join(text.ljust(width, b"\0") for text in texts), dtype=np.uint8
    ).reshape(len(texts), width)


def _json(text: str) -> bytes:
    """``text`` as a JSON string (one orjson refuses, with a lone
    surrogate, escaped as the standard library escapes it)."""
    try:
        return orjson.dumps(text)
    except TypeError:
        return json.dumps(text).encode()


def of(catalog: "store.Catalog") -> Columns:
    """The catalog's columns, built on first use."""
    columns = catalog.columns
    if columns is None:
        with _BUILDING:
            columns = catalog.columns
            if columns is None:
                columns = catalog.columns = Columns(catalog)
    return columns


def rows_by_id(keys: np.ndarray) -> np.ndarray | None:
    """Per id up to the largest of ``keys`` (ids, ascending), its index
    in them (-1 for none): a lookup is then one memory access per id,
    where a search takes a dozen, scattered over ``keys`` for scattered
    ids (a ranked page's trees). None where the ids are too sparse for
    it (DENSE) or there are none."""
    if not len(keys) or keys[-1] >= DENSE * len(keys) + DENSE_SLACK:
        return None
    by_id = np.full(int(keys[-1]) + 1, -1, dtype=np.int32)
    by_id[keys] = np.arange(len(keys), dtype=np.int32)
    by_id.flags.writeable = False
    return by_id


def find(
    keys: np.ndarray, by_id: np.ndarray | None, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(where each of ``ids`` is in ``keys``, whether it is): by
    ``rows_by_id(keys)`` where there is one, else by a search."""
    if by_id is None:
        at = np.searchsorted(keys, ids)
        found = at < len(keys)
        found[found] = keys[at[found]] == ids[found]
        return at, found
    inside = (ids >= 0) & (ids < len(by_id))
    at = by_id[np.where(inside, ids, 0)]
    return at, inside & (at >= 0)


def fits(stock: Stock, used: np.ndarray, amount: int) -> np.ndarray:
    """Per row of ``stock``, with ``used`` (aligned), how many more
    allocations of ``amount`` (> 0) fit one after the other: what
    capacity.fits said per inventory."""
    n = np.maximum((stock.limit - used) // amount, 0)
    allowed = (
        (stock.min_unit <= amount)
        & (amount <= stock.max_unit)
        & (amount % stock.step_size == 0)
    )
    return np.where(allowed, n, 0)


def aligned(keys: np.ndarray, rp: np.ndarray, amounts: np.ndarray) -> np.ndarray:
    """``amounts`` of providers ``rp`` put at their rows of ``keys`` (ids,
    ascending: a ``Stock``'s ``rp``, a class's holders), 0 elsewhere; a
    provider not in ``keys`` is left out (usage of a provider without the
    class, as the engine leaves it out)."""
    out = np.zeros(len(keys), dtype=np.int64)
    at, found = find(keys, None, rp)
    out[at[found]] = amounts[found]
    return out
