"""Allocations followed in memory, where triggers log every writer's
allocation and consumer writes (doc/architecture.md "Allocations in
memory"): per consumer its allocation rows, generation, project, user
and type; per provider its allocation rows. Providers' generations are
the catalog's usage's (``catalog/used.py``): held once, followed there.

Read whole with the catalog (``read``), in placement-api's master before
the fork, as columns (numpy arrays): 224,379 consumers are a few dozen
arrays whose pages every worker shares, not a million Python objects
each worker would copy by touching them. A catalog that follows the log
(``Allocations.advanced``) re-reads the consumers its CONSUMER rows name
(one statement) into a small overlay of its own, which masks the
columns; past FOLD_AT consumers the overlay is folded into new columns
(the worker's own copy from then on). The overlay is two layers: a
catch-up copies only the recent one (at most MERGE_AT consumers), which
masks the older one it is merged into when full, so that a claim's cost
does not grow with the consumers followed since the last fold (nor with
those on its provider: a sharing provider is on every claim)."""

import time
from collections.abc import Iterable

import numpy as np
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import bulk
from placement.objects.catalog import consumer_columns
from placement.objects.catalog.consumer_columns import NO_RECORD
from placement.objects.catalog.consumer_columns import NO_TIME
from placement.objects.catalog.consumer_columns import Base
from placement.objects.catalog.consumer_columns import Columns
from placement.objects.catalog.consumer_columns import Consumer
from placement.objects.catalog.consumer_columns import OnProvider
from placement.objects.catalog.consumer_columns import Row

ALLOC, CONSUMERS = tables.allocations, tables.consumers
PROJECTS, USERS, TYPES = tables.projects, tables.users, tables.consumer_types

# Overlay entries (consumers) past which a catalog folds them into new
# columns.
FOLD_AT = 10_000
# Recent-layer consumers past which it is merged into the older layer.
MERGE_AT = 256


class Allocations:
    """The columns of the last whole read (``base``, shared) and the
    overlay of what the log named since, in two layers (the older shared
    with the catalogs before, the recent this catalog's own). Never
    modified: ``advanced`` makes a new one."""

    def __init__(self, base: Base, read_at: float) -> None:
        self.base = base
        # time.monotonic() before the whole read its columns come from.
        self.read_at = read_at
        # Each layer: uuid -> Consumer, or None: holds no allocations now;
        # and rp -> frozenset of the layer's uuids with rows on it. The
        # recent layer's consumers mask the older one's.
        self.older: dict = {}
        self.older_on: dict = {}
        self.recent: dict = {}
        self.recent_on: dict = {}
        self._changed: dict | None = None
        self._masked: np.ndarray | None = None

    @property
    def changed(self) -> dict:
        """uuid -> Consumer (None: holds no allocations now) of every
        consumer of the overlay, both layers; made on first use."""
        if self._changed is None:
            self._changed = {**self.older, **self.recent} if self.recent else self.older
        return self._changed

    def __eq__(self, other: object) -> bool:
        """The same allocations (the tests compare catalogs)."""
        if not isinstance(other, Allocations):
            return NotImplemented
        return self.everything() == other.everything()

    __hash__ = None  # type: ignore[assignment]

    def consumer(self, uuid: str) -> Consumer | None:
        """Its allocations, None when it holds none."""
        if uuid in self.recent:
            return self.recent[uuid]
        if uuid in self.older:
            return self.older[uuid]
        i = self.base.index(uuid)
        return None if i is None else self.base.consumer(i)

    def masked(self) -> np.ndarray:
        """Per consumer of the base columns, whether the overlay holds it
        (its columns' rows are not its rows now); built on first use."""
        if self._masked is None:
            masked = np.zeros(len(self.base.uuids), dtype=bool)
            at = [i for i in map(self.base.index, self.changed) if i is not None]
            masked[at] = True
            self._masked = masked
        return self._masked

    def on_provider(self, rp: int) -> OnProvider:
        """The allocation rows on provider ``rp``, in id order: the base
        columns' as they are, unless the overlay holds some of their
        consumers or has rows there."""
        base, older, recent = self.base, self.older, self.recent
        on = base.on_provider(rp)
        if not (older or recent):
            return on
        overlay = [
            (uuid, older[uuid])
            for uuid in self.older_on.get(rp, ())
            if uuid not in recent
        ]
        overlay.extend((uuid, recent[uuid]) for uuid in self.recent_on.get(rp, ()))
        if not overlay and not any(u in recent or u in older for u in on.uuid):
            return on
        rows = [row for row in zip(*on) if not (row[1] in recent or row[1] in older)]
        rows.extend(
            (
                row.id,
                uuid,
                consumer.generation,
                row.rc,
                row.used,
                NO_TIME if row.modified is None else row.modified,
            )
            for uuid, consumer in overlay
            for row in consumer.rows
            if row.provider == rp
        )
        rows.sort()
        return OnProvider(*map(list, tuple(zip(*rows)) or ((),) * 6))

    def advanced(self, found: dict, uuids: Iterable[str]) -> "Allocations":
        """A new one: this one with consumers ``uuids`` as ``found``
        (``consumers_of`` them) has them."""
        uuids = set(uuids)
        if not uuids:
            return self
        new = Allocations(self.base, self.read_at)
        new.older, new.older_on = self.older, self.older_on
        new.recent, new.recent_on = _layered(
            self.recent, self.recent_on, {uuid: found.get(uuid) for uuid in uuids}
        )
        if len(new.recent) > MERGE_AT:
            new.older, new.older_on = _layered(new.older, new.older_on, new.recent)
            new.recent, new.recent_on = {}, {}
        if len(new.older) + len(new.recent) > FOLD_AT:
            return new.folded()
        return new

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
        return Allocations(
            Base(rows, {field: tuple(values) for field, values in names.items()}),
            self.read_at,
        )

    def everything(self) -> dict:
        """{uuid: Consumer}: what it holds, for the tests to compare with
        a fresh read (``consumers_of``)."""
        base = self.folded().base
        return {base.uuid(i): base.consumer(i) for i in range(len(base.uuids))}


def _layered(changed: dict, on: dict, fresh: dict) -> tuple[dict, dict]:
    """A layer (``changed``, ``on``: ``Allocations.older``, ``older_on``)
    with ``fresh`` ({uuid: Consumer or None}) in it, as new dicts."""
    changed = dict(changed)
    touched: dict = {}  # rp -> {uuid: holds rows there now}
    for uuid, consumer in fresh.items():
        was = changed.get(uuid)
        for row in was.rows if was is not None else ():
            touched.setdefault(row.provider, {})[uuid] = False
        for row in consumer.rows if consumer is not None else ():
            touched.setdefault(row.provider, {})[uuid] = True
        changed[uuid] = consumer
    on = dict(on)
    for rp, now in touched.items():
        kept = on.get(rp, frozenset())
        kept = (kept - now.keys()) | {u for u, there in now.items() if there}
        if kept:
            on[rp] = kept
        else:
            on.pop(rp, None)
    return changed, on


def read(conn: sa.Connection) -> Allocations:
    """Every consumer holding allocations, in ``conn``'s snapshot: the
    allocation rows and the consumers' records (``bulk``), and the
    names."""
    read_at = time.monotonic()
    uuids, *numbers = bulk.columns(
        conn, ALLOC, ALLOC.c.id, list(_ALL), text=(0,), encoded=(0,)
    )
    ids = _records(conn, uuids)
    names: dict = {}
    for k, (field, table, name) in enumerate(_NAMES):
        found = sorted(conn.execute(sa.select(table.c.id, name)).all())
        names[field] = (None, *(value for _, value in found))
        known = np.array([id_ for id_, _ in found], dtype=np.int64)
        ids[k + 1] = _place(known, ids[k + 1])
    return Allocations(Base(Columns(uuids, *numbers, *ids), names), read_at)


def _records(conn, uuids):
    """Per allocation row of consumer ``uuids`` (bytes), its consumer's
    record: generation, project id, user id and type id (NO_RECORD
    without a record or a type). The consumers are read apart and
    matched here by uuid: joining them to 674,724 allocation rows in
    the statement took MariaDB three times as long as reading both."""
    record, *values = bulk.columns(
        conn, CONSUMERS, CONSUMERS.c.id, list(_RECORD), text=(0,), encoded=(0,)
    )
    order = np.argsort(record, kind="stable")
    record = record[order]
    # Each consumer looked up once, not once per row.
    distinct, inverse = consumer_columns.unique(uuids)
    at = np.minimum(np.searchsorted(record, distinct), max(len(record) - 1, 0))
    matched = (record[at] == distinct if len(record) else at < 0)[inverse]
    at = at[inverse]
    found = [
        np.where(matched, column[order][at], NO_RECORD)
        if len(record)
        else np.full(len(uuids), NO_RECORD, dtype=np.int64)
        for column in values
    ]
    if not matched.all():
        _collated(conn, uuids, matched, found)
    return found


def _collated(conn, uuids, matched, found):
    """The records of rows whose consumer uuid matched none byte for
    byte, as the database's own comparison finds them (on MySQL a
    case-insensitive collation can match another case); none
    otherwise."""
    unmatched = sorted({u.decode("utf-8", "surrogatepass") for u in uuids[~matched]})
    joined = sa.select(ALLOC.c.consumer_id, *_RECORD[1:]).select_from(
        ALLOC.join(CONSUMERS, CONSUMERS.c.uuid == ALLOC.c.consumer_id)
    )
    records = {
        consumer: values
        for consumer, *values in conn.execute(
            joined.where(
                ALLOC.c.consumer_id.in_(sa.bindparam("uuids", expanding=True))
            ).distinct(),
            {"uuids": unmatched},
        )
    }
    for i in np.flatnonzero(~matched).tolist():
        values = records.get(uuids[i].decode("utf-8", "surrogatepass"))
        if values is not None:
            for column, value in zip(found, values):
                column[i] = value


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
)
_RECORD = (
    CONSUMERS.c.uuid,
    CONSUMERS.c.generation,
    CONSUMERS.c.project_id,
    CONSUMERS.c.user_id,
    sa.func.coalesce(CONSUMERS.c.consumer_type_id, NO_RECORD),
)
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
# consumer's record: the log's CONSUMER rows read again in one statement
# (ordered by allocation id: ``SOME_ROWS`` in a union, ``of_rows``).
SOME_ROWS = (
    sa.select(*_ALL[:6], *_RECORD_COLUMNS)
    .select_from(_named(ALLOC))
    .where(ALLOC.c.consumer_id.in_(sa.bindparam("uuids", expanding=True)))
)
_SOME = SOME_ROWS.order_by(ALLOC.c.id)


def consumers_of(conn: sa.Connection, uuids: Iterable[str]) -> dict:
    """{uuid: Consumer} of the ``uuids`` holding allocations."""
    return of_rows(db_api.plain_rows(conn, _SOME, {"uuids": list(uuids)}))


def of_rows(some: Iterable) -> dict:
    """``consumers_of``'s answer from ``SOME_ROWS``'s rows, by allocation
    id."""
    found: dict = {}
    rows: dict = {}
    for uuid, id_, rp, rc, used, when, *record in some:
        if uuid not in found:
            found[uuid] = record
            rows[uuid] = []
        rows[uuid].append(Row(id_, rp, rc, used, None if when == NO_TIME else when))
    return {
        uuid: Consumer(generation, project, user, kind, tuple(rows[uuid]))
        for uuid, (generation, project, user, kind) in found.items()
    }
