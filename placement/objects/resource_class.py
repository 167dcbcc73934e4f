"""Resource classes: the standard ones (synced at start-up) and CUSTOM_*.

Standard classes keep the ids they were synced with (their index in
os_resource_classes.STANDARDS); custom classes get ids from 10000 up so the
two ranges never meet, which is also how a standard class is recognised.
"""

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from placement import exception
from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects import outcome
from placement.objects.catalog import changes

RC = tables.resource_classes
INV = tables.inventories

CUSTOM_ID_START = 10000
# Attempts at taking max(id)+1 when another writer takes the same id.
CREATE_RETRIES = 10

_COLUMNS = (RC.c.id, RC.c.name, RC.c.created_at, RC.c.updated_at)


def is_standard(row: Mapping[str, Any]) -> bool:
    return row["id"] < CUSTOM_ID_START


def list_all(db: db_api.Database) -> Sequence[sa.RowMapping]:
    """Every class, standard ones first, then custom ones by creation."""
    with db.single_read() as conn:
        return conn.execute(sa.select(*_COLUMNS).order_by(RC.c.id)).mappings().all()


def _find(conn, name):
    return (
        conn.execute(sa.select(*_COLUMNS).where(RC.c.name == name)).mappings().first()
        if common.holdable(conn, [name])
        else None
    )


def _get(conn, name):
    row = _find(conn, name)
    if row is None or row["name"] != name:  # common.exact
        raise exception.ResourceClassNotFound("No such resource class %s." % name)
    return row


def get(db: db_api.Database, name: str) -> sa.RowMapping:
    with db.single_read() as conn:
        return _get(conn, name)


def exists(db: db_api.Database, name: str) -> bool:
    with db.single_read() as conn:
        return _find(conn, name) is not None


def create(db: db_api.Database, name: str) -> str:
    """Create custom class ``name``; Exists if it is already there."""
    for _ in range(CREATE_RETRIES):
        try:
            return _create_once(db, name)
        except sa_exc.IntegrityError:
            # Either the name or max(id)+1 was taken meanwhile; the next
            # attempt tells which (a taken name raises Exists there).
            continue
    raise exception.Conflict(
        "Max retries of DB transaction exceeded attempting to create "
        "resource class: %s, please try again." % name
    )


@db_api.retry_on_deadlock
def _create_once(db, name):
    with db.writer() as conn:
        if _find(conn, name) is not None:
            raise exception.Exists("Resource class already exists: %s" % name)
        top = conn.scalar(
            sa.select(sa.func.max(RC.c.id)).where(RC.c.id >= CUSTOM_ID_START)
        )
        rc_id = (top or CUSTOM_ID_START - 1) + 1
        conn.execute(RC.insert().values(id=rc_id, name=name))
        changes.record(conn, changes.RESOURCE_CLASS, [rc_id])
        outcome.names(conn, RC, {rc_id: (name, True)})
    return name


@db_api.retry_on_deadlock
def rename(db: db_api.Database, name: str, new_name: str) -> sa.RowMapping:
    """Rename custom class ``name``; references follow (they use the id)."""
    with db.writer() as conn:
        row = _get(conn, name)
        if is_standard(row):
            raise exception.BadRequest(
                "Cannot update standard resource class %s" % name
            )
        try:
            conn.execute(RC.update().where(RC.c.id == row["id"]).values(name=new_name))
        except sa_exc.IntegrityError:
            raise exception.Exists("Resource class already exists: %s" % new_name)
        changes.record(conn, changes.RESOURCE_CLASS, [row["id"]])
        outcome.names(conn, RC, {row["id"]: (new_name, True)})
        return _get(conn, new_name)


@db_api.retry_on_deadlock
def delete(db: db_api.Database, name: str) -> None:
    """Delete custom class ``name`` unless an inventory uses it."""
    with db.writer() as conn:
        row = _get(conn, name)
        if is_standard(row):
            raise exception.BadRequest(
                "Cannot delete standard resource class %s." % name
            )
        # One statement, so an inventory added after a separate check
        # could not slip through.
        in_use = sa.exists().where(INV.c.resource_class_id == row["id"])
        result = conn.execute(RC.delete().where(RC.c.id == row["id"], ~in_use))
        if result.rowcount != 1:
            raise exception.ResourceClassInUse(
                "Cannot delete resource class %s. Class is in use in inventory." % name
            )
        changes.record(conn, changes.RESOURCE_CLASS, [row["id"]])
        outcome.names(conn, RC, {row["id"]: (name, False)})
