"""POST /reshaper: replace the inventories of some providers and the
allocations of some consumers in one transaction (doc/api.md "Reshaper")."""

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from placement import error_codes
from placement import exception
from placement.db import api as db_api
from placement.db import tables
from placement.objects import allocation
from placement.objects import common
from placement.objects import consumer
from placement.objects import inventory
from placement.objects import outcome
from placement.objects.catalog import changes

INV = tables.inventories
RP = tables.resource_providers
ALLOC = tables.allocations
RC = tables.resource_classes


def reshape(
    db: db_api.Database,
    inventories: Mapping[str, tuple[int, Mapping[str, Mapping[str, Any]]]],
    writes: list[consumer.ConsumerWrite],
) -> None:
    """``inventories``: {rp uuid: (generation, {class: record})};
    ``writes``: consumer.ConsumerWrite list (consumer generations checked)."""

    def attempt(conn):
        providers = _check_providers(conn, inventories)
        prepared = allocation.prepare(conn, writes, check_generation=True)
        records = {
            providers[uuid]["id"]: recs for uuid, (_, recs) in inventories.items()
        }
        rc_ids = common.resource_class_ids(
            conn, dict.fromkeys(rc for recs in records.values() for rc in recs)
        )
        # Expected generation of each provider as this transaction moves it.
        expected = {
            providers[uuid]["id"]: generation
            for uuid, (generation, _) in inventories.items()
        }
        interim = {rp: recs for rp, recs in records.items() if recs}
        if interim:
            _overlay(conn, interim, rc_ids)
            expected = _bump(conn, expected, interim)
        touched = allocation.write_in(conn, prepared).touched
        expected.update((rp, expected[rp] + 1) for rp in touched if rp in expected)
        _drop_unlisted(
            conn, records, rc_ids, {row["id"]: uuid for uuid, row in providers.items()}
        )
        expected = _bump(conn, expected, records)
        changes.record(conn, changes.PROVIDER, records)
        # What it leaves of each provider; the consumers are noted by
        # ``write_in`` (none when the body has no allocations).
        for uuid, row in providers.items():
            recs = records[row["id"]]
            outcome.provider(
                conn,
                row["id"],
                outcome.Leaves(
                    uuid,
                    generation=expected[row["id"]],
                    inventories={
                        rc_ids[rc]: inventory.with_defaults(rec)
                        for rc, rec in recs.items()
                    },
                    all_inventories=True,
                ),
            )

    allocation.run_write(db, attempt, "update conflict: ")


def _check_providers(conn, inventories):
    """{uuid: provider row}; 400 for an unknown provider, 409 for a
    generation that is not the one sent."""
    rows = {
        row["uuid"]: row
        for row in conn.execute(
            sa.select(*common.PROVIDER_COLUMNS).where(RP.c.uuid.in_(set(inventories)))
        ).mappings()
    }
    for uuid, (generation, _) in inventories.items():
        row = rows.get(uuid)
        if row is None:
            raise exception.BadRequest(
                "Resource provider %s in inventories not found: No resource "
                "provider with uuid %s found" % (uuid, uuid),
                code=error_codes.PROVIDER_NOT_FOUND,
            )
        if row["generation"] != generation:
            raise exception.ConcurrentUpdate(
                "resource provider generation conflict for provider %s: "
                "actual: %s, given: %s" % (uuid, row["generation"], generation)
            )
    return rows


def _bump(conn, expected, provider_ids):
    """Swap the generation of ``provider_ids`` from the expected value."""
    seen = {rp: expected[rp] for rp in provider_ids}
    common.swap_generations(conn, seen, allocation.ProviderRace())
    return {**expected, **{rp: g + 1 for rp, g in seen.items()}}


def _overlay(conn, records, rc_ids):
    """Install the new records of each provider, keeping its other classes
    (the interim inventory the new allocations are checked against)."""
    rows = [
        dict(
            inventory.with_defaults(record),
            resource_provider_id=rp,
            resource_class_id=rc_ids[rc],
        )
        for rp, recs in records.items()
        for rc, record in recs.items()
    ]
    pairs = [(r["resource_provider_id"], r["resource_class_id"]) for r in rows]
    conn.execute(
        INV.delete().where(
            sa.tuple_(INV.c.resource_provider_id, INV.c.resource_class_id).in_(pairs)
        )
    )
    conn.execute(INV.insert(), rows)


def _drop_unlisted(conn, records, rc_ids, uuids):
    """Remove the classes each provider's final inventory does not list;
    409 inventory.inuse when one still has allocations."""
    wanted = {(rp, rc_ids[rc]) for rp, recs in records.items() for rc in recs}
    existing = conn.execute(
        sa.select(INV.c.resource_provider_id, INV.c.resource_class_id).where(
            INV.c.resource_provider_id.in_(records)
        )
    ).all()
    dropped = [tuple(pair) for pair in existing if tuple(pair) not in wanted]
    if not dropped:
        return
    key = sa.tuple_(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id)
    # The class id is selected too: DISTINCT may only order by what it
    # returns (PostgreSQL).
    in_use = conn.execute(
        sa.select(ALLOC.c.resource_provider_id, RC.c.id, RC.c.name)
        .distinct()
        .join(RC, RC.c.id == ALLOC.c.resource_class_id)
        .where(key.in_(dropped))
        .order_by(ALLOC.c.resource_provider_id, RC.c.id)
    ).all()
    if in_use:
        rp = in_use[0][0]
        names = ", ".join(n for p, _, n in in_use if p == rp)
        raise exception.InventoryInUse(
            "update conflict: Inventory for '%s' on resource provider '%s' "
            "in use." % (names, uuids[rp])
        )
    conn.execute(
        INV.delete().where(
            sa.tuple_(INV.c.resource_provider_id, INV.c.resource_class_id).in_(dropped)
        )
    )
