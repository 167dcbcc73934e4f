"""Provider trees: a provider's subtree and moving it to another parent.

Subtrees are walked by one recursive query in the database, whatever their
size; a move rewrites the root of the whole subtree in one UPDATE.
"""

from typing import Any

import sqlalchemy as sa

from placement import exception
from placement.db import tables
from placement.objects.catalog import changes

RP = tables.resource_providers

REPARENTING = "re-parenting a provider is not currently allowed."
UNPARENTING = "un-parenting a provider is not currently allowed."
LOOP = "creating loop in the provider tree is not allowed."
NO_SUCH_PARENT = "parent provider UUID does not exist."


def subtree_ids(provider_id: int) -> sa.Select[Any]:
    """SELECT of the ids of ``provider_id`` and all its descendants."""
    # nesting=True keeps the WITH inside the subquery, where MariaDB (which
    # has no WITH ... UPDATE) accepts it.
    tree = (
        sa.select(RP.c.id)
        .where(RP.c.id == provider_id)
        .cte("subtree", recursive=True, nesting=True)
    )
    child = RP.alias("child")
    tree = tree.union_all(
        sa.select(child.c.id).where(child.c.parent_provider_id == tree.c.id)
    )
    return sa.select(tree.c.id)


def move(
    conn: sa.Connection,
    me: sa.Row[Any],
    parent_uuid: str | None,
    allow_reparenting: bool,
) -> dict[str, Any]:
    """Column values putting provider ``me`` (id, parent_provider_id,
    root_provider_id) under ``parent_uuid`` (None: make it a root).

    Rewrites the subtree's root when the parent changes; ObjectActionError
    for an unknown parent, a loop, or a move not allowed at this version.
    """
    if parent_uuid is None:
        if me.parent_provider_id is None:
            return {}
        if not allow_reparenting:
            raise exception.ObjectActionError("update", UNPARENTING)
        _set_root(conn, me.id, me.id)
        return {"parent_provider_id": None}
    parent = conn.execute(
        sa.select(RP.c.id, RP.c.root_provider_id).where(RP.c.uuid == parent_uuid)
    ).first()
    if parent is None:
        # Upstream's wording, kept for clients: "create", not "update".
        raise exception.ObjectActionError("create", NO_SUCH_PARENT)
    if parent.id == me.parent_provider_id:
        return {}
    if me.parent_provider_id is not None and not allow_reparenting:
        raise exception.ObjectActionError("update", REPARENTING)
    if conn.scalar(
        sa.select(sa.func.count()).where(
            RP.c.id == parent.id, RP.c.id.in_(subtree_ids(me.id))
        )
    ):
        raise exception.ObjectActionError("update", LOOP)
    _set_root(conn, me.id, parent.root_provider_id)
    return {"parent_provider_id": parent.id}


def _set_root(conn, provider_id, root_id):
    moved = conn.scalars(subtree_ids(provider_id)).all()
    conn.execute(RP.update().where(RP.c.id.in_(moved)).values(root_provider_id=root_id))
    changes.record(conn, changes.PROVIDER, moved)
