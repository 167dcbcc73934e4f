"""Serving a database other writers write too (doc/operations.md,
"Replacing the reference host by host"), without the reference itself
(tests/functional/test_reference.py runs it): rows written behind the
service's back show in its answers, standard class ids are the
reference's whoever adds them, health reflects every table, and a
deadlock on every try is a 409, not a 500."""

import json
import time
import uuid

import os_resource_classes
import pytest
import sqlalchemy as sa

from placement.db import tables
from placement.objects import standard_names
from placement.objects.catalog import verify
from tests import fixtures
from tests import helpers
from tests import wsgi_client

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}


def _call(app, path, method="GET", body=None):
    return wsgi_client.call(app, path, method=method, body=body, **HEADERS)


def _candidates(app, query):
    resp = _call(app, "/allocation_candidates?" + query)
    assert resp.status == 200, resp.body
    return set(resp.json()["provider_summaries"])


def _host(app, name, vcpu=8):
    resp = _call(app, "/resource_providers", "POST", {"name": name})
    assert resp.status == 200, resp.body
    rp = resp.json()["uuid"]
    resp = _call(
        app,
        "/resource_providers/%s/inventories" % rp,
        "PUT",
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": vcpu}}},
    )
    assert resp.status == 200, resp.body
    return rp


def _past_the_bound():
    """Wait out the catalog's comparison period: the next request compares
    it with the database before it answers."""
    time.sleep(verify.VERIFY_EVERY_S + 0.05)


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_rows_written_behind_the_service_show_in_its_answers(backend):
    """SQL that bypasses the change log (an operator's edit, another
    service) is seen after the comparison period: a new host, an inventory
    emptied, a trait and an aggregate added, and a restore that takes
    rows back out."""
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db):
        kept = _host(app, "kept")
        emptied = _host(app, "emptied")
        assert _candidates(app, "resources=VCPU:1") == {kept, emptied}
        backup = dump(db.engine)
        with db.engine.begin() as conn:
            ids = dict(
                conn.execute(sa.text("SELECT uuid, id FROM resource_providers")).all()
            )
            conn.execute(
                sa.text("DELETE FROM inventories WHERE resource_provider_id = :rp"),
                {"rp": ids[emptied]},
            )
            new = str(uuid.uuid4())
            conn.execute(
                sa.text(
                    "INSERT INTO resource_providers (uuid, name, generation)"
                    " VALUES (:uuid, 'by-sql', 0)"
                ),
                {"uuid": new},
            )
            conn.execute(
                sa.text(
                    "UPDATE resource_providers SET root_provider_id = id"
                    " WHERE uuid = :uuid"
                ),
                {"uuid": new},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO inventories (resource_provider_id,"
                    " resource_class_id, total, reserved, min_unit, max_unit,"
                    " step_size, allocation_ratio) SELECT id, 0, 4, 0, 1, 4, 1,"
                    " 1.5 FROM resource_providers WHERE uuid = :uuid"
                ),
                {"uuid": new},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO resource_provider_traits (resource_provider_id,"
                    " trait_id) SELECT :rp, id FROM traits"
                    " WHERE name = 'HW_CPU_X86_AVX2'"
                ),
                {"rp": ids[kept]},
            )
        _past_the_bound()
        assert _candidates(app, "resources=VCPU:1") == {kept, new}
        assert _candidates(app, "resources=VCPU:1&required=HW_CPU_X86_AVX2") == {kept}
        listed = _call(app, "/resource_providers").json()["resource_providers"]
        assert {p["uuid"] for p in listed} == {kept, emptied, new}

        restore(db.engine, backup)
        _past_the_bound()
        assert _candidates(app, "resources=VCPU:1") == {kept, emptied}
        assert _candidates(app, "resources=VCPU:1&required=HW_CPU_X86_AVX2") == set()
        listed = _call(app, "/resource_providers").json()["resource_providers"]
        assert {p["uuid"] for p in listed} == {kept, emptied}


def dump(engine):
    """Every row of every table, as a logical backup holds them."""
    with engine.connect() as conn:
        return {
            table: [dict(row) for row in conn.execute(table.select()).mappings()]
            for table in tables.metadata.sorted_tables
        }


def restore(engine, backup):
    """The backup's rows back in place of the current ones, in one
    transaction (the service's counters go back too)."""
    with engine.begin() as conn:
        if conn.dialect.name == "mysql":
            # As a mysqldump file does: VCPU's id 0 is kept as it is.
            conn.exec_driver_sql(
                "SET FOREIGN_KEY_CHECKS = 0, SESSION sql_mode ="
                " CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')"
            )
        for table in reversed(list(backup)):
            conn.execute(table.delete())
        # The change counts and log last, as they were: the rows restored
        # fire the triggers, which a restore must not leave behind (a
        # dump's restore creates a table's triggers after its rows).
        counted = (tables.catalog_changes, tables.catalog_log)
        for table, rows in sorted(backup.items(), key=lambda kv: kv[0] in counted):
            if table in counted:
                conn.execute(table.delete())
            if rows:
                conn.execute(table.insert(), rows)


def test_a_refused_claim_has_the_next_search_compare_first():
    """A claim refused for lack of room makes the next search compare the
    catalog with the database at once, without waiting for the period."""
    with fixtures.app("sqlite") as (app, db):
        host = _host(app, "host", vcpu=2)
        assert _candidates(app, "resources=VCPU:1") == {host}
        with db.engine.begin() as conn:
            conn.execute(sa.text("UPDATE inventories SET total = 1"))
        claim = _call(
            app,
            "/allocations/%s" % uuid.uuid4(),
            "PUT",
            {
                "allocations": {host: {"resources": {"VCPU": 2}}},
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
        )
        assert claim.status == 409
        # The period has not passed (the claim's search just compared).
        assert _candidates(app, "resources=VCPU:2") == set()


def _fresh_mysql_schema(url):
    """Our schema on a fresh MySQL database, without the standard classes
    (as the reference's `db sync` leaves it)."""
    from placement.db import api as db_api
    from placement.db import schema

    conf = fixtures.configure()
    engine = db_api.create_engine(url, conf)
    schema.upgrade(engine)
    return db_api.Database(engine, conf)


def _class_ids(db):
    with db.engine.connect() as conn:
        return dict(
            conn.execute(sa.text("SELECT name, id FROM resource_classes")).all()
        )


def test_standard_class_ids_are_the_reference_s_on_mysql():
    """VCPU 0, MEMORY_MB 1 and so on, even when four processes add them at
    once to an empty table (MySQL turns an explicit 0 into the next
    auto-increment id unless told not to)."""
    fixtures.require_backend("mysql")
    with fixtures.database_url("mysql") as url:
        db = _fresh_mysql_schema(url)
        try:
            outcomes = helpers.run_together(
                lambda _: standard_names.sync_standard_names(db), 4
            )
            assert outcomes == [None] * 4
            expected = {n: i for i, n in enumerate(os_resource_classes.STANDARDS)}
            assert _class_ids(db) == expected
            assert standard_names.wrong_class_ids(db) == []
            # The session's sql_mode is back to the service's.
            with db.engine.connect() as conn:
                mode = conn.exec_driver_sql("SELECT @@SESSION.sql_mode").scalar()
            assert "NO_AUTO_VALUE_ON_ZERO" not in mode
        finally:
            db.engine.dispose()


def test_upgrade_check_reports_wrong_standard_class_ids(tmp_path):
    """What an earlier release left on MySQL (VCPU at 1, MEMORY_MB
    missing) fails `placement-status upgrade check`, naming the repair."""
    url = "sqlite:///%s/placement.sqlite" % tmp_path
    assert (
        helpers.run(
            [helpers.script("placement-manage"), "db", "sync"],
            {"OS_PLACEMENT_DATABASE__CONNECTION": url},
        ).returncode
        == 0
    )
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        # db sync added the standard classes at their ids: take them back.
        conn.execute(sa.text("DELETE FROM resource_classes"))
        conn.execute(
            sa.text("INSERT INTO resource_classes (id, name) VALUES (1, 'VCPU')")
        )
    engine.dispose()
    result = helpers.run(
        [helpers.script("placement-status"), "upgrade", "check", "--json"],
        {"OS_PLACEMENT_DATABASE__CONNECTION": url},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    (check,) = [
        c
        for c in json.loads(result.stdout)["checks"]
        if c["check"] == "Standard Resource Class IDs"
    ]
    assert check["result"] == 2
    assert "VCPU has id 1, not 0" in check["details"]
    assert "MEMORY_MB is missing: its id 1 is held by VCPU" in check["details"]
    assert '"Standard resource class ids" in doc/operations.md' in check["details"]


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
@pytest.mark.parametrize("table", ["allocations", "inventories", "catalog_log"])
def test_healthcheck_fails_when_a_table_is_dropped(backend, table):
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db):
        assert wsgi_client.call(app, "/healthcheck").status == 200
        with db.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE %s" % table)
        resp = wsgi_client.call(app, "/healthcheck", accept="application/json")
        assert resp.status == 503
        assert resp.json()["reasons"] == ["database schema missing"]


def test_deadlock_on_every_try_is_a_409_and_counted():
    """A lock held by another session past MySQL's lock wait (1 s here)
    on every try of a claim: 409 placement.concurrent_update after the
    retries, counted in /metrics; nothing is written."""
    fixtures.require_backend("mysql")
    with fixtures.database_url("mysql") as base:
        url = base + "&init_command=SET+SESSION+innodb_lock_wait_timeout%3D1"
        db = _fresh_mysql_schema(url)
        try:
            standard_names.sync_standard_names(db)
            from placement import deploy

            app = deploy.build_app(fixtures.configure(), db=db, sync_schema=False)
            host = _host(app, "host")
            before = _metric(app, "placement_deadlock_retries_exhausted_total")
            holder = sa.create_engine(base)
            with holder.connect() as conn, conn.begin():
                conn.execute(
                    sa.text(
                        "SELECT id FROM resource_providers WHERE uuid = :u FOR UPDATE"
                    ),
                    {"u": host},
                )
                consumer = str(uuid.uuid4())
                claim = _call(
                    app,
                    "/allocations/%s" % consumer,
                    "PUT",
                    {
                        "allocations": {host: {"resources": {"VCPU": 1}}},
                        "project_id": "p",
                        "user_id": "u",
                        "consumer_generation": None,
                        "consumer_type": "INSTANCE",
                    },
                )
            holder.dispose()
            assert claim.status == 409, claim.body
            assert claim.json()["errors"][0]["code"] == "placement.concurrent_update"
            after = _metric(app, "placement_deadlock_retries_exhausted_total")
            assert after == before + 1
            usage = _call(app, "/resource_providers/%s/usages" % host)
            assert usage.json()["usages"] == {"VCPU": 0}
        finally:
            db.engine.dispose()


def _metric(app, name):
    text = wsgi_client.call(app, "/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0
