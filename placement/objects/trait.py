"""Traits and the trait sets of resource providers."""

from collections.abc import Iterable
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
from placement.objects import resource_provider as rp_obj
from placement.objects.catalog import changes
from placement.objects.catalog import consumer_columns

T = tables.traits
RPT = tables.resource_provider_traits

_INSERT_LINKS = RPT.insert()  # built once, and its cache key
TRAIT_COLUMNS = (T.c.id, T.c.name, T.c.created_at, T.c.updated_at)


def _associated():
    return sa.exists().where(RPT.c.trait_id == T.c.id)


def list_traits(
    db: db_api.Database,
    names: Iterable[str] | None = None,
    prefix: str | None = None,
    associated: bool | None = None,
) -> Sequence[sa.RowMapping]:
    """Trait rows, filtered by exact names, a LIKE prefix and whether any
    provider has them; every filter left as None is not applied."""
    query = sa.select(*TRAIT_COLUMNS)
    if prefix is not None:
        # Upstream's LIKE '<prefix>%': '_' and '%' stay wildcards. ILIKE
        # so both backends match as SQLite's LIKE does (ASCII case ignored).
        query = query.where(T.c.name.ilike(prefix + "%"))
    if associated is not None:
        query = query.where(_associated() if associated else ~_associated())
    with db.single_read() as conn:
        if names is not None:
            query = query.where(T.c.name.in_(common.holdable(conn, set(names))))
        rows = conn.execute(query.order_by(T.c.name)).mappings().all()
    return rows if names is None else common.exact_in(rows, names, "name")


def _get(conn, name):
    row = (
        conn.execute(
            sa.select(*TRAIT_COLUMNS).where(common.text_exactly(conn, T.c.name, name))
        )
        .mappings()
        .first()
    )
    if row is None or row["name"] != name:  # common.exact
        raise exception.TraitNotFound([name])
    return row


def get_trait(db: db_api.Database, name: str) -> sa.RowMapping:
    """The trait row; TraitNotFound if there is none."""
    with db.single_read() as conn:
        return _get(conn, name)


@db_api.retry_on_deadlock
def ensure_trait(db: db_api.Database, name: str) -> tuple[sa.RowMapping, bool]:
    """(row, created): create the trait unless it already exists."""
    with db.writer() as conn:
        result = conn.execute(db.insert_ignore(T).values(name=name))
        trait_id = db_api.inserted_id(result)
        if trait_id is not None:
            changes.record(conn, changes.TRAIT, [trait_id])
        row = _get(conn, name)
        outcome.names(conn, T, {row["id"]: (name, True)})
        return row, trait_id is not None


@db_api.retry_on_deadlock
def delete_trait(db: db_api.Database, name: str) -> None:
    """Delete a custom trait that no provider has."""
    with db.writer() as conn:
        trait = _get(conn, name)
        if not name.startswith("CUSTOM_"):
            raise exception.BadRequest("Cannot delete standard trait %s." % name)
        # One conditional statement, so a provider gaining the trait
        # meanwhile cannot slip past the in-use check; a link committed
        # while we wait for its lock trips the foreign key instead.
        try:
            deleted = conn.execute(
                T.delete().where(T.c.id == trait["id"], ~_associated())
            ).rowcount
        except sa_exc.IntegrityError:
            deleted = 0
        if not deleted:
            raise exception.TraitInUse(
                "The trait %s is in use by a resource provider." % name
            )
        changes.record(conn, changes.TRAIT, [trait["id"]])
        outcome.names(conn, T, {trait["id"]: (name, False)})


def _provider_traits(conn, provider_id):
    return (
        conn.execute(
            sa.select(*TRAIT_COLUMNS)
            .join(RPT, RPT.c.trait_id == T.c.id)
            .where(RPT.c.resource_provider_id == provider_id)
            .order_by(T.c.id)
        )
        .mappings()
        .all()
    )


def get_provider_traits(
    db: db_api.Database, uuid: str
) -> tuple[int, Sequence[Mapping[Any, Any]]]:
    """(provider generation, trait rows in trait id order: name and
    times; SQL's the id too);
    ResourceProviderNotFound if none. From the catalog when
    ``rp_obj.held`` finds the provider there, after that one statement,
    each row's time their latest (all that Last-Modified shows,
    ``request.last_modified_of``); otherwise by one SQL statement."""
    with db.single_read() as conn:
        found = rp_obj.held(db, conn, uuid)
        if found is None:
            return common.provider_rows(conn, _PROVIDER_TRAITS, uuid, "name")
    catalog = found.catalog
    seconds = [catalog.trait_seconds[t] for t in catalog.traits.get(found.rp, ())]
    times = [s for s in seconds if s is not None]
    latest = consumer_columns.time_of(max(times)) if times else None
    return found.generation, [
        {"name": name, "created_at": None, "updated_at": latest}
        for name in catalog.trait_names.get(found.rp, ())
    ]


# get_provider_traits' statement, built once (and its cache key): the
# provider and its traits in one round trip.
_PROVIDER_TRAITS = common.provider_rows_statement(
    TRAIT_COLUMNS,
    RPT.join(T, T.c.id == RPT.c.trait_id),
    RPT.c.resource_provider_id == common.RP.c.id,
).order_by(T.c.id)


@db_api.retry_on_deadlock
def set_provider_traits(
    db: db_api.Database, uuid: str, names: Iterable[str], generation: int
) -> tuple[int, list[sa.RowMapping]]:
    """Replace the provider's traits; the generation moves only when the set
    actually changes. Returns (generation, trait rows); TraitNotFound for
    unknown names."""
    with db.writer() as conn:
        # Held from here on: the links read are current until commit.
        provider, current = common.get_provider_with(
            conn, uuid, RPT.c.trait_id, lock=True
        )
        if provider["generation"] != generation:
            raise exception.ConcurrentUpdate(common.GENERATION_CHANGED)
        wanted = {row["id"]: row for row in common.trait_rows(conn, names).values()}
        if set(wanted) != current:
            generation = common.bump_held(conn, provider)
            _replace_links(conn, provider["id"], current, set(wanted))
            changes.record(conn, changes.PROVIDER, [provider["id"]])
        outcome.provider(
            conn,
            provider["id"],
            outcome.Leaves(uuid, generation=generation, traits=frozenset(wanted)),
        )
        return generation, sorted(wanted.values(), key=lambda r: r["id"])


def _replace_links(conn, provider_id, current, wanted):
    extra = current - wanted
    # Only written: they go with the COMMIT.
    if extra:
        db_api.at_commit(
            conn,
            RPT.delete().where(
                RPT.c.resource_provider_id == provider_id, RPT.c.trait_id.in_(extra)
            ),
        )
    missing = [
        {"resource_provider_id": provider_id, "trait_id": trait_id}
        for trait_id in wanted - current
    ]
    if missing:
        db_api.at_commit(conn, _INSERT_LINKS, missing)


@db_api.retry_on_deadlock
def delete_provider_traits(db: db_api.Database, uuid: str) -> None:
    """Remove every trait of the provider, bumping its generation if it had
    any."""
    with db.writer() as conn:
        provider = common.get_provider(conn, uuid)
        if not _provider_traits(conn, provider["id"]):
            return
        generation = common.bump_generation(
            conn, provider["id"], provider["generation"], common.GENERATION_CHANGED
        )
        conn.execute(RPT.delete().where(RPT.c.resource_provider_id == provider["id"]))
        changes.record(conn, changes.PROVIDER, [provider["id"]])
        outcome.provider(
            conn,
            provider["id"],
            outcome.Leaves(uuid, generation=generation, traits=frozenset()),
        )
