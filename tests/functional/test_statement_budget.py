"""[placement_database] statement_timeout: a statement that runs longer
than the budget is cancelled by the database, and its request answers a
JSON 503 with Retry-After, having written nothing; the worker is free
again at once. A statement made slow for sure: it waits for a lock that
another connection of the test holds (lock waits count in the budget).
And the statements a read runs: one, the look at the stamp, where the
catalog answers it from memory."""

import contextlib
import uuid

import httpx
import pytest
import sqlalchemy as sa

from placement.objects.catalog import refresh
from tests import fixtures
from tests import helpers
from tests.functional import test_resource_provider_objects as rp_objects

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
BUDGET = 0.5


@pytest.fixture(params=("mysql", "postgresql"))
def served(request):
    backend = request.param
    fixtures.require_backend(backend)
    with fixtures.overrides(**{"placement_database.statement_timeout": BUDGET}):
        with fixtures.app(backend) as (app, db):
            client = httpx.Client(
                transport=httpx.WSGITransport(app=app),
                base_url="http://localhost",
                headers=ADMIN,
            )
            yield backend, client, db


# Hang guard: the holder lets go after this long even if the budget
# never cancels the waiting statement (then the request succeeds late, and
# the test fails instead of hanging).
HOLD_AT_MOST = 20


@contextlib.contextmanager
def _holding(db, statement):
    """``statement`` run (and its locks held) on a connection of its own,
    without a budget, until the block ends."""
    engine = sa.create_engine(db.engine.url)
    try:
        with engine.connect() as conn:
            release = "UNLOCK TABLES" if db.dialect == "mysql" else "ROLLBACK"
            if db.dialect == "mysql":
                conn.exec_driver_sql("SET SESSION wait_timeout = %d" % HOLD_AT_MOST)
            else:
                conn.exec_driver_sql(
                    "SET idle_in_transaction_session_timeout = '%ds'" % HOLD_AT_MOST
                )
            conn.exec_driver_sql(statement)
            try:
                yield
            finally:
                with contextlib.suppress(sa.exc.DBAPIError):
                    conn.exec_driver_sql(release)
                    conn.rollback()
    finally:
        engine.dispose()


def _assert_over_budget(resp):
    assert resp.status_code == 503, resp.text
    assert int(resp.headers["retry-after"]) > 0
    (error,) = resp.json()["errors"]
    assert error["status"] == 503
    assert "ran longer than the service allows" in error["detail"]


def test_write_over_budget(served):
    _, client, db = served
    rp = str(uuid.uuid4())
    assert client.post("/resource_providers", json={"uuid": rp, "name": "a"}).is_success
    url = "/resource_providers/%s" % rp
    locked = "SELECT * FROM resource_providers WHERE uuid = '%s' FOR UPDATE" % rp
    with _holding(db, locked):
        _assert_over_budget(client.put(url, json={"name": "b"}))
    resp = client.get(url)
    assert resp.json()["name"] == "a"
    assert resp.json()["generation"] == 0
    assert client.put(url, json={"name": "b"}).status_code == 200


def test_read_over_budget(served):
    backend, client, db = served
    rp = str(uuid.uuid4())
    assert client.post("/resource_providers", json={"uuid": rp, "name": "a"}).is_success
    url = "/resource_providers/%s" % rp
    if backend == "mysql":
        locked = "LOCK TABLES resource_providers WRITE"
    else:
        locked = "LOCK TABLE resource_providers IN ACCESS EXCLUSIVE MODE"
    with _holding(db, locked):
        _assert_over_budget(client.get(url))
    assert client.get(url).status_code == 200


@pytest.mark.parametrize("kind", ("reader", "single_read"))
def test_budget_is_set_on_every_connection(served, kind):
    """On the connections of transactions and on those of the reads of
    one statement, in autocommit (their own pool)."""
    backend, _, db = served
    with getattr(db, kind)() as conn:
        if backend == "mysql":
            names = ("max_statement_time", "max_execution_time")
            rows = conn.exec_driver_sql(
                "SHOW SESSION VARIABLES WHERE Variable_name IN %s" % (names,)
            ).all()
            values = {name: float(value) for name, value in rows}
            assert BUDGET in (
                values.get("max_statement_time"),
                values.get("max_execution_time", 0) / 1000,
            )
        else:
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "500ms"


# Statements per request: where the triggers log every writer's changes,
# a read that the catalog answers (usage included) runs one statement, the
# look at the stamp, whatever the cloud's size (issue 44).
ONE_LOOK = [
    "/allocation_candidates?resources=VCPU:1,MEMORY_MB:512&limit=5",
    "/allocation_candidates?resources=VCPU:1,MEMORY_MB:512",
    "/allocation_candidates?resources=VCPU:1,MEMORY_MB:512&limit=5"
    "&required=CUSTOM_GOLD",
    "/allocation_candidates/capacity?resources=VCPU:1,MEMORY_MB:512",
    "/resource_providers/%(rp)s/usages",
    # A host's periodic reads (tools/bench/heartbeat.py's, at 1.39).
    "/resource_providers/%(rp)s",
    "/resource_providers/%(rp)s/allocations",
    "/resource_providers/%(rp)s/inventories",
    "/resource_providers/%(rp)s/traits",
    "/resource_providers/%(rp)s/aggregates",
    "/usages?project_id=%(project)s",
    "/usages?project_id=%(project)s&user_id=%(user)s&consumer_type=INSTANCE",
]
# The owner of the instances _hosts claims.
PROJECT, USER = "budget-project", "budget-user"


@pytest.fixture(params=fixtures.BACKENDS)
def cloud_app(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        client = httpx.Client(
            transport=httpx.WSGITransport(app=app),
            base_url="http://localhost",
            headers=ADMIN,
        )
        yield client, db


def _hosts(client, count):
    """``count`` hosts with VCPU and MEMORY_MB, every other one with
    CUSTOM_GOLD and one instance; the uuid of the last."""
    client.put("/traits/CUSTOM_GOLD")
    for i in range(count):
        rp = str(uuid.uuid4())
        assert client.post(
            "/resource_providers", json={"uuid": rp, "name": "host-%d-%d" % (count, i)}
        ).is_success
        inventories = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}
        assert client.put(
            "/resource_providers/%s/inventories" % rp,
            json={"resource_provider_generation": 0, "inventories": inventories},
        ).is_success
        if i % 2:
            continue
        assert client.put(
            "/resource_providers/%s/traits" % rp,
            json={"resource_provider_generation": 1, "traits": ["CUSTOM_GOLD"]},
        ).is_success
        claim = helpers.claim(rp, {"VCPU": 2, "MEMORY_MB": 512}, PROJECT, USER)
        assert client.put("/allocations/%s" % uuid.uuid4(), json=claim).is_success
    return rp


def test_reads_from_memory_run_one_statement(cloud_app):
    client, db = cloud_app
    for size in (3, 40):
        rp = _hosts(client, size)
        assert refresh.logged_by_triggers(db)
        # The catalog read, then compared once with the database (a
        # process without a follower compares on a request; with the
        # triggers, a safety net minutes apart).
        for _ in range(2):
            assert client.get(ONE_LOOK[0]).status_code == 200
        for path in ONE_LOOK:
            path = path % {"rp": rp, "project": PROJECT, "user": USER}
            # The first follows what the writes logged; the second finds
            # nothing changed.
            assert client.get(path).status_code == 200
            with rp_objects.statements(db) as seen:
                resp = client.get(path)
            assert resp.status_code == 200, resp.text
            assert len(rp_objects._queries(seen)) == 1, (path, seen)


def test_allocation_reads_run_one_statement(served):
    """Where the catalog follows allocations (the triggers are there),
    each allocation read, and the provider read, costs the database one
    statement (the stamp) once the catalog is current: nothing changed
    since."""
    _, client, db = served
    rp, consumer = str(uuid.uuid4()), str(uuid.uuid4())
    assert client.post("/resource_providers", json={"uuid": rp, "name": "a"}).is_success
    inventories = {
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": 8}},
    }
    assert client.put(
        "/resource_providers/%s/inventories" % rp, json=inventories
    ).is_success
    claim = helpers.claim(rp, {"VCPU": 2})
    assert client.put("/allocations/%s" % consumer, json=claim).is_success
    seen = []
    sa.event.listen(db.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    for path in (
        "/allocations/%s" % consumer,
        "/resource_providers/%s/allocations" % rp,
        "/resource_providers/%s" % rp,
    ):
        # The catalog read, then compared with the database once.
        client.get(path)
        client.get(path)
        del seen[:]
        resp = client.get(path)
        assert resp.status_code == 200 and resp.json().get("allocations", True)
        assert len(seen) == 1, seen
