"""Allocations followed in memory, where triggers log every writer's
allocation and consumer writes (doc/architecture.md "Allocations in
memory"): per consumer its allocation rows, generation, project, user
and type; per provider its allocation rows and its generation.

Read whole with the catalog (``read``), in placement-api's master before
the fork, as columns (numpy arrays): 224,379 consumers are a few dozen
arrays whose pages every worker shares, not a million Python objects
each worker would copy by touching them. A catalog that follows the log
(``Allocations.advanced``) re-reads the consumers its CONSUMER rows name
(one statement) and the generations its GENERATION and PROVIDER rows
name (one statement) into a small overlay of its own, which masks the
columns; past FOLD_AT entries the overlay is folded into new columns
(the worker's own copy from then on)."""

import copy
import datetime
import time
import typing
from collections.abc import Iterable

import numpy as np
import sqlalchemy as sa

from placement.db import tables
from placement.objects.catalog import bulk

ALLOC, CONSUMERS, RP = tables.allocations, tables.consumers, tables.resource_providers
PROJECTS, USERS, TYPES = tables.projects, tables.users, tables.consumer_types

# Overlay entries (consumers, or generations) past which a catalog folds
# them into new columns.
FOLD_AT = 10_000
# A row without a time, and a consumer without a record, in columns.
NO_TIME = NO_RECORD = int(np.iinfo(np.int64).min)
EPOCH = datetime.datetime(1970, 1, 1)


class Row(typing.NamedTuple):
    """One allocation row; ``modified``: its updated_at, else created_at,
    in whole seconds since the epoch (None: neither)."""

    id: int
    provider: int
    rc: int
    used: int
    modified: int | None


class Consumer(typing.NamedTuple):
    """A consumer holding allocations: its record's generation, project,
    user and type (None each without a record, or a name without its
    row) and its rows in id order."""

    generation: int | None
    project: str | None
    user: str | None
    type: str | None
    rows: tuple[Row, ...]


class Held(typing.NamedTuple):
    """An allocation row on a provider, with its consumer's uuid and
    generation (``Allocations.on_provider``)."""

    row: Row
    uuid: str
    generation: int | None


class Base:
    """The columns of a whole read: consumers by uuid (sorted bytes),
    their rows grouped by consumer then id, the rows' order by provider
    then id, and the providers' generations by id. Names (projects,
    users, types) are positions in small tuples, None first."""

    def __init__(self, rows: "Columns", names: dict, generations: dict) -> None:
        """``rows``: per allocation row, in any order; ``names``:
        {"project"/"user"/"type": tuple} the rows' positions index;
        ``generations``: {rp: generation}."""
        self.uuids, owner = np.unique(rows.uuid, return_inverse=True)
        order = np.lexsort((rows.id, owner))
        owner = owner[order]
        self.owner = _narrow(owner)
        self.id, self.provider, self.rc, self.used = (
            _narrow(column[order])
            for column in (rows.id, rows.provider, rows.rc, rows.used)
        )
        self.modified = rows.modified[order]
        start = np.zeros(len(self.uuids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=len(self.uuids)), out=start[1:])
        first = order[start[:-1]]
        self.start = _narrow(start)
        self.generation = _narrow(rows.generation[first])
        self.project, self.user, self.type = (
            _narrow(column[first]) for column in (rows.project, rows.user, rows.type)
        )
        self.names = names
        self.by_provider = _narrow(np.lexsort((self.id, self.provider)))
        self.provider_sorted = self.provider[self.by_provider]
        self._generations(generations)

    def _generations(self, generations: dict) -> None:
        ids = sorted(generations)
        self.rp_ids = _narrow(np.array(ids, dtype=np.int64))
        self.rp_generations = _narrow(
            np.array([generations[rp] for rp in ids], dtype=np.int64)
        )

    def with_generations(self, changed: dict) -> "Base":
        """A copy sharing every column but the generations, ``changed``
        ({rp: generation, or None: gone}) in them."""
        base = copy.copy(self)
        generations = dict(zip(self.rp_ids.tolist(), self.rp_generations.tolist()))
        generations.update(changed)
        base._generations({rp: g for rp, g in generations.items() if g is not None})
        return base

    def index(self, uuid: str) -> int | None:
        key = uuid.encode("utf-8", "surrogatepass")
        if len(key) > self.uuids.itemsize:
            return None  # (searched for, it would convert the whole column)
        low, high = _found(self.uuids, key)
        return low if high > low else None

    def uuid(self, i: int) -> str:
        return self.uuids[i].decode("utf-8", "surrogatepass")

    def consumer(self, i: int) -> Consumer:
        names = self.names
        return Consumer(
            self.generation_at(i),
            names["project"][self.project[i]],
            names["user"][self.user[i]],
            names["type"][self.type[i]],
            tuple(self.rows(slice(self.start[i], self.start[i + 1]))),
        )

    def generation_at(self, i: int) -> int | None:
        generation = int(self.generation[i])
        return None if generation == NO_RECORD else generation

    def rows(self, at: typing.Any) -> list[Row]:
        """The rows at positions ``at`` (a slice or an array)."""
        return [
            Row(id_, rp, rc, used, None if modified == NO_TIME else modified)
            for id_, rp, rc, used, modified in zip(
                *(
                    column[at].tolist()
                    for column in (
                        self.id,
                        self.provider,
                        self.rc,
                        self.used,
                        self.modified,
                    )
                )
            )
        ]

    def rows_on(self, rp: int) -> np.ndarray:
        """Positions of the rows on provider ``rp``, in id order."""
        return self.by_provider[slice(*_found(self.provider_sorted, rp))]

    def generation_of(self, rp: int) -> int | None:
        low, high = _found(self.rp_ids, rp)
        return int(self.rp_generations[low]) if high > low else None

    def nbytes(self) -> int:
        """Bytes of its arrays (the name tables are small)."""
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))


class Columns(typing.NamedTuple):
    """Allocation rows as columns, each with its consumer's uuid (bytes),
    record's generation (NO_RECORD: none) and names' positions."""

    uuid: np.ndarray
    id: np.ndarray
    provider: np.ndarray
    rc: np.ndarray
    used: np.ndarray
    modified: np.ndarray
    generation: np.ndarray
    project: np.ndarray
    user: np.ndarray
    type: np.ndarray

    @classmethod
    def of(cls, rows: list, names: dict) -> "Columns":
        """From ``rows`` of (uuid, id, rp, rc, used, modified (seconds or
        None), generation or None, project, user, type); the names are
        added to ``names`` ({field: [names]}) as needed."""
        fields = list(zip(*rows)) if rows else [()] * 10
        uuid = np.array(
            [u.encode("utf-8", "surrogatepass") for u in fields[0]],
            dtype=None if rows else "S36",
        )
        integers = (np.array(values, dtype=np.int64) for values in fields[1:5])
        modified = np.array(
            [NO_TIME if m is None else m for m in fields[5]], dtype=np.int64
        )
        generation = np.array(
            [NO_RECORD if g is None else g for g in fields[6]], dtype=np.int64
        )
        project, user, kind = (
            _positions(fields[7 + k], names[field])
            for k, field in enumerate(("project", "user", "type"))
        )
        ids, provider, rc, used = integers
        return cls(
            uuid, ids, provider, rc, used, modified, generation, project, user, kind
        )


class Allocations:
    """The columns of the last whole read (``base``, shared) and the
    overlay of what the log named since (this catalog's own). Never
    modified: ``advanced`` makes a new one."""

    def __init__(self, base: Base, read_at: float) -> None:
        self.base = base
        # time.monotonic() before the whole read its columns come from.
        self.read_at = read_at
        # uuid -> Consumer, or None: holds no allocations now.
        self.changed: dict = {}
        # rp -> frozenset of overlay uuids with rows on it.
        self.overlay_on: dict = {}
        # rp -> generation, or None: no such provider now.
        self.generations: dict = {}

    def __eq__(self, other: object) -> bool:
        """The same allocations (the tests compare catalogs)."""
        if not isinstance(other, Allocations):
            return NotImplemented
        return self.everything() == other.everything()

    __hash__ = None  # type: ignore[assignment]

    def consumer(self, uuid: str) -> Consumer | None:
        """Its allocations, None when it holds none."""
        if uuid in self.changed:
            return self.changed[uuid]
        i = self.base.index(uuid)
        return None if i is None else self.base.consumer(i)

    def on_provider(self, rp: int) -> list[Held]:
        """The allocation rows on provider ``rp``, in id order."""
        base, changed = self.base, self.changed
        held = []
        at = base.rows_on(rp)
        for row, i in zip(base.rows(at), base.owner[at].tolist()):
            uuid = base.uuid(i)
            if not (changed and uuid in changed):
                held.append(Held(row, uuid, base.generation_at(i)))
        overlay = self.overlay_on.get(rp, ())
        for uuid in overlay:
            consumer = changed[uuid]
            held.extend(
                Held(row, uuid, consumer.generation)
                for row in consumer.rows
                if row.provider == rp
            )
        if overlay:
            held.sort(key=lambda h: h.row.id)
        return held

    def generation(self, rp: int) -> int | None:
        if rp in self.generations:
            return self.generations[rp]
        return self.base.generation_of(rp)

    def advanced(
        self, conn: sa.Connection, uuids: Iterable[str], providers: Iterable[int]
    ) -> "Allocations":
        """A new one: this one with consumers ``uuids`` and the
        generations of ``providers`` read again in ``conn``'s snapshot."""
        uuids, providers = set(uuids), set(providers)
        if not (uuids or providers):
            return self
        new = Allocations(self.base, self.read_at)
        new.changed, new.overlay_on = self.changed, self.overlay_on
        new.generations = self.generations
        if uuids:
            found = consumers_of(conn, uuids)
            new._consumers({uuid: found.get(uuid) for uuid in uuids})
        if providers:
            generations = dict(self.generations)
            generations.update(dict.fromkeys(providers))
            generations.update(generations_of(conn, providers))
            new.generations = generations
        if len(new.changed) > FOLD_AT:
            return new.folded()
        if len(new.generations) > FOLD_AT:
            # (Claims move generations: folded alone, the rows stay shared.)
            new.base = new.base.with_generations(new.generations)
            new.generations = {}
        return new

    def _consumers(self, fresh: dict) -> None:
        """The overlay with ``fresh`` ({uuid: Consumer or None}) in it."""
        changed = dict(self.changed)
        touched: dict = {}  # rp -> {uuid: holds rows there now}
        for uuid, consumer in fresh.items():
            was = changed.get(uuid)
            for row in was.rows if was is not None else ():
                touched.setdefault(row.provider, {})[uuid] = False
            for row in consumer.rows if consumer is not None else ():
                touched.setdefault(row.provider, {})[uuid] = True
            changed[uuid] = consumer
        overlay_on = dict(self.overlay_on)
        for rp, now in touched.items():
            kept = overlay_on.get(rp, frozenset())
            kept = (kept - now.keys()) | {u for u, there in now.items() if there}
            if kept:
                overlay_on[rp] = kept
            else:
                overlay_on.pop(rp, None)
        self.changed, self.overlay_on = changed, overlay_on

    def folded(self) -> "Allocations":
        """The same allocations with an empty overlay (new columns)."""
        base = self.base
        keep = np.ones(len(base.id), dtype=bool)
        for i in map(base.index, self.changed):
            if i is not None:
                keep[base.start[i] : base.start[i + 1]] = False
        names = {field: list(values) for field, values in base.names.items()}
        added = Columns.of(
            [
                (uuid, *row[:4], row.modified, *consumer[:4])
                for uuid, consumer in self.changed.items()
                if consumer is not None
                for row in consumer.rows
            ],
            names,
        )
        owner = base.owner[keep]
        kept = Columns(
            base.uuids[owner],
            base.id[keep],
            base.provider[keep],
            base.rc[keep],
            base.used[keep],
            base.modified[keep],
            base.generation[owner],
            base.project[owner],
            base.user[owner],
            base.type[owner],
        )
        rows = Columns(*(np.concatenate(pair) for pair in zip(kept, added)))
        generations = dict(zip(base.rp_ids.tolist(), base.rp_generations.tolist()))
        generations.update(self.generations)
        return Allocations(
            Base(
                rows,
                {field: tuple(values) for field, values in names.items()},
                {rp: g for rp, g in generations.items() if g is not None},
            ),
            self.read_at,
        )

    def everything(self) -> tuple[dict, dict]:
        """({uuid: Consumer}, {rp: generation}): what it holds, for the
        tests to compare with a fresh read (``consumers_of``,
        ``generations_of``)."""
        base = self.folded().base
        consumers = {base.uuid(i): base.consumer(i) for i in range(len(base.uuids))}
        return consumers, dict(zip(base.rp_ids.tolist(), base.rp_generations.tolist()))


def read(conn: sa.Connection) -> Allocations:
    """Every consumer holding allocations and every provider's
    generation, in ``conn``'s snapshot: the allocation rows with their
    consumer's record (``bulk``), and the names."""
    read_at = time.monotonic()
    uuid, *numbers = bulk.columns(
        conn, _WITH_RECORDS, ALLOC.c.id, list(_ALL), text=(0,)
    )
    ids = numbers[6:]
    names: dict = {}
    for k, (field, table, name) in enumerate(_NAMES):
        found = sorted(conn.execute(sa.select(table.c.id, name)).all())
        names[field] = (None, *(value for _, value in found))
        known = np.array([id_ for id_, _ in found], dtype=np.int64)
        ids[k] = _place(known, ids[k])
    rps, generations = bulk.columns(conn, RP, RP.c.id, [RP.c.id, RP.c.generation])
    return Allocations(
        Base(
            Columns(_encoded(uuid), *numbers[:6], *ids),
            names,
            dict(zip(rps.tolist(), generations.tolist())),
        ),
        read_at,
    )


def _place(sorted_ids, ids):
    """Each of ``ids``' position in ``sorted_ids`` plus one (the names'
    first is None), or 0 where it is not there."""
    if not len(sorted_ids):
        return np.zeros(len(ids), dtype=np.int64)
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return np.where(sorted_ids[at] == ids, at + 1, 0)


_MODIFIED = sa.func.coalesce(
    bulk.Seconds(sa.func.coalesce(ALLOC.c.updated_at, ALLOC.c.created_at)),
    sa.literal(NO_TIME, sa.BigInteger),
)
_ALL = (
    ALLOC.c.consumer_id,
    ALLOC.c.id,
    ALLOC.c.resource_provider_id,
    ALLOC.c.resource_class_id,
    ALLOC.c.used,
    _MODIFIED,
    sa.func.coalesce(CONSUMERS.c.generation, NO_RECORD),
    sa.func.coalesce(CONSUMERS.c.project_id, NO_RECORD),
    sa.func.coalesce(CONSUMERS.c.user_id, NO_RECORD),
    sa.func.coalesce(CONSUMERS.c.consumer_type_id, NO_RECORD),
)
_WITH_RECORDS = ALLOC.outerjoin(CONSUMERS, CONSUMERS.c.uuid == ALLOC.c.consumer_id)
_NAMES = (
    ("project", PROJECTS, PROJECTS.c.external_id),
    ("user", USERS, USERS.c.external_id),
    ("type", TYPES, TYPES.c.name),
)


def _named(joined):
    """``joined`` (consumers, or allocations) outer-joined to the consumers'
    records and their names."""
    if joined is not CONSUMERS:
        joined = joined.outerjoin(CONSUMERS, CONSUMERS.c.uuid == ALLOC.c.consumer_id)
    return (
        joined.outerjoin(PROJECTS, PROJECTS.c.id == CONSUMERS.c.project_id)
        .outerjoin(USERS, USERS.c.id == CONSUMERS.c.user_id)
        .outerjoin(TYPES, TYPES.c.id == CONSUMERS.c.consumer_type_id)
    )


_RECORD_COLUMNS = (
    CONSUMERS.c.generation,
    PROJECTS.c.external_id,
    USERS.c.external_id,
    TYPES.c.name,
)
# The allocation rows of the consumers bound as ``uuids``, each with its
# consumer's record: the log's CONSUMER rows read again in one statement.
_SOME = (
    sa.select(*_ALL[:6], *_RECORD_COLUMNS)
    .select_from(_named(ALLOC))
    .where(ALLOC.c.consumer_id.in_(sa.bindparam("uuids", expanding=True)))
    .order_by(ALLOC.c.id)
)


def consumers_of(conn: sa.Connection, uuids: Iterable[str]) -> dict:
    """{uuid: Consumer} of the ``uuids`` holding allocations."""
    found: dict = {}
    rows: dict = {}
    for uuid, id_, rp, rc, used, when, *record in conn.execute(
        _SOME, {"uuids": list(uuids)}
    ):
        if uuid not in found:
            found[uuid] = record
            rows[uuid] = []
        rows[uuid].append(Row(id_, rp, rc, used, None if when == NO_TIME else when))
    return {
        uuid: Consumer(generation, project, user, kind, tuple(rows[uuid]))
        for uuid, (generation, project, user, kind) in found.items()
    }


def generations_of(conn: sa.Connection, providers: Iterable[int] | None) -> dict:
    """{rp: generation} of ``providers`` (None: all) that exist."""
    query = sa.select(RP.c.id, RP.c.generation)
    if providers is not None:
        query = query.where(RP.c.id.in_(list(providers)))
    return dict(conn.execute(query).all())


def time_of(seconds: int) -> datetime.datetime:
    """Seconds since the epoch as a naive UTC datetime."""
    return EPOCH + datetime.timedelta(seconds=seconds)


def _encoded(uuids):
    """``uuids`` (str) as a column of bytes."""
    return np.array(
        [u.encode("utf-8", "surrogatepass") for u in uuids],
        dtype=None if uuids else "S36",
    )


def _positions(values, names):
    """Each of ``values``' position in ``names`` (a list, None first),
    new ones appended to it."""
    position = {name: i for i, name in enumerate(names)}
    found = []
    for value in values:
        i = position.get(value)
        if i is None:
            i = position[value] = len(names)
            names.append(value)
        found.append(i)
    return np.array(found, dtype=np.int64)


def _found(column: np.ndarray, value: typing.Any) -> tuple[int, int]:
    """Where ``value`` is in sorted ``column``: (low, high). The value is
    given the column's type first (else numpy would convert the column);
    one the type cannot hold is not there."""
    try:
        key = column.dtype.type(value)
    except OverflowError:
        return 0, 0
    if key != value:
        return 0, 0
    return (
        int(np.searchsorted(column, key, "left")),
        int(np.searchsorted(column, key, "right")),
    )


def _narrow(values: np.ndarray) -> np.ndarray:
    """``values`` (integers) as int32 when they fit."""
    info = np.iinfo(np.int32)
    if not len(values) or (values.min() >= info.min and values.max() <= info.max):
        return values.astype(np.int32)
    return values
