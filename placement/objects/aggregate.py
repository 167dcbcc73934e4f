"""The aggregates a resource provider belongs to.

An aggregate is only a uuid: it is created the first time a provider joins
it, stored exactly as the client spelled it, and never deleted.
"""

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from placement import exception
from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects import outcome
from placement.objects import resource_provider as rp_obj
from placement.objects.catalog import changes

AGG = tables.placement_aggregates
RPA = tables.resource_provider_aggregates
# A link takes the aggregate's id by uuid (built once, and its cache key):
# one another writer took away since this process remembered its id is
# NULL, which the column refuses (doc/architecture.md, "Remembered ids").
# Inline: nothing is read back (the key's value is SQL, which SQLAlchemy
# would otherwise fetch with RETURNING where the database has it).
_INSERT_LINK = (
    RPA.insert()
    .values(
        resource_provider_id=sa.bindparam("b_rp"),
        aggregate_id=sa.select(AGG.c.id)
        .where(AGG.c.uuid == sa.bindparam("b_agg"))
        .scalar_subquery(),
    )
    .inline()
)


def get_provider_aggregates(db: db_api.Database, uuid: str) -> tuple[int, list[str]]:
    """(provider generation, aggregate uuids in id order);
    ResourceProviderNotFound. From the catalog when ``rp_obj.held`` finds
    the provider there, after that one statement; otherwise by one SQL
    statement."""
    with db.single_read() as conn:
        found = rp_obj.held(db, conn, uuid)
        uuids = _held_uuids(found) if found is not None else None
        if found is None or uuids is None:
            generation, rows = common.provider_rows(conn, _AGGREGATES, uuid, "uuid")
            return generation, [row["uuid"] for row in rows]
    return found.generation, uuids


def _held_uuids(found: rp_obj.Held) -> list[str] | None:
    """The uuids of the held provider's aggregates, in id order; None if
    the catalog lacks one's uuid (SQL answers then)."""
    uuid_of = found.catalog.aggregate_uuids()
    ids = sorted(found.catalog.aggregates.get(found.rp, ()))
    if not all(i in uuid_of for i in ids):
        return None
    return [uuid_of[i] for i in ids]


# get_provider_aggregates' statement, built once (and its cache key): the
# provider and its aggregates in one round trip.
_AGGREGATES = common.provider_rows_statement(
    (AGG.c.uuid,),
    RPA.join(AGG, AGG.c.id == RPA.c.aggregate_id),
    RPA.c.resource_provider_id == common.RP.c.id,
).order_by(RPA.c.aggregate_id)


def set_provider_aggregates(
    db: db_api.Database, uuid: str, aggregates: list[str], expected: int | None
) -> int:
    """Make ``aggregates`` (uuids) the provider's aggregates; returns the
    provider generation. An ``expected`` generation (not None) is compared,
    then moved even when the set is unchanged (v1.19+).
    """
    try:
        return _set_provider_aggregates(db, uuid, aggregates, expected)
    except sa_exc.IntegrityError as e:
        # Another request linked the same aggregate first.
        raise exception.Conflict("Update conflict: %s" % e.orig)


@db_api.retry_on_deadlock
def _set_provider_aggregates(db, uuid, aggregates, expected):
    with db.writer() as conn:
        # Held from here on (when a generation is given, and so moved):
        # what is read is current until commit.
        provider, current = common.get_provider_with(
            conn, uuid, RPA.c.aggregate_id, lock=expected is not None
        )
        generation = provider["generation"]
        if expected is not None:
            if expected != generation:
                raise exception.ConcurrentUpdate(common.GENERATION_CHANGED)
        ids, learned = common.ensure_ids(conn, AGG, "uuid", aggregates)
        wanted = set(ids.values())
        if expected is not None:
            generation = common.bump_held(conn, provider)
        # Only written: they go with the COMMIT.
        if current - wanted:
            db_api.at_commit(
                conn,
                RPA.delete().where(
                    RPA.c.resource_provider_id == provider["id"],
                    RPA.c.aggregate_id.in_(current - wanted),
                ),
            )
        if wanted - current:
            db_api.at_commit(
                conn,
                _INSERT_LINK,
                [
                    {"b_rp": provider["id"], "b_agg": agg}
                    for agg, agg_id in ids.items()
                    if agg_id not in current
                ],
            )
        if wanted != current:
            changes.record(conn, changes.PROVIDER, [provider["id"]])
            changes.record(conn, changes.AGGREGATE, wanted - current)
        outcome.provider(
            conn,
            provider["id"],
            outcome.Leaves(
                uuid,
                # Moved only when a generation is given (v1.19+).
                generation=generation if expected is not None else None,
                aggregates=frozenset(wanted),
            ),
        )
    db_api.remember(conn, learned)
    return generation
