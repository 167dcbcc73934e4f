"""Races the inventory and resource class writers must survive, on real
SQLite, MySQL and PostgreSQL databases: concurrent inventory writes with one
generation (exactly one wins, the rest get a clean ConcurrentUpdate) and
custom class id allocation (max(id)+1, retried when another writer takes the
id).
"""

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from placement import exception
from placement.db import tables
from placement.objects import inventory as inv_obj
from placement.objects import resource_class as rc_obj
from tests import helpers

WRITERS = 6


def _record(total):
    return inv_obj.with_defaults({"total": total})


def test_one_generation_one_winner(db):
    rp_uuid = helpers.new_provider(db)
    outcomes = helpers.run_together(
        lambda i: inv_obj.replace_inventories(db, rp_uuid, 0, {"VCPU": _record(i + 1)}),
        WRITERS,
    )
    winners = [o for o in outcomes if o == 1]
    losers = [o for o in outcomes if isinstance(o, exception.ConcurrentUpdate)]
    assert len(winners) == 1 and len(losers) == WRITERS - 1, outcomes
    generation, rows = inv_obj.get_inventories(db, rp_uuid)
    assert generation == 1
    assert [row["resource_class"] for row in rows] == ["VCPU"]


def test_concurrent_creates_of_one_class(db):
    rp_uuid = helpers.new_provider(db)
    outcomes = helpers.run_together(
        lambda i: inv_obj.create_inventory(db, rp_uuid, "DISK_GB", _record(10)), WRITERS
    )
    assert outcomes.count(1) == 1, outcomes
    assert all(isinstance(o, exception.ConcurrentUpdate) for o in outcomes if o != 1), (
        outcomes
    )
    generation, rows = inv_obj.get_inventories(db, rp_uuid)
    assert generation == 1
    assert [row["resource_class"] for row in rows] == ["DISK_GB"]


def test_custom_class_ids_are_max_plus_one(db):
    outcomes = helpers.run_together(
        lambda i: rc_obj.create(db, "CUSTOM_RACE_%d" % i), WRITERS
    )
    assert all(isinstance(o, str) for o in outcomes), outcomes
    with db.reader() as conn:
        ids = sorted(
            conn.scalars(
                sa.select(tables.resource_classes.c.id).where(
                    tables.resource_classes.c.name.like("CUSTOM_RACE_%")
                )
            )
        )
    assert ids == list(range(rc_obj.CUSTOM_ID_START, rc_obj.CUSTOM_ID_START + WRITERS))


def test_class_create_retries_a_taken_id(db, monkeypatch):
    real = rc_obj._create_once
    failures = iter([True, True])

    def flaky(db, name):
        if next(failures, False):
            raise sa_exc.IntegrityError("INSERT", {}, Exception("taken"))
        return real(db, name)

    monkeypatch.setattr(rc_obj, "_create_once", flaky)
    assert rc_obj.create(db, "CUSTOM_RETRIED") == "CUSTOM_RETRIED"
    assert rc_obj.exists(db, "CUSTOM_RETRIED")


def test_class_create_gives_up_after_retries(db, monkeypatch):
    def always_taken(db, name):
        raise sa_exc.IntegrityError("INSERT", {}, Exception("taken"))

    monkeypatch.setattr(rc_obj, "_create_once", always_taken)
    with pytest.raises(exception.Conflict) as raised:
        rc_obj.create(db, "CUSTOM_UNLUCKY")
    assert (
        "Max retries of DB transaction exceeded attempting to create "
        "resource class: CUSTOM_UNLUCKY" in raised.value.message
    )


def test_existing_name_is_not_retried(db):
    rc_obj.create(db, "CUSTOM_ONCE")
    with pytest.raises(exception.Exists):
        rc_obj.create(db, "CUSTOM_ONCE")
