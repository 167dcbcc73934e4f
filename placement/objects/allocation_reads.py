"""The allocation reads: GET /allocations/{consumer} and GET
/resource_providers/{uuid}/allocations. From the catalog when it follows
allocations (trigger mode: doc/architecture.md "Allocations in memory")
and is current at the stamp the request reads, its one statement;
otherwise by one SQL statement. Both give the same answer: rows in
allocation id order, the joins' rules (a row whose provider or class is
gone is not shown; a consumer without a record has no generation,
project or user) kept in memory as in SQL."""

import dataclasses
import datetime
import typing

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects.catalog import consumer_columns
from placement.objects.catalog import refresh
from placement.objects.catalog import store

ALLOC = tables.allocations
RP = tables.resource_providers
RC = tables.resource_classes
CONSUMERS = tables.consumers


@dataclasses.dataclass
class ConsumerAllocations:
    allocations: dict  # {rp uuid: {"generation": g, "resources": {}}}
    project_id: str | None = None
    user_id: str | None = None
    generation: int | None = None
    consumer_type: str | None = None
    # The last updated_at (else created_at) of its rows, for last-modified.
    modified: datetime.datetime | None = None


@dataclasses.dataclass
class ProviderAllocations:
    generation: int
    # {consumer uuid: {"resources": {}, "consumer_generation": g}}
    allocations: dict
    modified: datetime.datetime | None = None  # as ConsumerAllocations'


def for_consumer(db: db_api.Database, consumer_uuid: str) -> ConsumerAllocations:
    """A consumer's allocations with its owner and generation."""
    with db.single_read() as conn:
        catalog = refresh.with_allocations(db, conn)
        if catalog is not None:
            return _consumer_in(catalog, consumer_uuid)
        rows = (
            conn.execute(_FOR_CONSUMER, {"b_uuid": consumer_uuid}).mappings().all()
            if common.holdable(conn, [consumer_uuid])
            else []
        )
    rows = common.exact(rows, "consumer_id", consumer_uuid)
    if not rows:
        return ConsumerAllocations({})
    allocations: dict[str, typing.Any] = {}
    for row in rows:
        entry = allocations.setdefault(
            row["rp_uuid"], {"generation": row["generation"], "resources": {}}
        )
        entry["resources"][row["rc"]] = row["used"]
    first = rows[0]
    return ConsumerAllocations(
        allocations,
        first["project_id"],
        first["user_id"],
        first["consumer_generation"],
        first["consumer_type"] or "unknown",
        _last(row["updated_at"] or row["created_at"] for row in rows),
    )


def for_provider(db: db_api.Database, rp_uuid: str) -> ProviderAllocations:
    """Every allocation against a provider, grouped by consumer.
    ResourceProviderNotFound for an unknown provider."""
    with db.single_read() as conn:
        catalog = refresh.with_allocations(db, conn)
        found = _provider_in(catalog, rp_uuid) if catalog is not None else None
        if found is not None:
            return found
        generation, rows = common.provider_rows(
            conn, _FOR_PROVIDER, rp_uuid, "consumer_id"
        )
    allocations: dict[str, typing.Any] = {}
    for row in rows:
        entry = allocations.setdefault(
            row["consumer_id"],
            {"resources": {}, "consumer_generation": row["generation"]},
        )
        entry["resources"][row["rc"]] = row["used"]
    return ProviderAllocations(
        generation,
        allocations,
        _last(row["updated_at"] or row["created_at"] for row in rows),
    )


def _consumer_in(catalog: store.Catalog, uuid: str) -> ConsumerAllocations:
    followed, used = catalog.allocations, catalog.used
    assert followed is not None and used is not None
    found = followed.consumer(uuid)
    if found is None:
        return ConsumerAllocations({})
    allocations: dict[str, typing.Any] = {}
    modified = []
    for row in found.rows:
        rp_uuid, rc = catalog.uuids.get(row.provider), catalog.class_names.get(row.rc)
        if rp_uuid is None or rc is None:
            continue  # as the SQL's inner joins
        entry = allocations.setdefault(
            rp_uuid, {"generation": used.generation_of(row.provider), "resources": {}}
        )
        entry["resources"][rc] = row.used
        modified.append(row.modified)
    if not allocations:
        return ConsumerAllocations({})
    return ConsumerAllocations(
        allocations,
        found.project,
        found.user,
        found.generation,
        found.type or "unknown",
        _last_seconds(modified),
    )


def _provider_in(catalog: store.Catalog, uuid: str) -> ProviderAllocations | None:
    """From memory; None if it lacks the provider's generation (never
    seen: the SQL path answers then)."""
    followed, used = catalog.allocations, catalog.used
    assert followed is not None and used is not None
    rp = catalog.ids.get(uuid)
    if rp is None:
        raise common.provider_not_found(uuid)
    generation = used.generation_of(rp)
    if generation is None:
        return None
    on = followed.on_provider(rp)
    allocations: dict[str, typing.Any] = {}
    last = consumer_columns.NO_TIME
    names = catalog.class_names
    for consumer, consumer_generation, rc, amount, modified in zip(
        on.uuid, on.generation, on.rc, on.used, on.modified
    ):
        name = names.get(rc)
        if name is None:
            continue  # as the SQL's inner join
        entry = allocations.get(consumer)
        if entry is None:
            entry = allocations[consumer] = {
                "resources": {},
                "consumer_generation": consumer_generation,
            }
        entry["resources"][name] = amount
        if modified > last:
            last = modified
    return ProviderAllocations(
        generation,
        allocations,
        None if last == consumer_columns.NO_TIME else consumer_columns.time_of(last),
    )


def _last(times: typing.Iterable[datetime.datetime | None]) -> datetime.datetime | None:
    found = [t for t in times if t is not None]
    return max(found) if found else None


def _last_seconds(seconds: list[int | None]) -> datetime.datetime | None:
    found = [s for s in seconds if s is not None]
    return consumer_columns.time_of(max(found)) if found else None


# for_consumer's statement, built once (and its cache key).
_FOR_CONSUMER = (
    sa.select(
        ALLOC.c.consumer_id,
        RP.c.uuid.label("rp_uuid"),
        RP.c.generation,
        RC.c.name.label("rc"),
        ALLOC.c.used,
        ALLOC.c.created_at,
        ALLOC.c.updated_at,
        CONSUMERS.c.generation.label("consumer_generation"),
        tables.projects.c.external_id.label("project_id"),
        tables.users.c.external_id.label("user_id"),
        tables.consumer_types.c.name.label("consumer_type"),
    )
    .select_from(
        ALLOC.join(RP, RP.c.id == ALLOC.c.resource_provider_id)
        .join(RC, RC.c.id == ALLOC.c.resource_class_id)
        .outerjoin(CONSUMERS, CONSUMERS.c.uuid == ALLOC.c.consumer_id)
        .outerjoin(tables.projects, tables.projects.c.id == CONSUMERS.c.project_id)
        .outerjoin(tables.users, tables.users.c.id == CONSUMERS.c.user_id)
        .outerjoin(
            tables.consumer_types,
            tables.consumer_types.c.id == CONSUMERS.c.consumer_type_id,
        )
    )
    .where(ALLOC.c.consumer_id == sa.bindparam("b_uuid"))
    .order_by(ALLOC.c.id)
)

# for_provider's statement, built once: the provider and its allocations
# in one round trip.
_FOR_PROVIDER = common.provider_rows_statement(
    (
        ALLOC.c.consumer_id,
        RC.c.name.label("rc"),
        ALLOC.c.used,
        ALLOC.c.created_at,
        ALLOC.c.updated_at,
        CONSUMERS.c.generation,
    ),
    ALLOC.join(RC, RC.c.id == ALLOC.c.resource_class_id).outerjoin(
        CONSUMERS, CONSUMERS.c.uuid == ALLOC.c.consumer_id
    ),
    ALLOC.c.resource_provider_id == RP.c.id,
).order_by(ALLOC.c.id)
