"""Real databases for tests: a fresh SQLite file, or a fresh database on a
MySQL or PostgreSQL server.

MySQL-backed tests use the server at ``PLACEMENT_TEST_MYSQL_URL`` (default
``mysql+pymysql://root@127.0.0.1:3306``); the ``mysqldb`` backend is the
same server through mysqlclient (``mysql+mysqldb://``), for the tests of
what differs between the drivers. PostgreSQL-backed ones the server
at ``PLACEMENT_TEST_POSTGRESQL_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432``). When a server is
unreachable its tests are skipped, unless ``PLACEMENT_REQUIRE_MYSQL=1`` (set
by the test command), which turns that into a failure for both. The
``galera`` backend is a cluster whose nodes are listed in
``PLACEMENT_TEST_GALERA_URLS``; only the gabbi files and the Galera tests
use it.
"""

import contextlib
import importlib.util
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
from placement.db import triggers as db_triggers
from placement.objects import standard_names
from tests import galera
from tests import helpers
from tests import round_trips

MYSQL_URL = os.environ.get(
    "PLACEMENT_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306"
)
POSTGRESQL_URL = os.environ.get(
    "PLACEMENT_TEST_POSTGRESQL_URL", "postgresql+psycopg://postgres@127.0.0.1:5432"
)
# A Galera cluster: its nodes' SQL URLs (space separated), or the directory
# where tools/run-tests is starting one (tests/galera.py).
GALERA_URLS = os.environ.get("PLACEMENT_TEST_GALERA_URLS", "").split()
GALERA_DIR = os.environ.get("PLACEMENT_TEST_GALERA_DIR")
MYSQLDB_URL = (
    sa.engine.make_url(MYSQL_URL)
    .set(drivername="mysql+mysqldb")
    .render_as_string(hide_password=False)
)
BACKENDS = ("sqlite", "mysql", "postgresql")
# The backends and the second MySQL driver: for tests of driver-specific
# code (errors, held statements, descriptions, plain reads).
EVERY_DRIVER = BACKENDS + ("mysqldb",)
# Server URL (no database) and the database a client connects to first.
SERVERS = {
    "mysql": (MYSQL_URL, ""),
    "mysqldb": (MYSQLDB_URL, ""),
    "postgresql": (POSTGRESQL_URL, "postgres"),
}
if GALERA_URLS:
    SERVERS["galera"] = (GALERA_URLS[0], "")
_AVAILABLE = {}
_CONF = None  # the tests' configuration, made by configure()


def _admin(backend):
    if backend == "galera":
        galera_urls()  # the cluster may still be starting
    server, first = SERVERS[backend]
    # CREATE/DROP DATABASE cannot run inside a PostgreSQL transaction.
    return sa.create_engine(
        "%s/%s" % (server, first),
        connect_args={"connect_timeout": 3},
        isolation_level="AUTOCOMMIT",
    )


def server_available(backend):
    if backend not in _AVAILABLE:
        try:
            engine = _admin(backend)
            with engine.connect():
                pass
            engine.dispose()
            _AVAILABLE[backend] = True
        except Exception:
            _AVAILABLE[backend] = False
    return _AVAILABLE[backend]


def galera_urls():
    """The Galera nodes' URLs, waiting for the cluster if it is starting."""
    if not GALERA_URLS and GALERA_DIR:
        GALERA_URLS.extend(galera.wait_for(GALERA_DIR))
        SERVERS["galera"] = (GALERA_URLS[0], "")
    return GALERA_URLS


def require_backend(backend):
    if backend == "mysqldb" and importlib.util.find_spec("MySQLdb") is None:
        # As a browser test without Chromium: tools/ensure-venv builds
        # mysqlclient only where MariaDB's client headers are installed.
        pytest.skip("mysqlclient is not installed (no libmariadb-dev to build it)")
    if backend == "galera" and not galera_urls():
        if os.environ.get("PLACEMENT_REQUIRE_MYSQL") == "1":
            pytest.fail(
                "Galera required (PLACEMENT_REQUIRE_MYSQL=1) but neither "
                "PLACEMENT_TEST_GALERA_URLS nor PLACEMENT_TEST_GALERA_DIR is set"
            )
        pytest.skip("no Galera cluster (PLACEMENT_TEST_GALERA_URLS)")
    if backend != "sqlite" and not server_available(backend):
        url = SERVERS[backend][0]
        if os.environ.get("PLACEMENT_REQUIRE_MYSQL") == "1":
            pytest.fail(
                "%s required (PLACEMENT_REQUIRE_MYSQL=1) but %s is unreachable"
                % (backend, url)
            )
        pytest.skip("%s server not reachable at %s" % (backend, url))


@contextlib.contextmanager
def database_url(backend, node=-1):
    """Yield the URL of a fresh, empty database; remove it afterwards.

    On Galera the database is created through node 1 and the URL points at
    ``node`` (an index into the nodes, the last by default), so the schema
    reaches it by replication."""
    if backend == "sqlite":
        tmp = tempfile.mkdtemp(prefix="placement-test-")
        try:
            yield "sqlite:///%s/placement.sqlite" % tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    name = "placement_test_%s" % uuid.uuid4().hex[:16]
    admin = _admin(backend)
    if backend in ("mysql", "mysqldb", "galera"):
        create = "CREATE DATABASE %s CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        drop = "DROP DATABASE IF EXISTS %s"
        server = galera_urls()[node] if backend == "galera" else SERVERS[backend][0]
        url = "%s/%s?charset=utf8mb4" % (server, name)
    else:
        create = "CREATE DATABASE %s"
        # A server still holding a connection (a killed test server) must
        # not keep the database alive.
        drop = "DROP DATABASE IF EXISTS %s WITH (FORCE)"
        url = "%s/%s" % (POSTGRESQL_URL, name)
    with admin.connect() as conn:
        conn.exec_driver_sql(create % name)
    if backend == "galera":
        # Every node: tests connect to others than ``node`` too.
        for server in galera_urls():
            _wait_for_database(server, name)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(drop % name)
        admin.dispose()


def _wait_for_database(server, name):
    """Return once the Galera node at ``server`` has applied the CREATE
    DATABASE of ``name`` made through another node: the originating node
    answers before the others have applied a DDL statement, so a connection
    to the new database there can fail with "Unknown database"."""
    engine = sa.create_engine(server, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            # A causal read: waits until this node has applied every write
            # set the cluster had committed when the statement started.
            conn.exec_driver_sql("SET SESSION wsrep_sync_wait = 1")
            found = conn.exec_driver_sql(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                (name,),
            ).scalar()
    finally:
        engine.dispose()
    if found is None:
        raise RuntimeError("database %s not replicated to %s" % (name, server))


@contextlib.contextmanager
def database(backend, migrate=False, triggers=True):
    """A ready Database (schema and standard names) on a fresh database;
    without the change-log triggers (``triggers=False``): the fallback."""
    with database_url(backend) as url:
        conf = configure()
        engine = db_api.create_engine(url, conf)
        db = db_api.Database(engine, conf)
        try:
            if migrate:
                schema.upgrade(engine)
            else:
                schema.create_at_head(engine)
            if not triggers:
                drop_triggers(engine)
            standard_names.sync_standard_names(db)
            yield db
        finally:
            engine.dispose()


def db_fixture(backends):
    """A ``db`` fixture: a ready Database on a fresh database of each of
    ``backends``. A module of driver-specific tests sets its own
    (``db = fixtures.db_fixture(fixtures.EVERY_DRIVER)``)."""

    @pytest.fixture(params=backends, name="db")
    def _db(request):
        require_backend(request.param)
        with database(request.param) as db:
            yield db

    return _db


def configure():
    """The configuration of in-process tests: empty, parsed once, noauth2
    by default (``overrides`` changes it for a while)."""
    global _CONF
    if _CONF is None:
        conf = placement_conf.command_conf()
        conf.set_default("auth_strategy", "noauth2", group="api")
        placement_conf.parse_args(conf, [], default_config_files=[])
        _CONF = conf
    return _CONF


@contextlib.contextmanager
def overrides(**options):
    """The test configuration with ``options`` ("group.option": value)
    set while the block runs, and back to ``configure()``'s afterwards."""
    conf = configure()
    for key, value in options.items():
        group, _, name = key.rpartition(".")
        conf.set_override(name, value, group=group or None)
    try:
        yield conf
    finally:
        for key in options:
            group, _, name = key.rpartition(".")
            conf.clear_override(name, group=group or None)
            # oslo.config keeps reporting the cleared override as the
            # option's location; the candidate handler reads it.
            conf._get_opt_info(name, group or None).pop("location", None)


def drop_triggers(engine):
    """The database without the change-log triggers: the catalog follows
    other writers by the periodic comparison (the fallback)."""
    with engine.begin() as conn:
        db_triggers.drop(conn)


@contextlib.contextmanager
def app(backend, triggers=True):
    """A full WSGI pipeline over a fresh database (``triggers``: see
    ``database``)."""
    conf = configure()
    with database(backend, triggers=triggers) as db:
        yield deploy.build_app(conf, db=db, sync_schema=False), db


@contextlib.contextmanager
def counted_client(backend, headers, monkeypatch):
    """(an httpx client of ``app(backend)``, ``read(path, headers=None)``: a GET's
    (response, its statements, its round trips or None on SQLite), its
    Database), warm as a server after its first requests: each pool's
    connection made (its session set up), the catalog read and compared
    once. So a request's statements and round trips are its own."""
    with app(backend) as (the_app, db):
        client = helpers.wsgi_client(the_app, headers)
        seen = []
        sa.event.listen(
            db.engine, "before_cursor_execute", lambda *args: seen.append(args[2])
        )
        assert client.get("/resource_classes").is_success
        assert client.get("/resource_providers").is_success
        for _ in range(2):
            client.get("/resource_providers/%s/allocations" % uuid.uuid4())

        def read(path, headers=None):
            seen.clear()
            with round_trips.counted(db, monkeypatch) as trips:
                resp = client.get(path, headers=headers)
            return resp, list(seen), trips

        yield client, read, db
