"""Which trees a drain plan empties: the trees of named providers
(``providers=``, ``in_tree=``) or of the members of an aggregate
(``member_of=``), as root provider ids."""

import sqlalchemy as sa

from placement import exception
from placement.db import tables

RP = tables.resource_providers
RPA, AGG = tables.resource_provider_aggregates, tables.placement_aggregates


def roots_of_providers(conn: sa.Connection, uuids: list[str]) -> list[int]:
    """The root ids of the providers ``uuids``, in the order named (each
    root once); NotFound naming the first unknown uuid."""
    found: dict[str, int] = dict(
        conn.execute(
            sa.select(RP.c.uuid, RP.c.root_provider_id).where(
                RP.c.uuid.in_(sa.bindparam("uuids", expanding=True))
            ),
            {"uuids": sorted(set(uuids))},
        ).all()
    )
    roots: list[int] = []
    for uuid in uuids:
        if uuid not in found:
            raise exception.BadRequest("No resource provider with uuid %s." % uuid)
        if found[uuid] not in roots:
            roots.append(found[uuid])
    return roots


def roots_of_aggregate(conn: sa.Connection, aggregate: str) -> list[int]:
    """The root ids of the trees with a provider in ``aggregate``,
    ascending (none for an aggregate no provider is in)."""
    return list(
        conn.scalars(
            sa.select(RP.c.root_provider_id)
            .join(RPA, RPA.c.resource_provider_id == RP.c.id)
            .join(AGG, AGG.c.id == RPA.c.aggregate_id)
            .where(AGG.c.uuid == aggregate)
            .distinct()
            .order_by(RP.c.root_provider_id)
        )
    )
