"""``/healthcheck`` reports whether the app's database answers."""

import httpx
import pytest
import sqlalchemy as sa
from oslo_middleware.healthcheck import opts as healthcheck_opts

from placement.api import app as api_app
from placement.db import api as db_api
from placement.db import schema
from placement.db import tables
from tests import fixtures


def _client(wsgi_app):
    return httpx.Client(
        transport=httpx.WSGITransport(app=wsgi_app),
        base_url="http://localhost",
        headers={"accept": "application/json"},
    )


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_reachable_database_is_healthy(backend):
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, _db):
        resp = _client(app).get("/healthcheck")
    assert resp.status_code == 200
    assert resp.json() == {"detailed": False, "reasons": ["database reachable"]}


def _unreachable_app(tmp_path):
    conf = fixtures.configure()
    # A SQLite file in a directory that does not exist cannot be opened.
    engine = sa.create_engine("sqlite:///%s/missing/placement.sqlite" % tmp_path)
    return api_app.build_pipeline(conf, db_api.Database(engine, conf))


def test_unreachable_database_is_unhealthy(tmp_path):
    client = _client(_unreachable_app(tmp_path))
    resp = client.get("/healthcheck")
    assert resp.status_code == 503
    assert resp.json() == {"detailed": False, "reasons": ["database unreachable"]}
    assert client.head("/healthcheck").status_code == 503


def test_detailed_shows_the_database_error(tmp_path):
    conf = fixtures.configure()
    conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group="healthcheck")
    with fixtures.overrides(**{"healthcheck.detailed": True}):
        resp = _client(_unreachable_app(tmp_path)).get("/healthcheck")
    assert resp.status_code == 503
    reason = resp.json()["reasons"][0]
    assert reason["reason"] == "database unreachable"
    assert "unable to open database file" in reason["details"]


def _drop_schema(backend, db):
    """Take the schema away under the running app: the whole database on
    MySQL and PostgreSQL, every table on SQLite."""
    if backend == "sqlite":
        tables.metadata.drop_all(db.engine)
        with db.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE alembic_version")
        return
    name = db.engine.url.database
    drop = "DROP DATABASE %s" + (" WITH (FORCE)" if backend == "postgresql" else "")
    admin = fixtures._admin(backend)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(drop % name)
    finally:
        admin.dispose()


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_dropped_schema_is_unhealthy_and_every_call_503(backend):
    """After the database (or its tables) is dropped under a running
    server, health says so and API calls answer JSON 503s with
    Retry-After, never 500s."""
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db):
        client = _client(app)
        assert client.get("/healthcheck").status_code == 200
        headers = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
        assert client.get("/resource_providers", headers=headers).status_code == 200
        _drop_schema(backend, db)
        resp = client.get("/healthcheck")
        assert resp.status_code == 503
        (reason,) = resp.json()["reasons"]
        assert reason in ("database schema missing", "database unreachable")
        if backend != "postgresql":
            # PostgreSQL ends the connections to a database it drops.
            assert reason == "database schema missing"
        for method, path, body in (
            ("GET", "/resource_providers", None),
            ("GET", "/allocation_candidates?resources=VCPU:1", None),
            ("GET", "/traits", None),
            ("POST", "/resource_providers", {"name": "rp"}),
            ("PUT", "/traits/CUSTOM_X", None),
        ):
            resp = client.request(method, path, headers=headers, json=body)
            assert resp.status_code == 503, (path, resp.text)
            assert int(resp.headers["retry-after"]) > 0
            (error,) = resp.json()["errors"]
            assert error["status"] == 503


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_schema_at_another_revision_is_unhealthy(backend):
    fixtures.require_backend(backend)
    conf = fixtures.configure()
    conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group="healthcheck")
    with fixtures.app(backend) as (app, db):
        with db.engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE alembic_version SET version_num = 'b4ed3b0b4bbd'"
            )
        resp = _client(app).get("/healthcheck")
        assert resp.status_code == 503
        assert resp.json()["reasons"] == ["database schema at another revision"]
    with fixtures.overrides(**{"healthcheck.detailed": True}):
        with fixtures.app(backend) as (app, db):
            with db.engine.begin() as conn:
                conn.exec_driver_sql("DELETE FROM alembic_version")
            resp = _client(app).get("/healthcheck")
    assert resp.status_code == 503
    (reason,) = resp.json()["reasons"]
    assert reason["reason"] == "database schema at another revision"
    assert "this placement needs %s" % schema.HEAD in reason["details"]
