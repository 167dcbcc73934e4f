"""What the service remembers of the database (the ids of projects,
users, consumer types, aggregates, standard classes and traits) after a
restore of a backup taken earlier, which takes those rows away and hands
their ids to the next rows inserted: every kind of write answers 2xx and
writes what it was asked ("Remembered ids" in doc/architecture.md). With
the catalog on, its comparison may see the restore first and forget;
with it off, only the statement that finds a remembered row gone can."""

import uuid

import pytest
import requests
import sqlalchemy as sa

from placement.db import tables
from tests import fixtures
from tests import wsgi_client
from tests.functional import backups
from tests.functional import live_server

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}


def _call(app, path, method="GET", body=None, status=None):
    resp = wsgi_client.call(app, path, method=method, body=body, **HEADERS)
    if status is not None:
        assert resp.status == status, (method, path, resp.status, resp.body)
    return resp


def _generation(app, rp):
    return _call(app, "/resource_providers/%s" % rp, status=200).json()["generation"]


def _host(app):
    """A new provider "host" with 8 VCPU: its uuid."""
    rp = str(uuid.uuid4())
    _call(app, "/resource_providers", "POST", {"name": "host", "uuid": rp}, 200)
    _call(
        app,
        "/resource_providers/%s/inventories" % rp,
        "PUT",
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
        status=200,
    )
    return rp


def _claim_body(rp, names):
    """A new consumer's claim of one VCPU of ``rp``, by ``names``."""
    return {
        "allocations": {rp: {"resources": {"VCPU": 1}}},
        "project_id": names["project"],
        "user_id": names["user"],
        "consumer_generation": None,
        "consumer_type": names["type"],
    }


def _claim(app, rp, consumer, names, status=204):
    _call(
        app, "/allocations/%s" % consumer, "PUT", _claim_body(rp, names), status=status
    )


def _aggregates(app, rp, aggregates):
    return _call(
        app,
        "/resource_providers/%s/aggregates" % rp,
        "PUT",
        {
            "aggregates": aggregates,
            "resource_provider_generation": _generation(app, rp),
        },
        status=200,
    ).json()["aggregates"]


def _remembered_writes(app, rp, names):
    """Every kind of write that leaves the service remembering ids."""
    _claim(app, rp, str(uuid.uuid4()), names)
    _call(app, "/resource_classes/%s" % names["class"], "PUT", status=201)
    _call(app, "/traits/%s" % names["trait"], "PUT", status=201)
    _call(
        app,
        "/resource_providers/%s/traits" % rp,
        "PUT",
        {
            "traits": [names["trait"], "HW_CPU_X86_AVX2"],
            "resource_provider_generation": _generation(app, rp),
        },
        status=200,
    )
    assert _aggregates(app, rp, [names["aggregate"]]) == [names["aggregate"]]


def _another_writer_takes_the_ids(db):
    """Rows of another writer, inserted after the restore: they take the
    ids the restore freed, which the service remembered for its names."""
    with db.engine.begin() as conn:
        conn.execute(tables.projects.insert(), {"external_id": "someone-else"})
        conn.execute(tables.users.insert(), {"external_id": "someone-else"})
        conn.execute(tables.consumer_types.insert(), {"name": "SOMEONE_ELSE"})
        conn.execute(tables.placement_aggregates.insert(), {"uuid": str(uuid.uuid4())})


@pytest.mark.parametrize("catalog", [True, False], ids=["catalog", "no-catalog"])
@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_every_write_after_a_restore_of_an_earlier_backup(backend, catalog):
    fixtures.require_backend(backend)
    names = {
        "project": "project-" + uuid.uuid4().hex[:8],
        "user": "user-" + uuid.uuid4().hex[:8],
        "type": "TYPE_" + uuid.uuid4().hex[:8].upper(),
        "class": "CUSTOM_C_" + uuid.uuid4().hex[:8].upper(),
        "trait": "CUSTOM_T_" + uuid.uuid4().hex[:8].upper(),
        "aggregate": str(uuid.uuid4()),
    }
    with (
        fixtures.overrides(**{"placement.provider_catalog": catalog}),
        fixtures.app(backend) as (app, db),
    ):
        url = db.engine.url.render_as_string(hide_password=False)
        rp = _host(app)
        backup = backups.dump(url)
        _remembered_writes(app, rp, names)
        backups.restore(url, backup)
        _another_writer_takes_the_ids(db)

        # A claim for the project, user and type the restore took away.
        consumer = str(uuid.uuid4())
        _claim(app, rp, consumer, names)
        got = _call(app, "/allocations/%s" % consumer, status=200).json()
        assert got["allocations"] == {
            rp: {
                "generation": got["allocations"][rp]["generation"],
                "resources": {"VCPU": 1},
            }
        }
        assert (got["project_id"], got["user_id"], got["consumer_type"]) == (
            names["project"],
            names["user"],
            names["type"],
        )
        usages = _call(
            app, "/usages?project_id=%s&user_id=%s" % (names["project"], names["user"])
        ).json()["usages"]
        assert usages == {names["type"]: {"VCPU": 1, "consumer_count": 1}}

        # A custom class, a trait and an aggregate, gone with the restore.
        _call(app, "/resource_classes/%s" % names["class"], "PUT", status=201)
        inventories = {"VCPU": {"total": 8}, names["class"]: {"total": 2}}
        _call(
            app,
            "/resource_providers/%s/inventories" % rp,
            "PUT",
            {
                "resource_provider_generation": _generation(app, rp),
                "inventories": inventories,
            },
            status=200,
        )
        _call(app, "/traits/%s" % names["trait"], "PUT", status=201)
        traits = [names["trait"], "HW_CPU_X86_AVX2"]
        _call(
            app,
            "/resource_providers/%s/traits" % rp,
            "PUT",
            {"traits": traits, "resource_provider_generation": _generation(app, rp)},
            status=200,
        )
        assert _aggregates(app, rp, [names["aggregate"]]) == [names["aggregate"]]

        # What was written is what every read shows.
        read = _call(app, "/resource_providers/%s/inventories" % rp).json()
        assert set(read["inventories"]) == set(inventories)
        read = _call(app, "/resource_providers/%s/traits" % rp).json()
        assert sorted(read["traits"]) == sorted(traits)
        read = _call(app, "/resource_providers/%s/aggregates" % rp).json()
        assert read["aggregates"] == [names["aggregate"]]
        found = _call(
            app,
            "/allocation_candidates?resources=%s:1&required=%s&member_of=%s"
            % (names["class"], names["trait"], names["aggregate"]),
            status=200,
        ).json()
        assert set(found["provider_summaries"]) == {rp}
        with db.engine.connect() as conn:
            # No row refers to one the restore took away.
            dangling = conn.execute(
                sa.text(
                    "SELECT COUNT(*) FROM resource_provider_aggregates"
                    " WHERE aggregate_id NOT IN (SELECT id FROM placement_aggregates)"
                )
            ).scalar()
        assert dangling == 0


def _not_null(backend):
    """The driver's own error for a NULL project id, as each database
    raises it when the project a consumer names is gone."""
    if backend == "mysql":
        import pymysql

        return pymysql.err.IntegrityError(1048, "Column 'project_id' cannot be null")
    if backend == "postgresql":
        import psycopg

        return psycopg.errors.NotNullViolation(
            'null value in column "project_id" of relation "consumers"'
            " violates not-null constraint"
        )
    import sqlite3

    return sqlite3.IntegrityError("NOT NULL constraint failed: consumers.project_id")


@pytest.mark.parametrize("gone", [1, 2], ids=["once", "twice"])
@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_a_row_gone_is_looked_up_again_then_a_409_naming_it(backend, gone):
    """The consumer insert finds its project gone (the driver's error,
    injected): once, the write runs again and succeeds; on the second run
    too, it is a 409 that names the project, and nothing is written."""
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db):
        rp = _host(app)
        injected = []

        def refuse(conn, cursor, statement, *args):
            if statement.startswith("INSERT INTO consumers") and len(injected) < gone:
                injected.append(statement)
                raise _not_null(backend)

        sa.event.listen(db.engine, "before_cursor_execute", refuse)
        names = {"project": "p", "user": "u", "type": "INSTANCE"}
        consumer = str(uuid.uuid4())
        try:
            resp = _call(
                app,
                "/allocations/%s" % consumer,
                "PUT",
                _claim_body(rp, names),
            )
        finally:
            sa.event.remove(db.engine, "before_cursor_execute", refuse)
        assert len(injected) == gone
        got = _call(app, "/allocations/%s" % consumer, status=200).json()
        if gone == 1:
            assert resp.status == 204, resp.body
            assert got["project_id"] == "p"
            assert got["allocations"][rp]["resources"] == {"VCPU": 1}
            return
        assert resp.status == 409, resp.body
        (error,) = resp.json()["errors"]
        assert error["code"] == "placement.concurrent_update"
        assert "removed or renumbered by another writer" in error["detail"]
        assert "project_id)" in error["detail"]
        assert got["allocations"] == {}
        usages = _call(app, "/resource_providers/%s/usages" % rp).json()["usages"]
        assert usages == {"VCPU": 0}


@pytest.mark.slow
@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_claims_after_a_restore_under_placement_api(backend, tmp_path):
    """Issue 46's run, black box: ``placement-api`` with two workers, a
    backup taken while it serves, claims for new projects and users, the
    backup restored (and another writer taking the freed ids), then
    claims for the same projects and users on both workers: every one
    answers 204 and is recorded under its own project and user."""
    fixtures.require_backend(backend)
    headers = {"x-auth-token": "admin", "openstack-api-version": "placement 1.38"}
    projects = ["project-%d" % i for i in range(3)]
    with fixtures.database(backend) as db:
        url = db.engine.url.render_as_string(hide_password=False)
        with live_server.placement_api(
            str(tmp_path), "--workers", "2", OS_PLACEMENT_DATABASE__CONNECTION=url
        ) as base:
            session = requests.Session()
            rp = session.post(
                base + "/resource_providers",
                json={"name": "host"},
                headers=headers,
                timeout=30,
            ).json()["uuid"]
            resp = session.put(
                base + "/resource_providers/%s/inventories" % rp,
                json={
                    "resource_provider_generation": 0,
                    "inventories": {"VCPU": {"total": 1000}},
                },
                headers=headers,
                timeout=30,
            )
            assert resp.status_code == 200, resp.text

            def claims(rounds):
                made = {}
                for _ in range(rounds):
                    for project in projects:
                        consumer = str(uuid.uuid4())
                        # A new connection each: both workers claim.
                        resp = requests.put(
                            base + "/allocations/%s" % consumer,
                            json={
                                "allocations": {rp: {"resources": {"VCPU": 1}}},
                                "project_id": project,
                                "user_id": "user-of-" + project,
                                "consumer_generation": None,
                                "consumer_type": "INSTANCE",
                            },
                            headers=dict(headers, connection="close"),
                            timeout=30,
                        )
                        assert resp.status_code == 204, resp.text
                        made[consumer] = project
                return made

            backup = backups.dump(url)
            claims(4)
            backups.restore(url, backup)
            _another_writer_takes_the_ids(db)
            for consumer, project in claims(4).items():
                got = session.get(
                    base + "/allocations/%s" % consumer, headers=headers, timeout=30
                ).json()
                assert (got["project_id"], got["user_id"]) == (
                    project,
                    "user-of-" + project,
                )
