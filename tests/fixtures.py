"""Real databases for tests: a fresh SQLite file or a fresh MySQL database.

MySQL-backed tests use the server at ``PLACEMENT_TEST_MYSQL_URL`` (default
``mysql+pymysql://root@127.0.0.1:3306``). When it is unreachable they are
skipped, unless ``PLACEMENT_REQUIRE_MYSQL=1`` (set by the test command),
which turns that into a failure.
"""
import contextlib
import os
import shutil
import tempfile
import uuid

import pytest
import sqlalchemy as sa

from placement import conf as placement_conf
from placement import deploy
from placement.db import api as db_api
from placement.db import schema
from placement.db import tables

MYSQL_URL = os.environ.get("PLACEMENT_TEST_MYSQL_URL",
                           "mysql+pymysql://root@127.0.0.1:3306")
BACKENDS = ("sqlite", "mysql")
_MYSQL_OK = None
_CONFIGURED = False


def mysql_available():
    global _MYSQL_OK
    if _MYSQL_OK is None:
        try:
            engine = sa.create_engine(MYSQL_URL + "/", connect_args={
                "connect_timeout": 3})
            with engine.connect():
                pass
            engine.dispose()
            _MYSQL_OK = True
        except Exception:
            _MYSQL_OK = False
    return _MYSQL_OK


def require_backend(backend):
    if backend == "mysql" and not mysql_available():
        if os.environ.get("PLACEMENT_REQUIRE_MYSQL") == "1":
            pytest.fail("MySQL required (PLACEMENT_REQUIRE_MYSQL=1) but "
                        "%s is unreachable" % MYSQL_URL)
        pytest.skip("MySQL server not reachable at %s" % MYSQL_URL)


@contextlib.contextmanager
def database_url(backend):
    """Yield the URL of a fresh, empty database; remove it afterwards."""
    if backend == "sqlite":
        tmp = tempfile.mkdtemp(prefix="placement-test-")
        try:
            yield "sqlite:///%s/placement.sqlite" % tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    name = "placement_test_%s" % uuid.uuid4().hex[:16]
    admin = sa.create_engine(MYSQL_URL + "/")
    with admin.connect() as conn:
        conn.exec_driver_sql(
            "CREATE DATABASE %s CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" % name)
    try:
        yield "%s/%s?charset=utf8mb4" % (MYSQL_URL, name)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql("DROP DATABASE IF EXISTS %s" % name)
        admin.dispose()


@contextlib.contextmanager
def database(backend, migrate=False):
    """A ready Database (schema and standard names) on a fresh database."""
    with database_url(backend) as url:
        engine = db_api.create_engine(url, placement_conf.CONF)
        db = db_api.Database(engine)
        try:
            if migrate:
                schema.upgrade(engine)
            else:
                tables.metadata.create_all(engine)
            schema.sync_standard_names(db)
            yield db
        finally:
            engine.dispose()


def configure(**overrides):
    """Parse an empty configuration for in-process tests (noauth2)."""
    global _CONFIGURED
    conf = placement_conf.CONF
    if not _CONFIGURED:
        placement_conf.parse_args([], default_config_files=[])
        _CONFIGURED = True
    conf.set_override("auth_strategy", "noauth2", group="api")
    for key, value in overrides.items():
        group, _, name = key.rpartition(".")
        conf.set_override(name, value, group=group or None)
    return conf


@contextlib.contextmanager
def app(backend):
    """A full WSGI pipeline over a fresh database."""
    conf = configure()
    with database(backend) as db:
        yield deploy.build_app(conf, db=db, sync_schema=False), db
