"""Reads of one statement run in autocommit (``Database.single_read``): the
statement is the request's only round trip on MySQL and PostgreSQL (no
BEGIN, COMMIT or ROLLBACK), and SQLite runs it without a BEGIN. Their
sessions are set up as every other connection's (sql_mode, the statement
budget: test_statement_budget.py; wsrep_sync_wait: test_galera.py), their
errors are answered as every read's (test_db_refusals.py,
test_lost_connection.py), and their pool goes with the engine's."""

import time
import uuid

import pytest
import sqlalchemy as sa

from placement.db import engine as db_engine
from placement.db import transaction
from tests import fixtures
from tests import helpers
from tests import round_trips

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


@pytest.fixture(params=fixtures.BACKENDS)
def served(request, monkeypatch):
    fixtures.require_backend(request.param)
    with fixtures.counted_client(request.param, HEADERS, monkeypatch) as served:
        yield served


def _provider(client):
    """A provider with VCPU inventory, a trait, and a consumer's claim;
    (its uuid, the consumer's)."""
    rp, consumer = str(uuid.uuid4()), str(uuid.uuid4())
    assert client.post("/resource_providers", json={"uuid": rp, "name": rp})
    assert client.put("/traits/CUSTOM_A").is_success
    url = "/resource_providers/%s" % rp
    body = {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}}
    assert client.put(url + "/inventories", json=body).is_success
    body = {"resource_provider_generation": 1, "traits": ["CUSTOM_A"]}
    assert client.put(url + "/traits", json=body).is_success
    claim = helpers.claim(rp, {"VCPU": 2})
    assert client.put("/allocations/%s" % consumer, json=claim).status_code == 204
    return rp, consumer


def _reads(rp, consumer):
    """(path, status, a check of the body) of each read of one statement."""
    inventory = "/resource_providers/%s/inventories/" % rp
    return (
        (inventory + "VCPU", 200, lambda b: b["total"] == 8),
        (inventory + "DISK_GB", 404, None),
        (inventory + "VCPU ", 404, None),  # MySQL's PAD SPACE finds VCPU
        (
            "/resource_providers/%s/inventories/VCPU" % uuid.uuid4(),
            404,
            lambda b: "resource provider" in b["errors"][0]["detail"],
        ),
        ("/resource_classes/VCPU", 200, lambda b: b["name"] == "VCPU"),
        ("/resource_classes/CUSTOM_NONE", 404, None),
        ("/resource_classes", 200, lambda b: len(b["resource_classes"]) > 1),
        ("/traits/CUSTOM_A", 204, None),
        ("/traits/CUSTOM_NONE", 404, None),
        ("/traits?name=startswith:CUSTOM_", 200, lambda b: b["traits"] == ["CUSTOM_A"]),
        (
            "/allocations/%s" % consumer,
            200,
            lambda b: b["allocations"][rp]["resources"] == {"VCPU": 2},
        ),
        # Usage from the catalog: its look alone.
        (
            "/resource_providers/%s/usages" % rp,
            200,
            lambda b: b["usages"] == {"VCPU": 2},
        ),
        ("/usages?project_id=p", 200, lambda b: b["usages"]["INSTANCE"]["VCPU"] == 2),
    )


def test_each_read_is_one_round_trip(served):
    client, read, _ = served
    rp, consumer = _provider(client)
    # The allocations are answered from the catalog: bring it up to date
    # with the writes above (once after writes, a statement a change kind),
    # then it costs its one comparison.
    assert client.get("/allocations/%s" % consumer).is_success
    for path, status, check in _reads(rp, consumer):
        resp, statements, trips = read(path)
        assert resp.status_code == status, (path, resp.text)
        if check is not None:
            assert check(resp.json()), (path, resp.text)
        # No BEGIN on SQLite either.
        assert len(statements) == 1, (path, statements)
        assert statements[0].lstrip().upper().startswith("SELECT")
        assert trips is None or len(trips) == 1, (path, trips)


def test_a_transaction_is_more_round_trips(served, monkeypatch):
    """What the reads above save: the same statement in a read
    transaction sends a COMMIT too, and on PostgreSQL a BEGIN."""
    _, _, db = served
    for read, sent in ((db.single_read, 1), (db.reader, None)):
        with round_trips.counted(db, monkeypatch) as trips:
            with read() as conn:
                assert conn.execute(sa.select(sa.literal(1))).scalar() == 1
        if trips is not None:
            assert len(trips) == (sent or {"mysql": 2, "postgresql": 3}[db.dialect])


def test_a_candidate_read_sends_its_statements_alone(served):
    """GET /allocation_candidates reads several statements (the look and,
    after a claim, the catalog's catch-up) in autocommit
    (``Database.several_reads``): no BEGIN nor COMMIT around them on MySQL
    and PostgreSQL, each statement its own snapshot as at READ COMMITTED in
    a transaction; and the claim acknowledged just before is in the
    answer."""
    client, read, _ = served
    rp, _ = _provider(client)
    path = "/allocation_candidates?resources=VCPU:1"
    assert client.get(path).is_success  # the catalog follows the writes above
    for used in (3, 4):
        claim = helpers.claim(rp, {"VCPU": 1})
        assert client.put("/allocations/%s" % uuid.uuid4(), json=claim).is_success
        resp, statements, trips = read(path)
        summary = resp.json()["provider_summaries"][rp]["resources"]["VCPU"]
        assert summary["used"] == used
        # The look (with the shards' counts: the one before found the
        # catalog behind), the log items of the claim's shard, then the
        # consumer's allocations with the provider's usage: no statement
        # of the shards' counts of its own (SQLite's BEGIN aside).
        sent = [s for s in statements if s != "BEGIN"]
        assert len(sent) == 3, statements
        assert [s for s in sent if "catalog_changes" in s] == sent[:1], statements
        assert trips is None or len(trips) == len(statements), (statements, trips)


def test_sessions_are_set_up(served):
    """The autocommit connections' sessions are the others' (but for the
    transactions): MySQL's sql_mode, PostgreSQL's READ COMMITTED."""
    _, _, db = served
    query = {
        "mysql": "SELECT @@SESSION.sql_mode",
        "postgresql": "SHOW default_transaction_isolation",
        "sqlite": "PRAGMA foreign_keys",
    }[db.dialect]
    with db.reader() as conn:
        expected = conn.exec_driver_sql(query).scalar()
    with db.single_read() as conn:
        assert conn.exec_driver_sql(query).scalar() == expected


def test_disposed_with_the_engine(served):
    """Disposing of the engine (as the master does before it forks the
    workers) closes the autocommit connections too; reads open new ones."""
    client, _, db = served
    rp, _ = _provider(client)
    pool = db_engine.autocommit(db.engine).pool
    db.engine.dispose()
    assert db_engine.autocommit(db.engine).pool.checkedin() == 0
    if db.dialect != "sqlite":
        assert pool is not db_engine.autocommit(db.engine).pool
    assert client.get("/resource_providers/%s" % rp).json()["uuid"] == rp


_SESSION = {
    "mysql": "SELECT CONNECTION_ID()",
    "postgresql": "SELECT pg_backend_pid()",
}


def _session(conn):
    return conn.exec_driver_sql(_SESSION[conn.dialect.name]).scalar()


def test_a_thread_keeps_its_session(served, monkeypatch):
    """On MySQL and PostgreSQL a thread's reads of one statement run on one
    session while they follow each other (no pool checkout between them),
    a read within a read on another; a thread's session is given back to
    the pool after ``KEEP_S``, and when lost it is replaced at once."""
    _, _, db = served
    if db.dialect == "sqlite":
        pytest.skip("no session kept on SQLite")
    with db.single_read() as conn:
        first = _session(conn)
        with db.single_read() as inner:
            assert _session(inner) != first
    with db.single_read() as conn:
        assert _session(conn) == first
        conn.invalidate()
    with db.single_read() as conn:
        second = _session(conn)
    assert second != first
    monkeypatch.setattr(transaction, "KEEP_S", 0.0)
    pool = db_engine.autocommit(db.engine).pool
    with db.single_read():
        out = pool.checkedout()
    # Given back after its read, taken again for the next.
    assert pool.checkedout() == out - 1


def test_a_kept_session_ended_while_idle_is_replaced(served, monkeypatch):
    """A kept session the server ended while the thread was idle for the
    pool's PING_AFTER_IDLE_S is replaced before use, unseen (as the pool
    does for its idle connections: test_idle_ping.py)."""
    _, _, db = served
    if db.dialect == "sqlite":
        pytest.skip("no session kept on SQLite")
    monkeypatch.setattr(db_engine, "PING_AFTER_IDLE_S", 0.05)
    with db.single_read() as conn:
        ended = _session(conn)
    admin = fixtures._admin(db.dialect)
    try:
        with admin.connect() as conn:
            if db.dialect == "mysql":
                conn.exec_driver_sql("KILL CONNECTION %d" % ended)
            else:
                conn.exec_driver_sql("SELECT pg_terminate_backend(%d)" % ended)
    finally:
        admin.dispose()
    time.sleep(0.1)
    with db.single_read() as conn:
        assert _session(conn) != ended
