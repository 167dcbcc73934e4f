"""A database that turns read-only under the running service, for real on
each backend (doc/operations.md "Database faults"): a MariaDB of the
test's own with ``SET GLOBAL read_only = 1`` and the service connected as
an ordinary user (no SUPER, as deployed: what a Galera node set read-only
or a primary demoted by a fail-over looks like), a PostgreSQL database
with ``default_transaction_read_only``, a SQLite file the process cannot
write. Every write answers a 503 saying the database refuses writes, with
Retry-After; nothing is written; every read answers as before; the health
check and ``placement-status upgrade check`` name it; once writable
again, writes go through."""

import re
import subprocess
import time
import uuid

import httpx
import pytest
import requests
import sqlalchemy as sa

from placement import deploy
from placement import startup
from placement.db import api as db_api
from placement.db import schema
from placement.objects import standard_names
from placement.objects.catalog import refresh
from tests import fixtures
from tests import helpers
from tests import private_mariadb
from tests.functional import live_server
from tests.functional import test_cmd

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
RP, RP2 = str(uuid.uuid4()), str(uuid.uuid4())
PROJECT, USER = str(uuid.uuid4()), str(uuid.uuid4())
C1 = str(uuid.uuid4())
READ_ONLY_REASON = "database read-only: writes are refused"


class MariaDBReadOnly:
    """A private MariaDB (SET GLOBAL would reach every other test on the
    shared server), the service's user without SUPER."""

    def __enter__(self):
        private_mariadb.require()
        self.server = private_mariadb.PrivateMariaDB()
        self.server.start()
        for sql in (
            "CREATE DATABASE placement CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "CREATE USER 'placement'@'127.0.0.1'",
            "GRANT ALL ON placement.* TO 'placement'@'127.0.0.1'",
        ):
            self.server.execute(sql)
        self.url = (
            "mysql+pymysql://placement@127.0.0.1:%d/placement?charset=utf8mb4"
            % self.server.port
        )
        return self

    def read_only(self, db, on):
        # Counts at once, for the connections the service holds too.
        self.server.execute("SET GLOBAL read_only = %d" % on)

    def end_sessions(self):
        pass  # they see the change as it is made

    def __exit__(self, *exc):
        self.server.close()


class PostgreSQLReadOnly:
    """A database of the shared server whose sessions default to read-only
    transactions (as on a hot standby): the setting counts for sessions
    opened after it, so the service's pool is renewed, as a fail-over
    renews it."""

    def __enter__(self):
        fixtures.require_backend("postgresql")
        self._url = fixtures.database_url("postgresql")
        self.url = self._url.__enter__()
        self.name = sa.engine.make_url(self.url).database
        return self

    def read_only(self, db, on):
        admin = fixtures._admin("postgresql")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(
                    "ALTER DATABASE %s SET default_transaction_read_only = %s"
                    % (self.name, "on" if on else "off")
                )
        finally:
            admin.dispose()
        db.engine.dispose()

    def end_sessions(self):
        """End the database's sessions, as a fail-over does, and wait until
        the service's are idle for long enough to be pinged before use:
        the ended ones are then replaced unseen."""
        admin = fixtures._admin("postgresql")
        try:
            with admin.connect() as conn:
                conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": self.name},
                )
        finally:
            admin.dispose()
        time.sleep(db_api.PING_AFTER_IDLE_S * 1.5)

    def __exit__(self, *exc):
        self._url.__exit__(*exc)


class SQLiteReadOnly:
    """A SQLite file the process may not write: immutable (``chattr +i``:
    even root cannot write it, as on a read-only mount), opened again by
    the service's new connections. Where the file system has no such
    attribute, the connections are opened with ``PRAGMA query_only``,
    which SQLite refuses writes under with the same error."""

    def __enter__(self):
        self._url = fixtures.database_url("sqlite")
        self.url = self._url.__enter__()
        self.path = sa.engine.make_url(self.url).database
        self.immutable = None
        return self

    def _query_only(self, dbapi_conn, record):
        dbapi_conn.execute("PRAGMA query_only = ON")

    def read_only(self, db, on):
        if self.immutable is None:
            self.immutable = _chattr("+i", self.path)
            if self.immutable:
                _chattr("-i", self.path)
        if self.immutable:
            _chattr("+i" if on else "-i", self.path)
        elif on:
            sa.event.listen(db.engine, "connect", self._query_only)
        else:
            sa.event.remove(db.engine, "connect", self._query_only)
        db.engine.dispose()

    def __exit__(self, *exc):
        if self.immutable:
            _chattr("-i", self.path)
        self._url.__exit__(*exc)


def _chattr(flag, path):
    try:
        return (
            subprocess.run(["chattr", flag, path], capture_output=True).returncode == 0
        )
    except FileNotFoundError:
        return False


TARGETS = {
    "mysql": MariaDBReadOnly,
    "postgresql": PostgreSQLReadOnly,
    "sqlite": SQLiteReadOnly,
}


@pytest.fixture(params=sorted(TARGETS))
def target(request):
    with TARGETS[request.param]() as target:
        conf = fixtures.configure()
        engine = db_api.create_engine(target.url, conf)
        db = db_api.Database(engine, conf)
        try:
            schema.create_at_head(engine)
            standard_names.sync_standard_names(db)
            app = deploy.build_app(conf, db=db, sync_schema=False)
            client = helpers.wsgi_client(app, ADMIN)
            try:
                yield target, client, db
            finally:
                target.read_only(db, False)
        finally:
            engine.dispose()


def _ok(resp):
    assert resp.status_code < 300, (resp.request.method, resp.request.url, resp.text)
    return resp


def _seed(client):
    for uuid_, name in ((RP, "host1"), (RP2, "host2")):
        _ok(client.post("/resource_providers", json={"uuid": uuid_, "name": name}))
    _ok(
        client.put(
            "/resource_providers/%s/inventories" % RP,
            json={
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024}},
            },
        )
    )
    _ok(client.put("/traits/CUSTOM_SEEDED"))
    _ok(client.put("/resource_classes/CUSTOM_SEEDED"))
    _ok(client.put("/allocations/%s" % C1, json=_claim()))


def _claim(**resources):
    return {
        "allocations": {RP: {"resources": resources or {"VCPU": 1}}},
        "project_id": PROJECT,
        "user_id": USER,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }


def _writes(generation):
    """Every kind of write a client sends, each valid against the seeded
    state (so only the database's refusal can fail it)."""
    rp = "/resource_providers/%s" % RP
    return [
        ("POST", "/resource_providers", {"name": "new-host"}),
        ("PUT", rp, {"name": "renamed"}),
        ("DELETE", "/resource_providers/%s" % RP2, None),
        (
            "PUT",
            rp + "/inventories",
            {
                "resource_provider_generation": generation,
                "inventories": {
                    "VCPU": {"total": 8},
                    "MEMORY_MB": {"total": 1024},
                    "DISK_GB": {"total": 100},
                },
            },
        ),
        (
            "PUT",
            rp + "/inventories/VCPU",
            {"resource_provider_generation": generation, "total": 16},
        ),
        ("DELETE", rp + "/inventories/MEMORY_MB", None),
        (
            "PUT",
            rp + "/traits",
            {"resource_provider_generation": generation, "traits": ["CUSTOM_SEEDED"]},
        ),
        (
            "PUT",
            rp + "/aggregates",
            {"resource_provider_generation": generation, "aggregates": [RP2]},
        ),
        ("PUT", "/traits/CUSTOM_NEW", None),
        ("DELETE", "/traits/CUSTOM_SEEDED", None),
        ("PUT", "/resource_classes/CUSTOM_NEW", None),
        ("POST", "/resource_classes", {"name": "CUSTOM_NEW2"}),
        ("PUT", "/allocations/%s" % uuid.uuid4(), _claim()),
        ("POST", "/allocations", {str(uuid.uuid4()): _claim(MEMORY_MB=64)}),
        ("DELETE", "/allocations/%s" % C1, None),
    ]


READS = (
    "/resource_providers",
    "/resource_providers/%s" % RP,
    "/resource_providers/%s/inventories" % RP,
    "/resource_providers/%s/traits" % RP,
    "/resource_providers/%s/aggregates" % RP,
    "/resource_providers/%s/usages" % RP,
    "/allocations/%s" % C1,
    "/usages?project_id=%s" % PROJECT,
    "/traits?name=startswith:CUSTOM_",
    "/resource_classes",
    "/allocation_candidates?resources=VCPU:1",
)


def _reads(client):
    return {path: _ok(client.get(path)).json() for path in READS}


def test_read_only_database(target):
    target, client, db = target
    _seed(client)
    before = _reads(client)
    generation = before["/resource_providers/%s" % RP]["generation"]
    assert client.get("/healthcheck").json()["reasons"] == ["database reachable"]

    target.read_only(db, True)
    health = client.get("/healthcheck")
    assert health.status_code == 200
    assert health.json()["reasons"] == [READ_ONLY_REASON]
    status = test_cmd.run(["placement-status", "upgrade", "check"], target.url)
    assert status.returncode == 2, status.stdout + status.stderr
    assert "The database refuses writes" in status.stdout
    answers = []
    for method, path, body in _writes(generation):
        resp = client.request(method, path, json=body)
        answers.append((method, path, resp.status_code))
        if resp.status_code != 503:
            continue
        assert int(resp.headers["retry-after"]) > 0
        (error,) = resp.json()["errors"]
        assert error["status"] == 503
        assert "The database refuses writes" in error["detail"], error
    assert [a for a in answers if a[2] != 503] == []
    # Nothing was written, and every read answers as before.
    assert _reads(client) == before
    # A service (re)started meanwhile serves them too, as placement-api
    # starts: its schema synced first (nothing to do), its catalog read.
    with fixtures.overrides(**{"placement_database.connection": target.url}) as conf:
        started = startup.make_database(conf)
    try:
        startup.prepare_schema(started, sync=True)
        refresh.warm(started)
        app = deploy.build_app(conf, db=started)
        assert _reads(helpers.wsgi_client(app, ADMIN)) == before
    finally:
        started.engine.dispose()

    target.read_only(db, False)
    assert client.get("/healthcheck").json()["reasons"] == ["database reachable"]
    for method, path, body in _writes(generation)[:2]:
        _ok(client.request(method, path, json=body))


def _full_rereads(url):
    """How many times the server's workers read their catalog whole again
    (``placement_catalog_updates_total{how="full"}``, all workers)."""
    text = requests.get(url + "/metrics").text
    found = re.search(
        r'^placement_catalog_updates_total\{how="full"\} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("backend", ["mysql", "postgresql"])
def test_read_only_under_placement_api(backend, tmp_path):
    """The issue's reproduction: ``placement-api`` with 2 workers (and
    their catalog followers), the database made read-only under it: on
    MariaDB by ``SET GLOBAL read_only = 1`` for the service's ordinary
    user; on PostgreSQL by ``default_transaction_read_only``, its
    sessions ended as a fail-over ends them. Writes answer 503, reads
    200, the followers go on without reading their catalogs again, and
    each refusal is one log line, never a traceback."""
    with TARGETS[backend]() as target:
        conf = fixtures.configure()
        engine = db_api.create_engine(target.url, conf)
        try:
            schema.create_at_head(engine)
            db = db_api.Database(engine, conf)
            with live_server.placement_api(
                str(tmp_path),
                "--workers",
                "2",
                OS_PLACEMENT_DATABASE__CONNECTION=target.url,
            ) as url:
                client = httpx.Client(base_url=url, headers=ADMIN, timeout=30)
                _seed(client)
                before = _reads(client)
                generation = before["/resource_providers/%s" % RP]["generation"]
                target.read_only(db, True)
                target.end_sessions()
                rereads = _full_rereads(url)
                for method, path, body in _writes(generation) * 2:
                    resp = client.request(method, path, json=body)
                    assert resp.status_code == 503, (method, path, resp.text)
                    assert int(resp.headers["retry-after"]) > 0
                for _ in range(10):
                    assert _reads(client) == before
                time.sleep(2)  # several comparisons of each follower
                assert _full_rereads(url) == rereads
                health = client.get("/healthcheck")
                assert health.json()["reasons"] == [READ_ONLY_REASON]
                target.read_only(db, False)
                target.end_sessions()
                for method, path, body in _writes(generation)[:2]:
                    _ok(client.request(method, path, json=body))
            log = "".join(p.read_text() for p in tmp_path.glob("server-*.log"))
            refusals = [
                line
                for line in log.splitlines()
                if "read-only option" in line or "ReadOnlySqlTransaction" in line
            ]
            # One line each, none of a traceback.
            assert refusals
            assert [
                line
                for line in refusals
                if "Database refuses writes (read-only) in" not in line
                and "healthcheck: database read-only" not in line
            ] == []
        finally:
            engine.dispose()
