"""Usage in memory, where database triggers log every writer's changes
(issue 44): per resource class, the amount each provider holding it uses,
as numpy columns aligned with the holders' ids in ascending order (the
rows of ``columns.Stock``), and every provider's generation, last change
(its updated_at, else created_at, in whole seconds) and its inventories'
last change (the latest of their rows' times, so), aligned with every
provider id. Read with the catalog in one snapshot (``read``) and
brought up to date by the change log (``advanced``): the providers its
rows name get their usage and generation read again, in one statement
(every write of a provider row is logged, as PROVIDER or GENERATION, and
of an inventory row as PROVIDER, so their last changes follow with its
generation). The catalog's one map of
generations: the allocation and provider reads
(``objects/allocation_reads.py``, ``objects/resource_provider.py``) take
theirs here too.
Never modified: an advance copies only the columns it changes (a claim:
its provider's classes, a few hundred kilobytes at 100,000 hosts), and
shares the others, so a catalog read before the fork keeps its pages
shared with the workers until a claim changes a class."""

import typing
import weakref
from collections.abc import Collection
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import bulk
from placement.objects.catalog import columns as catalog_columns

ALLOC, RP, INV = tables.allocations, tables.resource_providers, tables.inventories

_EMPTY = np.empty(0, dtype=np.int64)
# CAST: MySQL sums integers into DECIMAL.
_SUM = sa.cast(sa.func.sum(ALLOC.c.used), sa.BigInteger)
# A provider's last change in seconds; NO_TIME when it has neither time.
NO_TIME = -1
_MODIFIED = sa.func.coalesce(
    bulk.Seconds(sa.func.coalesce(RP.c.updated_at, RP.c.created_at)), NO_TIME
)
# An inventory row's time in seconds, NULL for neither; a provider's
# inventories' last change is the latest of theirs, NO_TIME for none: by
# the unique key on provider and class for a few providers, from every
# inventory's time for all (a correlated MAX per provider took 75 ms of
# a whole read at 10,000 providers).
_STOCKED = bulk.Seconds(sa.func.coalesce(INV.c.updated_at, INV.c.created_at))
_INVENTORIED = sa.func.coalesce(
    sa.select(sa.func.max(_STOCKED))
    .where(INV.c.resource_provider_id == RP.c.id)
    .scalar_subquery(),
    NO_TIME,
)
# The usage of some providers (``used``) and the generations and last
# changes (their own, their inventories') of some (``generations``) in one
# round trip: a generation's row has class NULL. Its two parts (``PARTS``)
# also join the named consumers' allocations in one statement
# (``store.Catalog.fresh``).
PARTS = (
    sa.select(
        ALLOC.c.resource_provider_id,
        ALLOC.c.resource_class_id,
        _SUM,
        sa.cast(sa.null(), sa.BigInteger),
        sa.cast(sa.null(), sa.BigInteger),
    )
    .where(ALLOC.c.resource_provider_id.in_(db_api.int_list("used")))
    .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id),
    sa.select(
        RP.c.id,
        sa.cast(sa.null(), sa.Integer),
        sa.cast(RP.c.generation, sa.BigInteger),
        sa.cast(_MODIFIED, sa.BigInteger),
        sa.cast(_INVENTORIED, sa.BigInteger),
    ).where(RP.c.id.in_(db_api.int_list("generations"))),
)
OF_PROVIDERS = sa.union_all(*PARTS)
# Ids bound per statement (each list): well under SQLite's variables.
CHUNK = 10000


class Used:
    """Per class its holders' ids (ascending) and what each uses, aligned;
    every provider id (ascending), its generation, last change and its
    inventories' last change (seconds since the epoch, NO_TIME for none),
    aligned; per class, what each tree
    uses of it, where asked (``tree_totals``) and followed since."""

    __slots__ = (
        "rp",
        "amount",
        "ids",
        "generation",
        "modified",
        "inventoried",
        "totals",
        "rows",
        "before",
        "changed",
        "__weakref__",
    )

    def __init__(
        self,
        rp: dict[int, np.ndarray],
        amount: dict[int, np.ndarray],
        ids: np.ndarray,
        generation: np.ndarray,
        modified: np.ndarray,
        inventoried: np.ndarray,
    ) -> None:
        self.rp = rp
        self.amount = amount
        self.ids = ids
        self.generation = generation
        self.modified = modified
        self.inventoried = inventoried
        # {class: (each holder's tree index the sums are by, the sums)}
        self.totals: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # {class: (its holders' ids, columns.rows_by_id of them)}, shared
        # by the Used that follow: good while the holders are the same
        self.rows: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        # The Used this one advanced from (weakly: nothing kept alive for
        # it) and, per class it read again, the rows whose usage changed
        # (None where holders came or went): ``changed_since``.
        self.before: weakref.ref | None = None
        self.changed: dict[int, np.ndarray | None] = {}

    @classmethod
    def read(
        cls,
        conn: sa.Connection,
        holders: Mapping[int, np.ndarray],
        allocations: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> "Used":
        """Everything, in ``conn``'s snapshot (the catalog's): ``holders``
        {class: holder ids, ascending} as the catalog has them (its
        columns' ``Stock.rp``, shared with them); ``allocations``: every
        allocation row's provider, class and amount, read in the same
        snapshot (summed here rather than read summed again)."""
        provider, classes, used = allocations
        amount = {}
        for rc, rp in holders.items():
            mine = classes == rc
            ids, at = np.unique(provider[mine], return_inverse=True)
            sums = np.zeros(len(ids), dtype=np.int64)
            np.add.at(sums, at, used[mine].astype(np.int64))
            amount[rc] = _frozen(catalog_columns.aligned(rp, ids, sums))
        # Joined columns (``bulk``): a million providers' rows one value
        # at a time were seconds of the driver's CPU.
        read = bulk.columns(conn, RP, RP.c.id, [RP.c.id, RP.c.generation, _MODIFIED])
        order = np.argsort(read[0], kind="stable")
        ids, generation, modified = (_frozen(column[order]) for column in read)
        stocked, seconds = bulk.columns(
            conn,
            INV,
            INV.c.id,
            [INV.c.resource_provider_id, sa.func.coalesce(_STOCKED, NO_TIME)],
        )
        inventoried = np.full(len(ids), NO_TIME, dtype=np.int64)
        at, found = catalog_columns.find(ids, None, stocked)
        np.maximum.at(inventoried, at[found], seconds[found])
        return cls(
            dict(holders), amount, ids, generation, modified, _frozen(inventoried)
        )

    def advanced(
        self,
        rows: Iterable[tuple],
        used: Collection[int],
        generations: Collection[int],
        held: typing.Callable[[int], Iterable[int]],
        had: typing.Callable[[int], Iterable[int]],
    ) -> "Used":
        """A new Used: this one with the usage of the providers ``used``
        and the generations of ``generations`` as ``rows`` (``fresh``'s)
        have them. ``held(rp)``/``had(rp)``: the classes a provider holds
        inventory of in the new catalog/held in the old one (a provider
        named by the log for its rows is in both lists)."""
        amounts: dict[tuple[int, int], int] = {}
        born: dict[int, int] = {}
        modified: dict[int, int] = {}
        inventoried: dict[int, int] = {}
        for rp, rc, value, seconds, stocked in rows:
            if rc is None:
                born[rp], modified[rp], inventoried[rp] = value, seconds, stocked
            else:
                amounts[rp, rc] = value
        new = Used(
            dict(self.rp),
            dict(self.amount),
            self.ids,
            self.generation,
            self.modified,
            self.inventoried,
        )
        new.totals, new.rows = dict(self.totals), self.rows
        new.before = weakref.ref(self)
        by_class: dict[int, set[int]] = {}
        for rp in used:
            for rc in (*held(rp), *had(rp)):
                by_class.setdefault(rc, set()).add(rp)
        for rc, rps in by_class.items():
            holding = {rp: amounts.get((rp, rc), 0) for rp in rps if rc in held(rp)}
            rp_of, amount_of = _merged(
                self.rp.get(rc, _EMPTY), self.amount.get(rc, _EMPTY), rps, holding
            )
            new.changed[rc] = None
            if rp_of is self.rp.get(rc) and amount_of is not self.amount.get(rc):
                ids = np.fromiter(rps, dtype=np.int64, count=len(rps))
                at, present = catalog_columns.find(rp_of, None, ids)
                moved = at[present]
                new.changed[rc] = moved[amount_of[moved] != self.amount[rc][moved]]
            elif rp_of is self.rp.get(rc):
                new.changed[rc] = _EMPTY
            if len(rp_of):
                new.rp[rc], new.amount[rc] = rp_of, amount_of
            else:
                new.rp.pop(rc, None)
                new.amount.pop(rc, None)
            self._follow_totals(new, rc)
        if generations:
            named = set(generations)
            new.ids, new.generation = _merged(self.ids, self.generation, named, born)
            # The same ids come and go: the same keys.
            _, new.modified = _merged(self.ids, self.modified, named, modified)
            _, new.inventoried = _merged(self.ids, self.inventoried, named, inventoried)
        return new

    def changed_since(
        self, older: "Used", steps: int = 8
    ) -> dict[int, np.ndarray] | None:
        """{class: the rows (of its holders, the same since) whose usage
        changed} from ``older`` to this one, through at most ``steps``
        advances; None where that is not known (holders came or went,
        or a Used between is gone)."""
        found: dict[int, list[np.ndarray]] = {}
        now: Used | None = self
        for _ in range(steps):
            if now is older:
                return {rc: np.concatenate(rows) for rc, rows in found.items()}
            if now is None or now.before is None:
                return None
            for rc, rows in now.changed.items():
                if rows is None:
                    return None
                found.setdefault(rc, []).append(rows)
            now = now.before()
        return None

    def tree_totals(
        self, rc: int, holders: np.ndarray, root: np.ndarray, size: int
    ) -> np.ndarray | None:
        """Per tree (``size`` of them), what its providers use of class
        ``rc``: ``holders`` and ``root`` are the ids of the class's
        holders (ascending) and each one's tree index (a
        ``columns.Stock``'s ``rp`` and ``root``). Exactly ``np.bincount``'s
        float64 sums, as int64 where those are exact (no usage negative,
        every sum below catalog_columns.FLOAT_EXACT): kept and brought along by
        ``advanced`` from the rows a claim changes, not summed again per
        request. None where this usage is not aligned with ``holders``."""
        found = self.totals.get(rc)
        if found is not None and found[0] is root:
            return found[1]
        mine = self.rp.get(rc, _EMPTY)
        if not (mine is holders or np.array_equal(mine, holders)):
            return None
        amount = self.amount.get(rc, _EMPTY)
        total = np.bincount(root, amount, size)
        if (not len(amount) or amount.min() >= 0) and (
            not len(total) or total.max() < catalog_columns.FLOAT_EXACT
        ):
            total = _frozen(total.astype(np.int64))
            self.totals[rc] = (root, total)
        return total

    def _follow_totals(self, new: "Used", rc: int) -> None:
        """``new``'s sums per tree of class ``rc`` (whose usage it read
        again): this one's with the changed rows' differences added, where
        its holders are the same and the sums stay exact; else none."""
        found = self.totals.get(rc)
        if found is None:
            return
        old, now = self.amount.get(rc, _EMPTY), new.amount.get(rc, _EMPTY)
        if now is old:
            return
        del new.totals[rc]
        if new.rp.get(rc) is not self.rp.get(rc):
            return  # rows came or went: summed again when asked
        rows = np.flatnonzero(now != old)
        exact = catalog_columns.FLOAT_EXACT
        if len(rows) and (now[rows].min() < 0 or now[rows].max() >= exact):
            return
        root, total = found
        total = total.copy()
        np.add.at(total, root[rows], now[rows] - old[rows])
        if not len(total) or total.max() < exact:
            new.totals[rc] = (root, _frozen(total))

    def of(self, rc: int, rp: np.ndarray) -> np.ndarray:
        """What providers ``rp`` (ids, any order) use of class ``rc``: 0
        for those without inventory of it (their usage of it, if any, is
        left out, as the engine leaves it out)."""
        return _lookup(self.rp.get(rc, _EMPTY), self.amount.get(rc, _EMPTY), rp)

    def column(self, rc: int, rp: np.ndarray) -> np.ndarray:
        """``of`` for the holders' ids of a ``columns.Stock`` (ascending):
        the column itself where they are the ones it is aligned with (read
        only: shared)."""
        mine = self.rp.get(rc, _EMPTY)
        if mine is rp or np.array_equal(mine, rp):
            return self.amount[rc]
        return self.of(rc, rp)

    def prepare(self) -> "Used":
        """``table``'s rows by id of every class's holders, made now:
        where the catalog is read whole (placement-api's master, before
        the fork), not by each worker's first request."""
        self.table(list(self.rp), _EMPTY)
        return self

    def table(self, classes: Sequence[int], rps: np.ndarray) -> np.ndarray:
        """What providers ``rps`` (ids, any order; a row each) use of each
        of ``classes`` (a column each): -1 where a provider holds no
        inventory of the class. One lookup per class, none per provider
        (by the holders' rows by id, ``columns.rows_by_id``)."""
        out = np.full((len(rps), len(classes)), -1, dtype=np.int64)
        for column, rc in enumerate(classes):
            keys = self.rp.get(rc, _EMPTY)
            if not len(keys):
                continue
            found = self.rows.get(rc)
            if found is None or found[0] is not keys:
                found = self.rows[rc] = (keys, catalog_columns.rows_by_id(keys))
            at, held = catalog_columns.find(keys, found[1], rps)
            out[held, column] = self.amount[rc][at[held]]
        return out

    def pairs(
        self, classes: Iterable[int], rps: Collection[int] | None = None
    ) -> dict[tuple[int, int], int]:
        """{(provider, class): used} of the ``classes`` by every holder, or
        by ``rps``, where not 0."""
        out: dict[tuple[int, int], int] = {}
        asked = None
        if rps is not None:
            asked = np.fromiter(rps, dtype=np.int64, count=len(rps))
        for rc in classes:
            if asked is None:
                holders = self.rp.get(rc, _EMPTY)
                amounts = self.amount.get(rc, _EMPTY)
            else:
                holders, amounts = asked, self.of(rc, asked)
            some = np.flatnonzero(amounts)
            out.update(
                zip(
                    zip(holders[some].tolist(), [rc] * len(some)),
                    amounts[some].tolist(),
                )
            )
        return out

    def generation_of(self, rp: int) -> int | None:
        """Provider ``rp``'s generation; None for no such provider."""
        at = int(self.ids.searchsorted(rp))
        if at < len(self.ids) and self.ids[at] == rp:
            return int(self.generation[at])
        return None

    def last_change(self, rp: int) -> tuple[int, int | None, int | None] | None:
        """Provider ``rp``'s (generation, last change, its inventories'
        last change), the changes in seconds since the epoch or None; None
        for no such provider."""
        at = int(self.ids.searchsorted(rp))
        if at < len(self.ids) and self.ids[at] == rp:
            seconds, stocked = int(self.modified[at]), int(self.inventoried[at])
            return (
                int(self.generation[at]),
                None if seconds == NO_TIME else seconds,
                None if stocked == NO_TIME else stocked,
            )
        return None


def fresh(
    conn: sa.Connection, used: Collection[int], generations: Collection[int]
) -> list[tuple]:
    """The rows ``Used.advanced`` takes: the usage of the providers
    ``used`` and the generations of ``generations``, in ``conn``'s
    snapshot, one statement per CHUNK ids."""
    rows: list[tuple] = []
    used_ids, generation_ids = sorted(used), sorted(generations)
    for start in range(0, max(len(used_ids), len(generation_ids)), CHUNK):
        params = {
            "used": used_ids[start : start + CHUNK],
            "generations": generation_ids[start : start + CHUNK],
        }
        rows.extend(tuple(row) for row in db_api.plain_rows(conn, OF_PROVIDERS, params))
    return rows


def _lookup(keys: np.ndarray, values: np.ndarray, rp: np.ndarray) -> np.ndarray:
    """``values`` at ``rp``'s rows of ``keys`` (0 where not in them)."""
    out = np.zeros(len(rp), dtype=np.int64)
    if not len(keys):
        return out
    at, found = catalog_columns.find(keys, None, rp)
    out[found] = values[at[found]]
    return out


def _merged(
    keys: np.ndarray,
    values: np.ndarray,
    named: Collection[int],
    now: Mapping[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """``keys`` and ``values`` with the rows of the ``named`` ids being
    those of ``now`` {id: value} (a named id not in it has no row). Where
    the named ids keep their rows, the keys are shared and the values
    copied only if one changed."""
    if len(named) <= _FEW:
        merged = _merged_few(keys, values, named, now)
        if merged is not None:
            return merged
    ids = np.fromiter(named, dtype=np.int64, count=len(named))
    at, present = catalog_columns.find(keys, None, ids)
    if all(bool(p) == (rp in now) for rp, p in zip(ids.tolist(), present.tolist())):
        rows = at[present]
        wanted = np.fromiter(
            (now[rp] for rp in ids[present].tolist()), dtype=np.int64, count=len(rows)
        )
        if np.array_equal(values[rows], wanted):
            return keys, values
        values = values.copy()
        values[rows] = wanted
        return keys, _frozen(values)
    # Rows come or go (a structural change, whose maps the catalog copies
    # too): the named rows out, their new ones in at their places.
    kept = np.ones(len(keys), dtype=bool)
    kept[at[present]] = False
    keys, values = keys[kept], values[kept]
    added = np.array(sorted(now), dtype=np.int64)
    at = np.searchsorted(keys, added)
    fresh = np.array([now[rp] for rp in added.tolist()], dtype=np.int64)
    return _frozen(np.insert(keys, at, added)), _frozen(np.insert(values, at, fresh))


# Named ids up to which ``_merged`` finds them one by one: a claim's
# provider (or the few of a tree) takes a search each, where the
# arrays' way costs a dozen numpy calls whatever their number (30 us).
_FEW = 4


def _merged_few(
    keys: np.ndarray,
    values: np.ndarray,
    named: Collection[int],
    now: Mapping[int, int],
) -> tuple[np.ndarray, np.ndarray] | None:
    """``_merged``'s answer where the named ids keep their rows (found
    one by one); None where rows come or go."""
    moved = []
    end = len(keys)
    for rp in named:
        at = int(keys.searchsorted(rp))
        if (at < end and int(keys[at]) == rp) != (rp in now):
            return None
        if rp in now and int(values[at]) != int(now[rp]):
            moved.append((at, int(now[rp])))
    if not moved:
        return keys, values
    values = values.copy()
    for at, value in moved:
        values[at] = value
    return keys, _frozen(values)


def _frozen(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only: the catalogs that follow share it."""
    array.flags.writeable = False
    return array
