"""A catalog's whole read as joined columns (``Rows.whole``,
``Used.read``) on SQLite, MySQL and PostgreSQL: the same rows as read one
by one (``Rows(conn, None)``), also for the values the joined text could
get wrong (a name holding the separator, a NULL name or parent, ratios
whose text is not exact), usage summed from the allocations as the
database sums it, text read as bytes, and the fingerprint summed from
the columns as the catalog's walk and the database sum it."""

import copy
import uuid

import numpy as np
import pytest
import sqlalchemy as sa

from placement.db import tables
from placement.objects.catalog import bulk
from placement.objects.catalog import fingerprint
from placement.objects.catalog import rows
from placement.objects.catalog import store
from placement.objects.catalog import used
from tests import fixtures

RP, INV, ALLOC = tables.resource_providers, tables.inventories, tables.allocations
RPT, RPA = tables.resource_provider_traits, tables.resource_provider_aggregates


def _provider(rp, root, parent=None, name=None):
    return {
        "id": rp,
        "uuid": str(uuid.UUID(int=rp)),
        "name": name,
        "generation": rp % 3,
        "root_provider_id": root,
        "parent_provider_id": parent,
    }


def _inventory(rp, rc, total, ratio):
    return {
        "resource_provider_id": rp,
        "resource_class_id": rc,
        "total": total,
        "reserved": 1,
        "min_unit": 1,
        "max_unit": total,
        "step_size": 1,
        "allocation_ratio": ratio,
    }


def _allocation(rp, rc, used, consumer):
    return {
        "resource_provider_id": rp,
        "resource_class_id": rc,
        "used": used,
        "consumer_id": str(uuid.UUID(int=1000 + consumer)),
    }


# Both MySQL drivers: each decodes the joined columns its own way.
db = fixtures.db_fixture(fixtures.EVERY_DRIVER)


def _write(db, providers, inventories, allocations=()):
    with db.engine.begin() as conn:
        conn.execute(RP.insert(), providers)
        conn.execute(INV.insert(), inventories)
        conn.execute(
            RPT.insert(),
            [
                {"resource_provider_id": p["id"], "trait_id": t}
                for p in providers
                for t in (1, 2)
            ],
        )
        conn.execute(
            tables.placement_aggregates.insert(),
            [{"id": 7, "uuid": str(uuid.uuid4())}],
        )
        conn.execute(
            RPA.insert(),
            [
                {"resource_provider_id": p["id"], "aggregate_id": 7}
                for p in providers[::2]
            ],
        )
        if allocations:
            conn.execute(ALLOC.insert(), allocations)


def _same_rows(db):
    with db.engine.connect() as conn:
        whole, one_by_one = rows.Rows.whole(conn), rows.Rows(conn, None)
    assert list(whole.providers.items()) == list(one_by_one.providers.items())
    assert dict(whole.inventories) == dict(one_by_one.inventories)
    assert whole.traits == one_by_one.traits
    assert whole.aggregates == one_by_one.aggregates
    return whole


def test_a_cloud_read_as_joined_columns_is_the_rows_read_one_by_one(db):
    providers = [_provider(1, 1, name="host, with a comma")]
    providers += [_provider(rp, 1, parent=1) for rp in range(2, 5000)]
    _write(
        db,
        providers,
        [_inventory(rp, rp % 3, 10 + rp % 7, 1.5) for rp in range(1, 5000)],
    )
    whole = _same_rows(db)
    assert whole.providers[1][2] == "host, with a comma"
    assert whole.providers[2] == (rows.Provider(2, 1, 1), str(uuid.UUID(int=2)), None)
    assert whole.inventories[3][0].allocation_ratio == 1.5


def _maps(catalog):
    # Holders in any order: the links' rows come in the database's.
    return {
        "trait_holders": {t: sorted(rps) for t, rps in catalog.trait_holders.items()},
        "aggregate_members": {
            a: sorted(rps) for a, rps in catalog.aggregate_members.items()
        },
    } | {
        name: getattr(catalog, name)
        for name in (
            "providers",
            "uuids",
            "names",
            "ids",
            "members",
            "roots",
            "by_provider",
            "idle",
            "holders",
            "traits",
            "aggregates",
            "trait_names",
        )
    }


def test_a_catalog_made_from_joined_columns_is_the_one_made_row_by_row(db):
    # Trees of 1-4 providers holding 1-3 classes, the same inventories
    # on many of them: the maps made at once (stock_maps) against the
    # walk over rows read one by one.
    providers = [
        _provider(rp, rp - rp % 4 or 4, parent=None if rp % 4 == 0 else rp - rp % 4)
        for rp in range(4, 400)
    ]
    inventories = [
        _inventory(rp, rc, 8 + (rp + rc) % 3, (1.0, 1.5, 16.0)[rp % 3])
        for rp in range(4, 400)
        for rc in range(rp % 7 % 4)
    ]
    _write(db, providers, inventories)
    with db.engine.connect() as conn:
        whole = store.Catalog.read(conn)
        one_by_one = store.Catalog()
        one_by_one._readnames(conn, None, None)
        one_by_one.aggregate_ids = rows.pairs(conn, store.AGG, "uuid", "id")
        one_by_one._whole(rows.Rows(conn, None))
    assert _maps(whole) == _maps(one_by_one)
    # Equal inventories, and equal lists of them, are one object.
    assert len({id(v) for v in whole.by_provider.values()}) == len(
        set(whole.by_provider.values())
    )
    made, walked = whole.columns, store.columns.Columns(one_by_one)
    assert made is not None and made.stock.keys() == walked.stock.keys()
    for rc, stock in made.stock.items():
        for field in stock._fields:
            assert np.array_equal(
                getattr(stock, field), getattr(walked.stock[rc], field)
            )


@pytest.mark.parametrize("ratio", [1 / 3, 0.1, 16.0, 2.0**-30])
def test_ratios_of_any_text_read_as_the_driver_reads_them(db, ratio):
    _write(
        db,
        [_provider(1, 1, name=""), _provider(2, 1, parent=1, name="b")],
        [_inventory(1, 0, 8, ratio), _inventory(2, 1, 8, 1.0)],
    )
    with db.engine.connect() as conn:
        (driver,) = conn.execute(
            sa.select(INV.c.allocation_ratio).where(INV.c.resource_provider_id == 1)
        ).one()
    whole = _same_rows(db)
    assert whole.inventories[1][0].allocation_ratio == driver
    assert whole.providers[1][2] == ""


def test_ids_far_apart_are_read_past_the_empty_windows(db):
    far = [1, 2, bulk.WINDOW * 3 + 5, bulk.WINDOW * 40]
    _write(
        db,
        [_provider(rp, rp, name="rp%d" % rp) for rp in far],
        [_inventory(rp, 0, rp, 1.0) for rp in far],
    )
    whole = _same_rows(db)
    assert list(whole.providers) == far
    assert [whole.inventories[rp][0].total for rp in far] == far


def test_usage_summed_from_the_allocations_is_the_databases_sum(db):
    providers = [_provider(rp, rp) for rp in range(1, 40)]
    _write(
        db,
        providers,
        [_inventory(rp, rc, 100, 1.0) for rp in range(1, 40) for rc in (0, 1)],
        [
            _allocation(rp % 39 + 1, i % 3, 1 + i % 5, i)
            for i, rp in enumerate(range(300))
        ],
    )
    with db.engine.connect() as conn:
        summed = dict(
            ((rp, rc), int(total))
            for rp, rc, total in conn.execute(
                sa.select(
                    ALLOC.c.resource_provider_id,
                    ALLOC.c.resource_class_id,
                    sa.func.sum(ALLOC.c.used),
                ).group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id)
            )
        )
        provider, rc, amount = bulk.columns(
            conn,
            ALLOC,
            ALLOC.c.id,
            [ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id, ALLOC.c.used],
        )
        holders = {rc: np.arange(1, 40) for rc in (0, 1)}
        read = used.Used.read(conn, holders, (provider, rc, amount))
    for rc in (0, 1):
        assert read.amount[rc].tolist() == [
            summed.get((rp, rc), 0) for rp in range(1, 40)
        ]
    assert read.ids.tolist() == list(range(1, 40))
    assert read.generation.tolist() == [rp % 3 for rp in range(1, 40)]


@pytest.mark.parametrize(
    "names",
    [
        [str(uuid.UUID(int=i)) for i in range(3000)],
        ["n%d" % i for i in range(3000)],
        ["é%d" % i for i in range(50)] + ["a, b", ""],
        ["x"],
    ],
    ids=["one width", "widths", "separator", "one"],
)
def test_text_read_as_bytes_is_each_value_encoded(db, names):
    _write(
        db,
        [_provider(rp, rp, name=name) for rp, name in enumerate(names, 1)],
        [_inventory(1, 0, 8, 1.0)],
    )
    with db.engine.connect() as conn:
        ids, encoded = bulk.columns(
            conn, RP, RP.c.id, [RP.c.id, RP.c.name], text=(1,), encoded=(1,)
        )
    assert encoded.tolist() == [names[i - 1].encode() for i in ids.tolist()]


@pytest.mark.parametrize("ratio", [1.5, 1 / 3])
def test_fingerprint_summed_from_the_columns_is_the_walks_and_the_databases(db, ratio):
    # 1/3 has no exact text: the rows are read one by one, and walked.
    providers = [_provider(1, 1, name="a, b"), _provider(2, 1, parent=1, name="")]
    providers += [_provider(rp, rp, name="h%d" % rp) for rp in range(3, 300)]
    _write(
        db,
        providers,
        [_inventory(rp, rp % 3, 10 + rp, (ratio, 16.0)[rp % 2]) for rp in range(1, 300)]
        + [_inventory(rp, 3, 2**31 - 1, 2.0**-30) for rp in range(1, 300, 7)],
    )
    with db.engine.connect() as conn:
        read = store.Catalog.read(conn)
        database = fingerprint.of_database(conn)
    walked = copy.copy(read)
    walked.content = None
    assert read.fingerprint(db.dialect) == walked.fingerprint(db.dialect)
    assert read.fingerprint(db.dialect) == database
