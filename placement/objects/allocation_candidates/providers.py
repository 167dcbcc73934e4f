"""Stage 2: every SQL statement of the candidate engine.

A fixed handful of set-based queries per request, whatever the number of
providers or groups: inventories (with usage) of every requested class,
sharing providers and the roots they serve, the providers of the trees
involved, and their traits/aggregates of interest. Long id lists are bound
in chunks so neither SQLite nor MySQL hits a parameter limit.
"""
import dataclasses
import uuid as uuidlib

import sqlalchemy as sa

from placement import exception
from placement.db import tables
from placement.objects import common

RP = tables.resource_providers
INV = tables.inventories
ALLOC = tables.allocations
TRAIT = tables.traits
RPT = tables.resource_provider_traits
AGG = tables.placement_aggregates
RPA = tables.resource_provider_aggregates
RC_NAME = tables.resource_classes.c.name

SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
CHUNK = 500


class NoCandidates(Exception):
    """Some name or filter can match nothing: the answer is empty (200)."""


@dataclasses.dataclass(frozen=True)
class Inventory:
    total: int
    reserved: int
    allocation_ratio: float
    min_unit: int
    max_unit: int
    step_size: int
    used: int

    @property
    def capacity(self):
        """Capacity as reported (truncated)."""
        return int((self.total - self.reserved) * self.allocation_ratio)

    def fits(self, amount):
        """One group's amount: every inventory constraint (contract §3)."""
        return (self.used + amount
                <= (self.total - self.reserved) * self.allocation_ratio
                and self.min_unit <= amount <= self.max_unit
                and amount % self.step_size == 0)

    def fits_sum(self, amount):
        """A consolidated amount: capacity and max_unit only (§5.5)."""
        return (self.used + amount <= self.capacity
                and amount <= self.max_unit)


@dataclasses.dataclass(frozen=True)
class Provider:
    id: int
    uuid: str
    parent_id: int
    root_id: int


@dataclasses.dataclass
class Snapshot:
    """What the search needs to know, keyed by database ids."""
    providers: dict          # id -> Provider (every provider of the trees)
    inventories: dict        # (provider id, class id) -> Inventory
    traits: dict             # provider id -> frozenset of trait ids of interest
    aggregates: dict         # provider id -> frozenset of aggregate ids of interest
    serves: dict             # sharing provider id -> frozenset of root ids
    nested: bool             # some provider in the database has a parent


def _chunks(ids, size=CHUNK):
    ids = sorted(ids)
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


def _uuid_spellings(values):
    """The given spellings plus their canonical form (for lookups)."""
    out = set(values)
    for value in values:
        try:
            out.add(str(uuidlib.UUID(value)))
        except ValueError:
            pass
    return out


def _canonical(value):
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        return value


def resolve_traits(conn, names):
    """{name: id}; 400 "No such trait(s)" naming every unknown one."""
    names = set(names)
    if not names:
        return {}
    found = dict(conn.execute(sa.select(TRAIT.c.name, TRAIT.c.id)
                              .where(TRAIT.c.name.in_(names))).all())
    missing = sorted(names - set(found))
    if missing:
        raise exception.BadRequest("No such trait(s): %s." % ", ".join(missing))
    return found


def resolve_classes(conn, names):
    try:
        return common.resource_class_ids(conn, names)
    except exception.ResourceClassNotFound as e:
        raise exception.BadRequest(
            "Invalid resource class in resources parameter: %s" % e.message)


def resolve_aggregates(conn, uuids):
    """{uuid as requested: id} for the aggregates that exist."""
    if not uuids:
        return {}
    rows = conn.execute(sa.select(AGG.c.uuid, AGG.c.id).where(
        AGG.c.uuid.in_(_uuid_spellings(uuids)))).all()
    by_uuid = {_canonical(u): i for u, i in rows}
    return {u: by_uuid[_canonical(u)] for u in uuids
            if _canonical(u) in by_uuid}


def resolve_root(conn, provider_uuid):
    """Root id of the named provider; NoCandidates when unknown."""
    root = conn.execute(sa.select(RP.c.root_provider_id).where(
        RP.c.uuid.in_(_uuid_spellings([provider_uuid])))).scalar()
    if root is None:
        raise NoCandidates()
    return root


def _usage(class_ids):
    return (sa.select(ALLOC.c.resource_provider_id.label("rp"),
                      ALLOC.c.resource_class_id.label("rc"),
                      sa.func.sum(ALLOC.c.used).label("used"))
            .where(ALLOC.c.resource_class_id.in_(class_ids))
            .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id)
            .subquery())


def _inventory_select(class_ids):
    usage = _usage(class_ids)
    return (sa.select(INV.c.resource_provider_id, INV.c.resource_class_id,
                      INV.c.total, INV.c.reserved, INV.c.allocation_ratio,
                      INV.c.min_unit, INV.c.max_unit, INV.c.step_size,
                      sa.func.coalesce(usage.c.used, 0))
            .select_from(INV.outerjoin(usage, sa.and_(
                usage.c.rp == INV.c.resource_provider_id,
                usage.c.rc == INV.c.resource_class_id)))
            .where(INV.c.resource_class_id.in_(class_ids)))


def _inventory_rows(rows):
    return {(rp, rc): Inventory(total, reserved, float(ratio), min_unit,
                                max_unit, step, int(used))
            for rp, rc, total, reserved, ratio, min_unit, max_unit, step, used
            in rows}


def load_snapshot(conn, class_ids, trait_ids, aggregate_ids):
    """One consistent read of everything the search looks at.

    ``class_ids``: requested classes; ``trait_ids``/``aggregate_ids``: the
    ones named anywhere in the request (others are never consulted).
    """
    inventories = _inventory_rows(conn.execute(
        _inventory_select(list(class_ids))).all())
    holders = {rp for rp, _ in inventories}
    serves = _sharing_serves(conn, holders)
    roots = set().union(*serves.values())
    for ids in _chunks(holders):
        roots.update(conn.scalars(sa.select(RP.c.root_provider_id)
                                  .where(RP.c.id.in_(ids))))
    providers = {}
    traits, aggregates = {}, {}
    for ids in _chunks(roots):
        providers.update(
            (row.id, Provider(row.id, row.uuid, row.parent_provider_id,
                              row.root_provider_id))
            for row in conn.execute(
                sa.select(RP.c.id, RP.c.uuid, RP.c.parent_provider_id,
                          RP.c.root_provider_id)
                .where(RP.c.root_provider_id.in_(ids))))
        _collect(traits, conn, RPT.c.trait_id, trait_ids, ids,
                 RPT.join(RP, RP.c.id == RPT.c.resource_provider_id),
                 RPT.c.resource_provider_id)
        _collect(aggregates, conn, RPA.c.aggregate_id, aggregate_ids, ids,
                 RPA.join(RP, RP.c.id == RPA.c.resource_provider_id),
                 RPA.c.resource_provider_id)
    nested = conn.execute(sa.select(RP.c.id).where(
        RP.c.parent_provider_id.is_not(None)).limit(1)).first() is not None
    return Snapshot(providers=providers,
                    inventories=inventories,
                    traits={k: frozenset(v) for k, v in traits.items()},
                    aggregates={k: frozenset(v) for k, v in aggregates.items()},
                    serves=serves, nested=nested)


def _collect(into, conn, column, wanted, root_ids, joined, rp_column):
    if not wanted:
        return
    rows = conn.execute(sa.select(rp_column, column).select_from(joined).where(
        column.in_(list(wanted)), RP.c.root_provider_id.in_(root_ids)))
    for rp, value in rows:
        into.setdefault(rp, set()).add(value)


def _sharing_serves(conn, holders):
    """{sharing provider id: roots it serves} among ``holders``.

    A sharing provider serves its own root and the root of every provider
    that shares an aggregate with it (contract §3 "Serves").
    """
    sharing = set(conn.scalars(
        sa.select(RPT.c.resource_provider_id).join(
            TRAIT, TRAIT.c.id == RPT.c.trait_id)
        .where(TRAIT.c.name == SHARING_TRAIT))) & holders
    serves = {}
    mine, other = RPA.alias("mine"), RPA.alias("other")
    for ids in _chunks(sharing):
        for rp, root in conn.execute(
                sa.select(RP.c.id, RP.c.root_provider_id)
                .where(RP.c.id.in_(ids))):
            serves.setdefault(rp, set()).add(root)
        for rp, root in conn.execute(
                sa.select(mine.c.resource_provider_id, RP.c.root_provider_id)
                .distinct()
                .select_from(mine.join(
                    other, other.c.aggregate_id == mine.c.aggregate_id)
                    .join(RP, RP.c.id == other.c.resource_provider_id))
                .where(mine.c.resource_provider_id.in_(ids))):
            serves[rp].add(root)
    return {rp: frozenset(roots) for rp, roots in serves.items()}


@dataclasses.dataclass(frozen=True)
class Summary:
    uuid: str
    parent_uuid: str
    root_uuid: str
    inventories: dict        # class name -> Inventory
    traits: tuple            # trait names, sorted


def load_summaries(conn, root_ids, provider_ids=None):
    """Summaries of every provider of the given trees (or only of
    ``provider_ids`` when given), keyed by provider id."""
    parent, root = RP.alias("parent"), RP.alias("root")
    rows = {}
    for ids in _chunks(root_ids):
        query = (sa.select(RP.c.id, RP.c.uuid, parent.c.uuid, root.c.uuid)
                 .select_from(RP.outerjoin(parent, parent.c.id ==
                                           RP.c.parent_provider_id)
                              .join(root, root.c.id == RP.c.root_provider_id))
                 .where(RP.c.root_provider_id.in_(ids)))
        rows.update((r[0], r[1:]) for r in conn.execute(query))
    if provider_ids is not None:
        rows = {k: v for k, v in rows.items() if k in provider_ids}
    inventories, traits = {}, {}
    usage = (sa.select(ALLOC.c.resource_provider_id.label("rp"),
                       ALLOC.c.resource_class_id.label("rc"),
                       sa.func.sum(ALLOC.c.used).label("used"))
             .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id))
    for ids in _chunks(rows):
        used = {(rp, rc): int(u) for rp, rc, u in conn.execute(
            usage.where(ALLOC.c.resource_provider_id.in_(ids)))}
        for row in conn.execute(
                sa.select(INV.c.resource_provider_id, RC_NAME, INV.c.total,
                          INV.c.reserved, INV.c.allocation_ratio,
                          INV.c.min_unit, INV.c.max_unit, INV.c.step_size,
                          INV.c.resource_class_id)
                .join(tables.resource_classes, tables.resource_classes.c.id ==
                      INV.c.resource_class_id)
                .where(INV.c.resource_provider_id.in_(ids))):
            rp, name = row[0], row[1]
            inventories.setdefault(rp, {})[name] = Inventory(
                row[2], row[3], float(row[4]), row[5], row[6], row[7],
                used.get((rp, row[8]), 0))
        for rp, name in conn.execute(
                sa.select(RPT.c.resource_provider_id, TRAIT.c.name)
                .join(TRAIT, TRAIT.c.id == RPT.c.trait_id)
                .where(RPT.c.resource_provider_id.in_(ids))):
            traits.setdefault(rp, []).append(name)
    return {rp: Summary(u, p, r, inventories.get(rp, {}),
                        tuple(sorted(traits.get(rp, ()))))
            for rp, (u, p, r) in rows.items()}

