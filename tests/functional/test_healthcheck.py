"""``/healthcheck`` reports whether the app's database answers."""

import httpx
import pytest
import sqlalchemy as sa
from oslo_middleware.healthcheck import opts as healthcheck_opts

from placement.api import app as api_app
from placement.db import api as db_api
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
    return api_app.build_pipeline(conf, db_api.Database(engine))


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
