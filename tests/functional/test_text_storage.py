"""Text a MySQL database created with the 3-byte ``utf8`` character set
cannot store: connections are utf8mb4 whatever the URL says, a value a
legacy utf8 table cannot hold is a 400 (never a 500 quoting the INSERT),
and ``placement-status upgrade check`` warns about such tables."""

import contextlib
import uuid

import httpx
import pytest
import sqlalchemy as sa

from placement import deploy
from placement.db import api as db_api
from placement.db import schema
from placement.objects import standard_names
from tests import fixtures
from tests import helpers

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
EMOJI_NAME = "rack-\U0001f680-\u00e9"


@pytest.fixture
def utf8_url():
    """A fresh database created as ``CHARACTER SET utf8``, its URL asking
    for ``charset=utf8`` like many existing deployments, schema at head."""
    fixtures.require_backend("mysql")
    name = "placement_test_%s" % uuid.uuid4().hex[:16]
    admin = sa.create_engine(fixtures.MYSQL_URL + "/")
    with admin.connect() as conn:
        conn.exec_driver_sql(
            "CREATE DATABASE %s CHARACTER SET utf8 COLLATE utf8_bin" % name
        )
    url = "%s/%s?charset=utf8" % (fixtures.MYSQL_URL, name)
    try:
        engine = db_api.create_engine(url)
        schema.upgrade(engine)
        engine.dispose()
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql("DROP DATABASE IF EXISTS %s" % name)
        admin.dispose()


def _to_utf8(url, *table_names):
    """Convert tables to 3-byte utf8 as an old deployment left them."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for table in table_names:
            conn.exec_driver_sql(
                "ALTER TABLE %s CONVERT TO CHARACTER SET utf8 COLLATE utf8_bin" % table
            )
    engine.dispose()


@contextlib.contextmanager
def _client(url):
    conf = fixtures.configure()
    db = db_api.Database(db_api.create_engine(url, conf), conf)
    try:
        standard_names.sync_standard_names(db)
        app = deploy.build_app(conf, db=db, sync_schema=False)
        yield httpx.Client(
            transport=httpx.WSGITransport(app=app), base_url="http://localhost"
        )
    finally:
        db.engine.dispose()


def test_four_byte_text_stored_despite_utf8_url(utf8_url):
    with _client(utf8_url) as client:
        rp = str(uuid.uuid4())
        resp = client.post(
            "/resource_providers", headers=ADMIN, json={"name": EMOJI_NAME, "uuid": rp}
        )
        assert resp.status_code == 200, resp.text
        got = client.get("/resource_providers/%s" % rp, headers=ADMIN)
        assert got.json()["name"] == EMOJI_NAME
        listed = client.get(
            "/resource_providers", params={"name": EMOJI_NAME}, headers=ADMIN
        )
        assert [p["uuid"] for p in listed.json()["resource_providers"]] == [rp]


def test_text_a_legacy_utf8_table_cannot_hold_is_400(utf8_url):
    _to_utf8(utf8_url, "resource_providers")
    with _client(utf8_url) as client:
        resp = client.post(
            "/resource_providers", headers=ADMIN, json={"name": EMOJI_NAME}
        )
        assert resp.status_code == 400, resp.text
        (error,) = resp.json()["errors"]
        assert "cannot store or compare" in error["detail"]
        assert "INSERT" not in resp.text
        # A lookup by such a name cannot be compared either: 400 too.
        listed = client.get(
            "/resource_providers", params={"name": EMOJI_NAME}, headers=ADMIN
        )
        assert listed.status_code == 400, listed.text
        assert "cannot store or compare" in listed.json()["errors"][0]["detail"]
        assert "SELECT" not in listed.text
        # Text the table can hold still goes in.
        resp = client.post(
            "/resource_providers", headers=ADMIN, json={"name": "caf\u00e9"}
        )
        assert resp.status_code == 200, resp.text


def test_status_warns_about_utf8_tables(utf8_url):
    env = {"OS_PLACEMENT_DATABASE__CONNECTION": utf8_url}
    check = [helpers.script("placement-status"), "upgrade", "check"]
    result = helpers.run(check, env)
    assert result.returncode == 0, result.stdout + result.stderr
    _to_utf8(utf8_url, "resource_providers", "traits")
    result = helpers.run(check, env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Result: Warning" in result.stdout
    assert "utf8mb4" in result.stdout
    assert "resource_providers" in result.stdout and "traits" in result.stdout
