"""Listing resource providers with the GET /resource_providers filters.

One SELECT with the filters as (correlated) EXISTS clauses, one aggregate
with the same filters for last-modified, plus at most three small lookups
(in_tree root, trait ids, class ids): the number of queries never depends
on the number of providers.

The unfiltered list (``list_encoded``) is answered as JSON written ahead:
each provider's JSON around its generation, from the worker's provider
catalog, and the whole body, kept while the catalog's stamp and the sum of
the generations stay the same. See "The unfiltered provider list" in
doc/architecture.md.
"""

import datetime
import threading
import typing
from collections.abc import Callable
from collections.abc import Hashable
from collections.abc import Mapping
from collections.abc import Sequence

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects import constraints
from placement.objects import resource_provider as rp_obj
from placement.objects.catalog import changes
from placement.objects.catalog import refresh
from placement.objects.catalog.store import Catalog
from placement.schemas import inventory as inventory_schema

RP = tables.resource_providers
RPT = tables.resource_provider_traits
RPA = tables.resource_provider_aggregates
AGG = tables.placement_aggregates
INV = tables.inventories
ALLOC = tables.allocations

# The listed columns leave out the timestamps: parsing two datetimes per
# row was about half of the fetch on MySQL; the aggregate below replaces them.
LISTED = ("uuid", "name", "generation", "parent_provider_uuid", "root_provider_uuid")


def list_providers(
    db: db_api.Database,
    name: str | None = None,
    uuid: str | None = None,
    member_of: constraints.MemberOf | None = None,
    resources: Mapping[str, int] | None = None,
    in_tree: str | None = None,
    required: constraints.RequiredTraits | None = None,
) -> tuple[Sequence[sa.RowMapping], datetime.datetime | None]:
    """(providers, last modified) for the providers matching every filter.

    Providers are mappings with the LISTED keys; last modified is the
    latest updated_at-or-created_at among them (None if there are none).
    ``member_of`` is a constraints.MemberOf, ``required`` a
    constraints.RequiredTraits, ``resources`` {class name: amount}. An
    unknown ``in_tree`` matches nothing (and skips name validation);
    unknown traits raise TraitNotFound, unknown classes ResourceClassNotFound.
    """
    if (
        (member_of or required)
        and name is None
        and uuid is None
        and in_tree is None
        and not resources
    ):
        # The catalog's answer after its look, in autocommit: no pool
        # checkout, BEGIN or COMMIT (the trait ids, remembered for standard
        # traits, and the look need no snapshot in common).
        with db.single_read() as conn:
            if _none_held(db, conn, member_of, required):
                return [], None
    with db.reader() as conn:
        clauses = filters(db, conn, name, uuid, member_of, resources, in_tree, required)
        if clauses is None:
            return [], None
        query = rp_obj.select_providers()
        listing = query.with_only_columns(*(query.selected_columns[c] for c in LISTED))
        providers = (
            conn.execute(listing.where(*clauses).order_by(RP.c.id)).mappings().all()
        )
        last_modified = _last_modified(conn, clauses) if providers else None
    return providers, last_modified


# _none_held looks at most this many providers (the query answers beyond).
RAREST_HELD = 1000


def _none_held(
    db: db_api.Database,
    conn: sa.Connection,
    member_of: constraints.MemberOf | None,
    required: constraints.RequiredTraits | None,
) -> bool:
    """Whether the catalog current at ``conn``'s stamp shows that no
    provider is in ``member_of``'s aggregates and has ``required``'s
    traits (each any-of set: one of them): nova's periodic look for the
    sharing providers of a host's aggregates, which mostly finds none,
    answered without its query. False when unsure (no current catalog, an
    aggregate it does not know as spelled): the query answers then.
    Unknown traits raise TraitNotFound, as the query's filters do."""
    ids = common.trait_ids(conn, required.names) if required else {}
    catalog = refresh.current(db, conn)
    if catalog is None:
        return False
    known = catalog.aggregate_ids
    # Per any-of set: (its aggregates' or traits' ids, the map of the
    # providers holding each id, each provider's ids).
    wanted = []
    for any_of in member_of.any_of if member_of else ():
        if not all(u in known for u in any_of):
            return False
        wanted.append(
            (
                frozenset(known[u] for u in any_of),
                catalog.aggregate_members,
                catalog.aggregates,
            )
        )
    for any_of in required.any_of if required else ():
        wanted.append(
            (frozenset(ids[n] for n in any_of), catalog.trait_holders, catalog.traits)
        )
    if not wanted:
        return False
    # The holders of the rarest set's ids: is any in every other set?
    holders = [
        [holder.get(value, ()) for value in values] for values, holder, _ in wanted
    ]
    rarest = min(holders, key=lambda found: sum(map(len, found)))
    if sum(map(len, rarest)) > RAREST_HELD:
        return False
    return not any(
        all(not values.isdisjoint(held.get(rp, ())) for values, _, held in wanted)
        for found in rarest
        for rp in found
    )


def filters(
    db: db_api.Database,
    conn: sa.Connection,
    name: str | None = None,
    uuid: str | None = None,
    member_of: constraints.MemberOf | None = None,
    resources: Mapping[str, int] | None = None,
    in_tree: str | None = None,
    required: constraints.RequiredTraits | None = None,
) -> list[sa.ColumnElement[bool]] | None:
    """The WHERE clauses on resource_providers of ``list_providers``'s
    filters; None when nothing can match (an unknown ``in_tree``)."""
    clauses = []
    if name is not None:
        clauses.append(common.text_exactly(db, RP.c.name, name))
    if uuid is not None:
        clauses.append(RP.c.uuid == uuid)
    if member_of:
        clauses += _member_of(member_of)
    if in_tree is not None:
        root_id = conn.scalar(
            sa.select(RP.c.root_provider_id).where(RP.c.uuid == in_tree)
        )
        if root_id is None:
            return None
        clauses.append(RP.c.root_provider_id == root_id)
    if required:
        ids = common.trait_ids(conn, required.names)
        clauses += _traits(ids, required)
    if resources:
        class_ids = common.resource_class_ids(conn, resources)
        clauses += [
            _has_capacity(class_ids[rc], amount) for rc, amount in resources.items()
        ]
    return clauses


class Encoding(typing.NamedTuple):
    """How the unfiltered list is written as JSON."""

    # Everything the JSON depends on besides the providers (microversion,
    # mount prefix): bodies and providers' JSON are kept per key.
    key: Hashable
    # {uuid, name, parent_provider_uuid, root_provider_uuid} -> the
    # provider's JSON before and after its generation.
    provider: Callable[[dict], tuple[bytes, bytes]]
    head: bytes  # before the comma-separated providers
    tail: bytes  # after them


def list_encoded(
    db: db_api.Database, encoding: Encoding
) -> tuple[bytes, datetime.datetime | None] | None:
    """(JSON body, last modified) of every provider, ordered by id, from
    the catalog; None when the catalog is not current (the caller lists
    through SQL).

    While the catalog's stamp stays the same, no provider comes or goes
    and generations only grow (every other write of a provider is a
    catalog change), so the stamp and the sum of the generations, read in
    one statement, tell whether a body written before is still the answer.
    """
    with db.reader() as conn:
        stamp, tokens, generations, last_modified = conn.execute(_STATE).one()
        catalog = refresh.current(db, conn, changes.Look(stamp, tokens))
        if catalog is None or catalog.stamp != stamp:
            # Not current, or brought up to a newer stamp (READ COMMITTED
            # reads the newest commits at every statement).
            return None
        listings = _listings(db)
        body = listings.body(encoding.key, catalog, generations)
        if body is None:
            rows = conn.execute(_GENERATIONS).all()
            # The rows are those of the stamp if it has not moved since.
            if tuple(conn.execute(_STATE).one()[:2]) != (stamp, tokens) or len(
                rows
            ) != len(catalog.providers):
                return None
            body = listings.write(catalog, encoding, rows)
    return body, last_modified


_STATE = sa.select(
    changes.COUNT.scalar_subquery(),
    changes.TOKEN_SUM.scalar_subquery(),
    sa.func.coalesce(sa.func.sum(RP.c.generation), 0),
    sa.func.max(sa.func.coalesce(RP.c.updated_at, RP.c.created_at)),
)
_GENERATIONS = sa.select(RP.c.id, RP.c.generation).order_by(RP.c.id)


class _Listings:
    """One database's unfiltered lists written as JSON in this process:
    per encoding key, each provider's JSON around its generation (as of
    ``catalog``) and the last body, with the catalog and generation sum it
    answers."""

    # Encoding keys kept (a few microversions' link sets): each holds
    # about twice the body's size (pieces and body).
    MAX_KEYS = 4

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.catalog: Catalog | None = None
        self.fragments: dict = {}  # key -> {rp: (before, after)}
        self.bodies: dict = {}  # key -> (catalog, generation sum, body)

    def body(self, key, catalog, generations):
        kept = self.bodies.get(key)
        # The catalog's structure, not only its stamp: one read again at
        # the same stamp (another writer's rows) may name providers
        # otherwise; one that followed only usage or generations keeps it.
        if kept is not None and kept[0] is catalog.structure and kept[1] == generations:
            return kept[2]
        return None

    def write(self, catalog, encoding, rows):
        """The body of ``rows`` ((id, generation) of every provider of
        ``catalog``, by id), kept for the next requests."""
        with self.lock:
            fragments = self._fragments(catalog, encoding)
            body = b",".join(
                b"%s%d%s" % (fragments[rp][0], generation, fragments[rp][1])
                for rp, generation in rows
            ).join((encoding.head, encoding.tail))
            if encoding.key not in self.bodies and len(self.bodies) >= self.MAX_KEYS:
                self.bodies.clear()
            self.bodies[encoding.key] = (
                catalog.structure,
                sum(generation for _, generation in rows),
                body,
            )
        return body

    def _fragments(self, catalog, encoding):
        """{rp: (before, after)} for ``encoding`` at ``catalog``: the JSON
        of providers whose row is unchanged since it was written is kept."""
        if self.catalog is not catalog:
            old, self.catalog = self.catalog, catalog
            if old is None or not (
                old.providers is catalog.providers
                and old.names is catalog.names
                and old.uuids is catalog.uuids
            ):
                self.fragments = {
                    key: {
                        rp: written
                        for rp, written in fragments.items()
                        if _same(old, catalog, rp)
                    }
                    for key, fragments in self.fragments.items()
                }
        fragments = self.fragments.get(encoding.key)
        if fragments is None:
            if len(self.fragments) >= self.MAX_KEYS:
                self.fragments.clear()
            fragments = self.fragments[encoding.key] = {}
        uuids = catalog.uuids
        for rp, provider in catalog.providers.items():
            if rp not in fragments:
                fragments[rp] = encoding.provider(
                    {
                        "uuid": uuids[rp],
                        "name": catalog.names[rp],
                        "parent_provider_uuid": uuids.get(provider.parent_id),
                        "root_provider_uuid": uuids[provider.root_id],
                    }
                )
        return fragments


def _same(old, new, rp):
    """Provider ``rp`` has the same JSON in both catalogs: the same uuid,
    name, parent and root (a provider's uuid never changes, so neither do
    its parent's and root's)."""
    provider = new.providers.get(rp)
    return (
        provider is not None
        and old.providers.get(rp) == provider
        and old.names.get(rp) == new.names[rp]
        and old.uuids.get(rp) == new.uuids[rp]
    )


_LISTINGS = db_api.PerDatabase(_Listings)


def _listings(db: db_api.Database) -> _Listings:
    return _LISTINGS.of(db)


def _last_modified(conn, clauses):
    return conn.scalar(
        sa.select(
            sa.func.max(sa.func.coalesce(RP.c.updated_at, RP.c.created_at))
        ).where(*clauses)
    )


def _in_aggregates(uuids):
    return sa.exists().where(
        RPA.c.resource_provider_id == RP.c.id,
        RPA.c.aggregate_id == AGG.c.id,
        AGG.c.uuid.in_(uuids),
    )


def _member_of(member_of):
    clauses = [_in_aggregates(any_of) for any_of in member_of.any_of]
    if member_of.forbidden:
        clauses.append(~_in_aggregates(member_of.forbidden))
    return clauses


def _has_traits(trait_ids):
    return sa.exists().where(
        RPT.c.resource_provider_id == RP.c.id, RPT.c.trait_id.in_(trait_ids)
    )


def _has_every_trait(trait_ids):
    """All of ``trait_ids``: one clause however many there are (one
    ``required`` may name thousands)."""
    if len(trait_ids) == 1:
        return _has_traits(trait_ids)
    return sa.select(sa.func.count()).where(
        RPT.c.resource_provider_id == RP.c.id, RPT.c.trait_id.in_(trait_ids)
    ).scalar_subquery() == len(trait_ids)


def _traits(ids, required):
    every = sorted(
        {ids[n] for any_of in required.any_of if len(any_of) == 1 for n in any_of}
    )
    clauses = [_has_every_trait(every)] if every else []
    clauses += [
        _has_traits([ids[name] for name in any_of])
        for any_of in required.any_of
        if len(any_of) > 1
    ]
    if required.forbidden:
        clauses.append(~_has_traits([ids[name] for name in required.forbidden]))
    return clauses


def _has_capacity(class_id, amount):
    """The provider can take ``amount`` more of the class ("fits" in
    doc/api.md "Terms")."""
    if amount > inventory_schema.MAX_INT:
        # Above any max_unit; and too big to bind on SQLite.
        return sa.false()
    used = (
        sa.select(sa.func.coalesce(sa.func.sum(ALLOC.c.used), 0))
        .where(
            ALLOC.c.resource_provider_id == RP.c.id,
            ALLOC.c.resource_class_id == class_id,
        )
        .correlate(RP)
        .scalar_subquery()
    )
    return sa.exists().where(
        INV.c.resource_provider_id == RP.c.id,
        INV.c.resource_class_id == class_id,
        INV.c.min_unit <= amount,
        INV.c.max_unit >= amount,
        sa.literal(amount) % INV.c.step_size == 0,
        (INV.c.total - INV.c.reserved) * INV.c.allocation_ratio >= used + amount,
    )
