"""Stage 2: every SQL statement of the candidate engine.

A fixed handful of set-based queries per request, whatever the number of
providers or groups: inventories (with usage) of every requested class,
sharing providers and the roots they serve, the providers of the trees
involved, and their traits/aggregates of interest. Long id lists are bound
in chunks so neither SQLite nor MySQL hits a parameter limit.
"""

import dataclasses
import typing
import uuid as uuidlib

import sqlalchemy as sa

from placement.db import tables
from placement.objects import catalog
from placement.objects import common

RP = tables.resource_providers
INV = tables.inventories
ALLOC = tables.allocations
TRAIT = tables.traits
RPT = tables.resource_provider_traits
AGG = tables.placement_aggregates
RPA = tables.resource_provider_aggregates
RC_NAME = tables.resource_classes.c.name

SHARING_TRAIT = catalog.SHARING_TRAIT
# Ids bound per IN list: well under SQLite's 32766 variables.
CHUNK = 10000


class NoCandidates(Exception):
    """Some name or filter can match nothing: the answer is empty (200)."""


# The catalog keeps providers and inventories as the engine reads them.
Inventory = catalog.Inventory
Provider = catalog.Provider


@dataclasses.dataclass
class Snapshot:
    """What the search needs to know, keyed by database ids."""

    providers: dict  # id -> Provider: every holder and anchor root;
    # every provider of the trees with ``whole_trees``
    inventories: dict  # (provider id, class id) -> Inventory
    traits: dict  # provider id -> frozenset of trait ids of interest
    aggregates: dict  # provider id -> frozenset of aggregate ids of interest
    serves: dict  # sharing provider id -> frozenset of root ids
    nested: bool  # some provider in the database has a parent


def _chunks(ids, size=CHUNK):
    ids = sorted(ids)
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def _uuid_spellings(values):
    """The given spellings plus their canonical form (for lookups)."""
    out = set(values)
    for value in values:
        try:
            out.add(str(uuidlib.UUID(value)))
        except ValueError:
            pass
    return out


def resolve_aggregates(conn, uuids):
    """{uuid: id} for the aggregates that exist. Aggregates are stored and
    matched exactly as the client spelled them (as upstream does), as the
    provider list does."""
    if not uuids:
        return {}
    return dict(
        conn.execute(
            sa.select(AGG.c.uuid, AGG.c.id).where(AGG.c.uuid.in_(set(uuids)))
        ).all()
    )


def resolve_root(conn, provider_uuid):
    """Root id of the named provider; NoCandidates when unknown."""
    root = conn.execute(
        sa.select(RP.c.root_provider_id).where(
            RP.c.uuid.in_(_uuid_spellings([provider_uuid]))
        )
    ).scalar()
    if root is None:
        raise NoCandidates()
    return root


def _used():
    """Usage of the inventory row's (provider, class): a correlated
    subquery, which both SQLite and MySQL answer from the covering
    (provider, class, used) index; a grouped derived table joined instead
    made SQLite build a temporary index per request."""
    # CAST: MySQL sums integers into DECIMAL.
    return (
        sa.select(sa.cast(sa.func.coalesce(sa.func.sum(ALLOC.c.used), 0), sa.Integer))
        .where(
            ALLOC.c.resource_provider_id == INV.c.resource_provider_id,
            ALLOC.c.resource_class_id == INV.c.resource_class_id,
        )
        .scalar_subquery()
    )


INVENTORY_COLUMNS = (*catalog.STOCK_COLUMNS, _used())

# Holders of the requested classes with their tree position, in one pass.
HOLDERS = (
    sa.select(
        INV.c.resource_provider_id,
        RP.c.parent_provider_id,
        RP.c.root_provider_id,
        INV.c.resource_class_id,
        *INVENTORY_COLUMNS,
    )
    .join(RP, RP.c.id == INV.c.resource_provider_id)
    .where(INV.c.resource_class_id.in_(sa.bindparam("classes", expanding=True)))
)

IN_ROOTS = RP.c.root_provider_id.in_(sa.bindparam("roots", expanding=True))
HOLDERS_IN_TREES = HOLDERS.where(IN_ROOTS)

TREE_PROVIDERS = sa.select(
    RP.c.id, RP.c.parent_provider_id, RP.c.root_provider_id
).where(RP.c.root_provider_id.in_(sa.bindparam("roots", expanding=True)))


def _pairs(conn, table, column, wanted, roots=None):
    """{provider id: {value}} for rows of ``table`` whose ``column`` is in
    ``wanted`` (a handful of trait or aggregate ids), in the trees of
    ``roots`` if given."""
    into = {}
    if wanted:
        query = sa.select(table.c.resource_provider_id, column).where(
            column.in_(sorted(wanted))
        )
        if roots is not None:
            query = query.join(RP, RP.c.id == table.c.resource_provider_id).where(
                RP.c.root_provider_id.in_(roots)
            )
        for rp, value in conn.execute(query):
            into.setdefault(rp, set()).add(value)
    return into


def load_snapshot(
    conn, class_ids, trait_ids, aggregate_ids, whole_trees=False, roots=None
):
    """One consistent read of everything the search looks at.

    ``class_ids``: requested classes; ``trait_ids``/``aggregate_ids``: the
    ones named anywhere in the request (others are never consulted).
    ``whole_trees``: also load the providers of the trees that hold no
    requested inventory (same_subtree ancestors, resourceless groups).
    ``roots``: only these trees (a page of ``root_ids``; sharing providers
    of other trees are then not looked for).
    """
    providers, inventories = {}, {}
    params = {"classes": sorted(class_ids)}
    if roots is not None:
        params["roots"] = roots
    for row in conn.execute(HOLDERS if roots is None else HOLDERS_IN_TREES, params):
        rp = row[0]
        if rp not in providers:
            providers[rp] = Provider(rp, row[1], row[2])
        inventories[rp, row[3]] = Inventory._make(row[4:])
    serves = _sharing_serves(conn, providers)
    anchors = {p.root_id for p in providers.values()}
    anchors.update(*serves.values())
    if whole_trees:
        for ids in _chunks(anchors):
            providers.update(
                (row[0], Provider._make(row))
                for row in conn.execute(TREE_PROVIDERS, {"roots": ids})
            )
    else:
        for root in anchors:
            if root not in providers:
                providers[root] = Provider(root, None, root)
    traits = _pairs(conn, RPT, RPT.c.trait_id, trait_ids, roots)
    aggregates = _pairs(conn, RPA, RPA.c.aggregate_id, aggregate_ids, roots)
    return Snapshot(
        providers=providers,
        inventories=inventories,
        traits={k: frozenset(v) for k, v in traits.items() if k in providers},
        aggregates={k: frozenset(v) for k, v in aggregates.items() if k in providers},
        serves=serves,
        nested=is_nested(conn),
    )


def is_nested(conn):
    """True when some provider in the database has a parent."""
    return (
        conn.execute(
            sa.select(RP.c.id).where(RP.c.parent_provider_id.is_not(None)).limit(1)
        ).first()
        is not None
    )


def root_ids(conn):
    """Every root provider id, ascending (the pages of a limited search)."""
    return list(
        conn.scalars(
            sa.select(RP.c.id)
            .where(RP.c.parent_provider_id.is_(None))
            .order_by(RP.c.id)
        )
    )


def sharing_holds(conn, class_ids):
    """True when some sharing provider has inventory of these classes."""
    return (
        conn.execute(
            sa.select(INV.c.id)
            .join(RPT, RPT.c.resource_provider_id == INV.c.resource_provider_id)
            .join(TRAIT, TRAIT.c.id == RPT.c.trait_id)
            .where(
                TRAIT.c.name == SHARING_TRAIT,
                INV.c.resource_class_id.in_(sorted(class_ids)),
            )
            .limit(1)
        ).first()
        is not None
    )


def _sharing_serves(conn, holders):
    """{sharing provider id: roots it serves} among ``holders`` (a dict of
    Provider by id).

    A sharing provider serves its own root and the root of every provider
    that shares an aggregate with it (doc/api.md "Terms").
    """
    sharing = [
        rp
        for rp in conn.scalars(
            sa.select(RPT.c.resource_provider_id)
            .join(TRAIT, TRAIT.c.id == RPT.c.trait_id)
            .where(TRAIT.c.name == SHARING_TRAIT)
        )
        if rp in holders
    ]
    serves = {rp: {holders[rp].root_id} for rp in sharing}
    mine, other = RPA.alias("mine"), RPA.alias("other")
    for ids in _chunks(sharing):
        for rp, root in conn.execute(
            sa.select(mine.c.resource_provider_id, RP.c.root_provider_id)
            .distinct()
            .select_from(
                mine.join(other, other.c.aggregate_id == mine.c.aggregate_id).join(
                    RP, RP.c.id == other.c.resource_provider_id
                )
            )
            .where(mine.c.resource_provider_id.in_(ids))
        ):
            serves[rp].add(root)
    return {rp: frozenset(roots) for rp, roots in serves.items()}


class Summary(typing.NamedTuple):
    uuid: str
    parent_uuid: str
    root_uuid: str
    inventories: dict  # class name -> Inventory
    traits: tuple  # trait names, in trait id order


TREES = sa.select(
    RP.c.id, RP.c.uuid, RP.c.parent_provider_id, RP.c.root_provider_id
).where(RP.c.root_provider_id.in_(sa.bindparam("roots", expanding=True)))

# Inventories of the other classes: the requested ones are in the snapshot.
TREE_INVENTORIES = (
    sa.select(INV.c.resource_provider_id, RC_NAME, *INVENTORY_COLUMNS)
    .join(RP, RP.c.id == INV.c.resource_provider_id)
    .join(
        tables.resource_classes, tables.resource_classes.c.id == INV.c.resource_class_id
    )
    .where(
        RP.c.root_provider_id.in_(sa.bindparam("roots", expanding=True)),
        INV.c.resource_class_id.not_in(sa.bindparam("classes", expanding=True)),
    )
)

# In trait id order: the order a provider's traits are listed in.
TREE_TRAITS = (
    sa.select(RPT.c.resource_provider_id, TRAIT.c.name)
    .join(TRAIT, TRAIT.c.id == RPT.c.trait_id)
    .join(RP, RP.c.id == RPT.c.resource_provider_id)
    .where(RP.c.root_provider_id.in_(sa.bindparam("roots", expanding=True)))
    .order_by(RPT.c.trait_id)
)


def load_summaries(conn, root_ids, known, class_names, provider_ids=None):
    """Summaries of every provider of the given trees (or only of
    ``provider_ids`` when given), keyed by provider id: three statements
    per CHUNK trees.

    ``known``: ((provider id, class id), Inventory) of every requested
    class in these trees, as the snapshots read them; ``class_names``:
    {class id: name} of the requested classes.
    """
    rows, inventories, traits = {}, {}, {}
    for (rp, rc), inventory in known:
        inventories.setdefault(rp, {})[class_names[rc]] = inventory
    for ids in _chunks(root_ids):
        params = {"roots": ids, "classes": sorted(class_names)}
        rows.update((row[0], row[1:]) for row in conn.execute(TREES, params))
        for row in conn.execute(TREE_INVENTORIES, params):
            inventories.setdefault(row[0], {})[row[1]] = Inventory._make(row[2:])
        for rp, name in conn.execute(TREE_TRAITS, params):
            traits.setdefault(rp, []).append(name)
    uuids = {rp: row[0] for rp, row in rows.items()}
    if provider_ids is not None:
        rows = {k: v for k, v in rows.items() if k in provider_ids}
    return {
        rp: Summary(
            uuid,
            uuids.get(parent),
            uuids[root],
            inventories.get(rp, {}),
            tuple(traits.get(rp, ())),
        )
        for rp, (uuid, parent, root) in rows.items()
    }


def load_uuids(conn, provider_ids):
    """{id: uuid} of the given providers."""
    out = {}
    for ids in _chunks(provider_ids):
        out.update(
            conn.execute(sa.select(RP.c.id, RP.c.uuid).where(RP.c.id.in_(ids))).all()
        )
    return out


class Reader:
    """The stage's queries on one connection, as the engine calls them
    (``catalog.Reader`` answers the same calls from a cached catalog)."""

    def __init__(self, conn):
        self.conn = conn

    def class_ids(self, names):
        return common.resource_class_ids(self.conn, names)

    def trait_ids(self, names):
        return common.trait_ids(self.conn, names)

    def aggregate_ids(self, uuids):
        return resolve_aggregates(self.conn, uuids)

    def root_of(self, provider_uuid):
        return resolve_root(self.conn, provider_uuid)

    def root_ids(self):
        return root_ids(self.conn)

    def sharing_holds(self, class_ids):
        return sharing_holds(self.conn, class_ids)

    def is_nested(self):
        return is_nested(self.conn)

    def uuids(self, provider_ids):
        return load_uuids(self.conn, provider_ids)

    def snapshot(
        self, class_ids, trait_ids, aggregate_ids, whole_trees=False, roots=None
    ):
        return load_snapshot(
            self.conn, class_ids, trait_ids, aggregate_ids, whole_trees, roots
        )

    def summaries(self, root_ids, known, class_names, provider_ids=None):
        return load_summaries(self.conn, root_ids, known, class_names, provider_ids)
