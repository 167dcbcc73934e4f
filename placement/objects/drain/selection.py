"""Which trees a drain plan empties: the trees of named providers
(``providers=``, ``in_tree=``) or of the members of an aggregate
(``member_of=``), as root provider ids; and the check that the root ids
a plan relies on are the tops of their providers' parent chains (a NULL
or wrong root id, which the data audit lists under ``wrong_roots``, is a
Conflict naming the provider, not a plan of the wrong tree)."""

import typing

import sqlalchemy as sa

from placement import exception
from placement.db import api as db_api
from placement.db import tables
from placement.objects.allocation_candidates import providers

RP = tables.resource_providers
RPA, AGG = tables.resource_provider_aggregates, tables.placement_aggregates


# Parent chains longer than this are taken for loops.
DEPTH = 64
AUDIT = (
    "run `placement-manage audit` (doc/audit.md: wrong_roots, parent_loops) "
    "and fix the provider's root_provider_id before planning a drain"
)


def check_roots(conn: sa.Connection, ids: typing.Iterable[int]) -> None:
    """Conflict naming the first provider of ``ids`` or their ancestors
    (by uuid) whose ``root_provider_id`` is NULL or not the top of its
    parent chain, or whose chain loops: a statement per level of the
    trees, whatever the number of providers."""
    rows: dict[int, tuple] = {}
    wanted = set(ids)
    for _ in range(DEPTH + 1):
        wanted -= set(rows)
        if not wanted:
            break
        for chunk in providers.chunks(wanted):
            for rp, uuid, name, parent, root in conn.execute(
                sa.select(
                    RP.c.id,
                    RP.c.uuid,
                    RP.c.name,
                    RP.c.parent_provider_id,
                    RP.c.root_provider_id,
                ).where(RP.c.id.in_(db_api.int_list("ids"))),
                {"ids": chunk},
            ):
                rows[rp] = (uuid, name, parent, root)
        wanted = {row[2] for row in rows.values() if row[2] is not None}
    # The named providers and their ancestors (the root a child names).
    for rp in sorted(rows, key=lambda i: rows[i][0]):
        uuid, name, _parent, root = rows[rp]
        top, seen = rp, set()
        while top in rows and rows[top][2] is not None and top not in seen:
            seen.add(top)
            top = rows[top][2]
        if top in seen or top not in rows:
            raise exception.Conflict(
                "Resource provider %s (%s): its parent chain loops or is "
                "broken; %s." % (uuid, name, AUDIT)
            )
        if root != top:
            raise exception.Conflict(
                "Resource provider %s (%s) has root_provider_id %s, but the "
                "top of its parent chain is %s (%s, id %d); %s."
                % (
                    uuid,
                    name,
                    "NULL" if root is None else root,
                    rows[top][0],
                    rows[top][1],
                    top,
                    AUDIT,
                )
            )


def check_trees(conn: sa.Connection, roots: list[int]) -> None:
    """Conflict naming a provider whose parent is in the trees of
    ``roots`` but whose root id is not its parent's (one statement): its
    allocations would be left out of the plan."""
    if not roots:
        return
    child, parent = RP.alias("child"), RP.alias("parent")
    found = conn.execute(
        sa.select(child.c.id)
        .join(parent, parent.c.id == child.c.parent_provider_id)
        .where(
            parent.c.root_provider_id.in_(db_api.int_list("roots")),
            sa.or_(
                child.c.root_provider_id.is_(None),
                child.c.root_provider_id != parent.c.root_provider_id,
            ),
        )
        .order_by(child.c.uuid)
        .limit(1),
        {"roots": sorted(roots)},
    ).first()
    if found is not None:
        check_roots(conn, [found[0]])


def roots_of_providers(conn: sa.Connection, uuids: list[str]) -> list[int]:
    """The root ids of the providers ``uuids``, in the order named (each
    root once); NotFound naming the first unknown uuid; Conflict for a
    provider whose root id is not the top of its parent chain."""
    found: dict[str, tuple[int, int]] = {
        uuid: (rp, root)
        for uuid, rp, root in conn.execute(
            sa.select(RP.c.uuid, RP.c.id, RP.c.root_provider_id).where(
                RP.c.uuid.in_(sa.bindparam("uuids", expanding=True))
            ),
            {"uuids": sorted(set(uuids))},
        ).all()
    }
    roots: list[int] = []
    for uuid in uuids:
        if uuid not in found:
            raise exception.BadRequest("No resource provider with uuid %s." % uuid)
    check_roots(conn, [rp for rp, _ in found.values()])
    for uuid in uuids:
        root = found[uuid][1]
        if root not in roots:
            roots.append(root)
    check_trees(conn, roots)
    return roots


def roots_of_aggregate(conn: sa.Connection, aggregate: str) -> list[int]:
    """The root ids of the trees with a provider in ``aggregate``,
    ascending (none for an aggregate no provider is in)."""
    members = conn.execute(
        sa.select(RP.c.id, RP.c.root_provider_id)
        .join(RPA, RPA.c.resource_provider_id == RP.c.id)
        .join(AGG, AGG.c.id == RPA.c.aggregate_id)
        .where(AGG.c.uuid == aggregate)
    ).all()
    check_roots(conn, [rp for rp, _ in members])
    roots = sorted({root for _, root in members})
    check_trees(conn, roots)
    return roots
