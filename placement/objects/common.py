"""Lookups and the generation compare-and-swap that every domain shares.

Functions here take an open connection (``conn``) so callers compose them
inside their own transaction.
"""
import sqlalchemy as sa

from placement import exception
from placement.db import tables

RP = tables.resource_providers
RC = tables.resource_classes
TRAIT = tables.traits

# The contract's message for a client-supplied provider generation that is
# not the current one (409 placement.concurrent_update).
GENERATION_CHANGED = ("Resource provider's generation already changed. "
                      "Please update the generation and try again.")

PROVIDER_COLUMNS = (RP.c.id, RP.c.uuid, RP.c.name, RP.c.generation,
                    RP.c.root_provider_id, RP.c.parent_provider_id,
                    RP.c.created_at, RP.c.updated_at)


def get_provider(conn, uuid):
    """The provider row for ``uuid``; ResourceProviderNotFound if none."""
    row = conn.execute(sa.select(*PROVIDER_COLUMNS).where(RP.c.uuid == uuid)
                       ).mappings().first()
    if row is None:
        raise exception.ResourceProviderNotFound(
            "No resource provider with uuid %s found" % uuid)
    return row


def swap_generations(conn, seen, conflict=None):
    """Compare-and-swap the generation of every provider in ``seen``
    ({id: generation read}) to generation + 1, in one statement.

    ``updated_at`` is left alone: a generation bump is not an edit of the
    provider itself. Raises ``conflict`` (an exception instance, default
    ConcurrentUpdate) when another writer moved any of them first.
    """
    result = conn.execute(
        RP.update()
        .where(RP.c.id.in_(seen),
               RP.c.generation == sa.case(seen, value=RP.c.id))
        .values(generation=RP.c.generation + 1, updated_at=RP.c.updated_at))
    if result.rowcount != len(seen):
        raise conflict or exception.ConcurrentUpdate(
            "resource provider generation conflict")


def bump_generation(conn, provider_id, seen_generation, message=None):
    """One provider's compare-and-swap; returns the new generation."""
    swap_generations(conn, {provider_id: seen_generation},
                     message and exception.ConcurrentUpdate(message))
    return seen_generation + 1


def resource_class_ids(conn, names):
    """{name: id} for ``names``; ResourceClassNotFound for the first unknown."""
    names = list(names)
    if not names:
        return {}
    found = dict(conn.execute(
        sa.select(RC.c.name, RC.c.id).where(RC.c.name.in_(set(names)))).all())
    for name in names:
        if name not in found:
            raise exception.ResourceClassNotFound(
                "No such resource class %s." % name)
    return found


def trait_ids(conn, names):
    """{name: id} for ``names``; TraitNotFound naming every unknown one."""
    names = set(names)
    if not names:
        return {}
    found = dict(conn.execute(sa.select(TRAIT.c.name, TRAIT.c.id)
                              .where(TRAIT.c.name.in_(names))).all())
    if len(found) != len(names):
        raise exception.TraitNotFound(names - set(found))
    return found


def ensure_ids(conn, db, table, column, names):
    """{name: id} of the rows of ``table`` whose ``column`` is in ``names``,
    inserting the missing ones first (projects, users, consumer types,
    aggregates: rows that exist as soon as something refers to them).

    ``db`` gives the backend's insert-ignore, so concurrent writers creating
    the same name do not fail; the select then reads whichever row won.
    """
    names = set(names)
    if not names:
        return {}
    conn.execute(db.insert_ignore(table), [{column: n} for n in names])
    return dict(conn.execute(
        sa.select(table.c[column], table.c.id)
        .where(table.c[column].in_(names))).all())
