"""Listing resource providers with the GET /resource_providers filters.

One SELECT with the filters as (correlated) EXISTS clauses, one aggregate
with the same filters for last-modified, plus at most three small lookups
(in_tree root, trait ids, class ids): the number of queries never depends
on the number of providers. The unfiltered list takes names, uuids and
trees from the worker's provider catalog while it is current and reads
only generations.
"""

import datetime
from collections.abc import Mapping
from collections.abc import Sequence

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects import constraints
from placement.objects import resource_provider as rp_obj
from placement.objects.catalog import refresh
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
    clauses = []
    if name is not None:
        clauses.append(db_api.text_equals(db, RP.c.name, name))
    if uuid is not None:
        clauses.append(RP.c.uuid == uuid)
    if member_of:
        clauses += _member_of(member_of)
    with db.reader() as conn:
        if not (clauses or in_tree or required or resources):
            everyone = _from_catalog(db, conn)
            if everyone is not None:
                return everyone
        if in_tree is not None:
            root_id = conn.scalar(
                sa.select(RP.c.root_provider_id).where(RP.c.uuid == in_tree)
            )
            if root_id is None:
                return [], None
            clauses.append(RP.c.root_provider_id == root_id)
        if required:
            ids = common.trait_ids(conn, required.names)
            clauses += _traits(ids, required)
        if resources:
            class_ids = common.resource_class_ids(conn, resources)
            clauses += [
                _has_capacity(class_ids[rc], amount) for rc, amount in resources.items()
            ]
        query = rp_obj.select_providers()
        listing = query.with_only_columns(*(query.selected_columns[c] for c in LISTED))
        providers = (
            conn.execute(listing.where(*clauses).order_by(RP.c.id)).mappings().all()
        )
        last_modified = _last_modified(conn, clauses) if providers else None
    return providers, last_modified


def _from_catalog(db, conn):
    """The unfiltered list from the worker's provider catalog, reading
    only generations (they move with allocations) and last modified; None
    when the catalog is not current."""
    cached = refresh.current(db, conn)
    if cached is None:
        return None
    uuids, names, every = cached.uuids, cached.names, cached.providers
    # Providers created after the catalog's stamp was read are left out,
    # as if this transaction had started before them.
    providers = [
        {
            "uuid": uuids[rp],
            "name": names[rp],
            "generation": generation,
            "parent_provider_uuid": uuids.get(every[rp].parent_id),
            "root_provider_uuid": uuids[every[rp].root_id],
        }
        for rp, generation in conn.execute(
            sa.select(RP.c.id, RP.c.generation).order_by(RP.c.id)
        ).all()
        if rp in every
    ]
    return providers, _last_modified(conn, ()) if providers else None


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
