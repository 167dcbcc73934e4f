"""Several API servers on different nodes of a MariaDB Galera cluster.

The cluster is the one tools/run-tests starts (tests/galera.py: three nodes
on this machine). Two write paths meet on different nodes here, so a
conflict shows up as a certification failure at COMMIT rather than as a
lock wait: the servers must retry those as whole transactions and still
never over-allocate, lose a claim, leave anything behind a refused one or
answer 5xx. Run with ``-s`` for claims/s and the cluster's certification
failure count.
"""

import contextlib
import random
import threading
import time
import uuid

import pymysql
import pytest
import requests
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import errors
from placement.db import schema
from placement.db import tables
from placement.objects.catalog import changes
from placement.objects.catalog import snapshot
from tests import fixtures
from tests.functional import test_candidate_catalog
from tests.functional import test_concurrency

pytestmark = [pytest.mark.slow, pytest.mark.galera]


def _cert_failures(urls):
    total = 0
    for url in urls:
        url = sa.engine.make_url(url)
        conn = pymysql.connect(host=url.host, port=url.port, user=url.username)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW GLOBAL STATUS LIKE 'wsrep_local_cert_failures'")
                total += int(cur.fetchone()[1])
        finally:
            conn.close()
    return total


def test_claims_on_two_nodes_never_over_allocate(tmp_path):
    fixtures.require_backend("galera")
    nodes = fixtures.galera_urls()
    before = _cert_failures(nodes)
    with fixtures.database_url("galera", node=0) as first:
        name = sa.engine.make_url(first).database
        # One server on each of the first two nodes (providers are made on
        # node 1); the API checks afterwards go through the second.
        urls = ["%s/%s?charset=utf8mb4" % (node, name) for node in nodes[:2]]
        rate = test_concurrency.claim_and_check("galera", urls, 2, str(tmp_path))
    print(
        "[galera] %.1f claims/s, %d certification failures retried"
        % (rate, _cert_failures(nodes) - before)
    )


# Runs of the hot mode: on the main of issue 40, 2 runs in 7 ended with a
# claim answered 409 yet written; 6 runs catch that with 87% likelihood
# (the test below catches its cause in every run).
HOT_RUNS = 6


def test_hot_claims_are_answered_as_written(tmp_path):
    """The hot mode (test_concurrency.HOT: 16 threads claiming 1 VCPU on 2
    providers, 800 claims), through two servers on two nodes, HOT_RUNS
    times: a transaction aborted by another node's write set must never
    leave part of a claim behind (a 409 with rows, a 204 without its
    consumer or its generation move)."""
    fixtures.require_backend("galera")
    nodes = fixtures.galera_urls()
    before = _cert_failures(nodes)
    for run in range(HOT_RUNS):
        with fixtures.database_url("galera", node=0) as first:
            name = sa.engine.make_url(first).database
            urls = ["%s/%s?charset=utf8mb4" % (node, name) for node in nodes[:2]]
            workdir = tmp_path / str(run)
            workdir.mkdir()
            test_concurrency.claim_and_check(
                "galera hot %d" % run, urls, 2, str(workdir), test_concurrency.HOT
            )
    print("[galera hot] %d certification failures" % (_cert_failures(nodes) - before))


class _Lost(Exception):
    pass


def test_writes_held_for_the_commit_are_all_or_nothing():
    """Racing write transactions on two nodes, each moving a provider's
    generation then writing two rows given to ``at_commit``: every one
    answered done wrote its three changes and every one that failed
    (a certification failure, or another node's write set aborting it
    midway) wrote none. (Sent with the COMMIT as one multi-statement
    query, a transaction aborted between its statements had the rest run
    outside it, each committed on its own: some dozens per run.)"""
    fixtures.require_backend("galera")
    nodes = fixtures.galera_urls()
    conf = fixtures.configure()
    with fixtures.database_url("galera", node=0) as first:
        name = sa.engine.make_url(first).database
        urls = ["%s/%s?charset=utf8mb4" % (node, name) for node in nodes[:2]]
        engines = [db_api.create_engine(url, conf) for url in urls]
        try:
            schema.create_at_head(engines[0])
            dbs = [db_api.Database(engine, conf) for engine in engines]
            rp = tables.resource_providers
            with dbs[0].writer() as conn:
                changes.record(conn, changes.EVERYTHING)
                conn.execute(
                    rp.insert(),
                    [{"uuid": u, "name": u, "generation": 0} for u in ("a", "b")],
                )
            done, failed = _race_held_writes(dbs, threads=16, each=250)
            with dbs[1].reader() as conn:
                moves = conn.execute(sa.select(sa.func.sum(rp.c.generation))).scalar()
                projects = set(
                    conn.execute(sa.select(tables.projects.c.external_id)).scalars()
                )
                users = set(
                    conn.execute(sa.select(tables.users.c.external_id)).scalars()
                )
        finally:
            for engine in engines:
                engine.dispose()
    print("[galera held] %d written, %d failed" % (len(done), len(failed)))
    assert failed, "no transaction was aborted: the race did not happen"
    assert projects - done == set(), "failed, yet written: %d" % len(projects - done)
    assert users - done == set(), "failed, yet written: %d" % len(users - done)
    assert done - projects == set(), "done, but not written: %d" % len(done - projects)
    assert done - users == set(), "done, but not written: %d" % len(done - users)
    assert moves == len(done)


def _race_held_writes(dbs, threads, each):
    """``threads`` threads (on the ``dbs`` in turn) making ``each`` tries;
    the tags of the transactions answered done and failed."""
    rp = tables.resource_providers
    done, failed = set(), set()
    lock = threading.Lock()

    def client(db, seed):
        rnd = random.Random(seed)
        for _ in range(each):
            tag = str(uuid.uuid4())
            try:
                with db.writer() as conn:
                    row = rnd.choice(("a", "b"))
                    seen = conn.execute(
                        sa.select(rp.c.generation).where(rp.c.uuid == row)
                    ).scalar()
                    moved = conn.execute(
                        rp.update()
                        .where(rp.c.uuid == row, rp.c.generation == seen)
                        .values(generation=seen + 1)
                    ).rowcount
                    if not moved:
                        raise _Lost()
                    db_api.at_commit(
                        conn, tables.projects.insert(), {"external_id": tag}
                    )
                    db_api.at_commit(conn, tables.users.insert(), {"external_id": tag})
            except _Lost:
                continue
            except sa.exc.DBAPIError as e:
                assert errors.is_deadlock(e), e
                with lock:
                    failed.add(tag)
                continue
            with lock:
                done.add(tag)

    workers = [
        threading.Thread(target=client, args=(dbs[n % len(dbs)], n))
        for n in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return done, failed


def test_sessions_wait_for_the_cluster(tmp_path):
    """Sessions on a Galera node get the configured wsrep_sync_wait, and a
    write through one node's server is read back at once through another's,
    including the provider catalog (its change count is read causally)."""
    fixtures.require_backend("galera")
    nodes = fixtures.galera_urls()
    with fixtures.database_url("galera", node=0) as first:
        name = sa.engine.make_url(first).database
        urls = ["%s/%s?charset=utf8mb4" % (node, name) for node in nodes]
        engine = db_api.create_engine(urls[1], fixtures.configure())
        try:
            db = db_api.Database(engine, fixtures.configure())
            # Transactions' connections and the autocommit ones alike.
            for kind in (db.reader, db.single_read):
                with kind() as conn:
                    sync_wait = conn.exec_driver_sql("SELECT @@wsrep_sync_wait")
                    assert sync_wait.scalar() == 1
        finally:
            engine.dispose()
        test_concurrency._create_providers(urls[0])
        with (
            test_concurrency._server(urls[0], 1, str(tmp_path)) as one,
            test_concurrency._server(urls[2], 1, str(tmp_path)) as other,
        ):
            with requests.Session() as session:
                session.headers.update(test_concurrency.HEADERS)
                query = "/allocation_candidates?resources=VCPU:1&limit=1000"
                # Warm the second server's catalog, then change the cloud
                # through the first and look again through the second.
                assert len(session.get(other + query).json()["provider_summaries"])
                for n in range(5):
                    made = session.post(
                        one + "/resource_providers", json={"name": "new-%d" % n}
                    )
                    assert made.status_code == 200, made.text
                    rp = made.json()["uuid"]
                    inventory = session.put(
                        one + "/resource_providers/%s/inventories" % rp,
                        json={
                            "resource_provider_generation": 0,
                            "inventories": {"VCPU": {"total": 8}},
                        },
                    )
                    assert inventory.status_code == 200, inventory.text
                    seen = session.get(other + query).json()["provider_summaries"]
                    assert rp in seen
                    # Reads of one statement, in autocommit, wait too.
                    url = other + "/resource_providers/%s" % rp
                    assert session.get(url).json()["generation"] == 1
                    read = session.get(url + "/inventories/VCPU")
                    assert read.json()["total"] == 8


# Rows of the write set that keeps the second node's applier busy: about
# 0.3 s of applying on this machine, while a claim commits at once.
BACKLOG_ROWS = 50000


def _backlog(url):
    """Commit a large write set through the node of ``url`` (a table of
    its own): the other nodes apply it, and whatever follows it, some
    tenths of a second later."""
    url = sa.engine.make_url(url)
    conn = pymysql.connect(
        host=url.host, port=url.port, user=url.username, database=url.database
    )
    try:
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS backlog"
                " (id INT PRIMARY KEY AUTO_INCREMENT, pad VARCHAR(200))"
            )
            cur.execute(
                "INSERT INTO backlog (pad) SELECT REPEAT('x', 200)"
                " FROM seq_1_to_%d" % BACKLOG_ROWS
            )
        conn.commit()
    finally:
        conn.close()


@contextlib.contextmanager
def _one_applier(url):
    """The node of ``url`` applies one write set at a time (and commits in
    order): what was committed after a large write set is not even begun
    there until that is done. (With parallel appliers, a small write set
    is often already being applied, its rows locked, and a statement on
    them waits for it anyway.)"""
    url = sa.engine.make_url(url)
    conn = pymysql.connect(host=url.host, port=url.port, user=url.username)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@wsrep_slave_threads")
            threads = cur.fetchone()[0]
            cur.execute("SET GLOBAL wsrep_slave_threads = 1")
            try:
                yield
            finally:
                cur.execute("SET GLOBAL wsrep_slave_threads = %s", (threads,))
    finally:
        conn.close()


def test_writes_through_another_node_start_from_the_cluster(tmp_path):
    """A write whose first statement is a DELETE or UPDATE, sent through
    one node's server just after another node's server answered a write,
    sees that write even while its node is still applying it (a write
    transaction opens with START TRANSACTION, which wsrep_sync_wait makes
    wait): a consumer claimed through one server is deleted (204, not
    404) through the other, and a provider made through one is renamed
    and deleted through the other."""
    fixtures.require_backend("galera")
    nodes = fixtures.galera_urls()
    with fixtures.database_url("galera", node=0) as first:
        name = sa.engine.make_url(first).database
        urls = ["%s/%s?charset=utf8mb4" % (node, name) for node in nodes[:2]]
        providers = test_concurrency._create_providers(urls[0], 1)
        with (
            test_concurrency._server(urls[0], 1, str(tmp_path)) as one,
            test_concurrency._server(urls[1], 1, str(tmp_path)) as other,
            requests.Session() as session,
            _one_applier(urls[1]),
        ):
            session.headers.update(test_concurrency.HEADERS)
            rnd = random.Random(7)
            for _ in range(3):
                _backlog(urls[0])
                consumer, _, _, claim = test_concurrency.random_claim(
                    session, one, providers, rnd
                )
                assert claim.status_code == 204, claim.text
                gone = session.delete(other + "/allocations/" + consumer)
                assert gone.status_code == 204, gone.text
                left = session.get(one + "/allocations/" + consumer)
                assert left.json()["allocations"] == {}
            for n in range(2):
                _backlog(urls[0])
                made = session.post(
                    one + "/resource_providers", json={"name": "r%d" % n}
                )
                assert made.status_code == 200, made.text
                rp = made.json()["uuid"]
                renamed = session.put(
                    other + "/resource_providers/" + rp,
                    json={"name": "renamed-%d" % n},
                )
                assert renamed.status_code == 200, renamed.text
                assert renamed.json()["name"] == "renamed-%d" % n
                _backlog(urls[0])
                trait = session.put(one + "/traits/CUSTOM_LAG_%d" % n)
                assert trait.status_code == 201, trait.text
                gone = session.delete(other + "/traits/CUSTOM_LAG_%d" % n)
                assert gone.status_code == 204, gone.text


def test_catalogs_follow_writes_made_through_another_node():
    """Two workers on two nodes, seeded random writes of every kind through
    either and reads through both (test_candidate_catalog.random_day): each
    worker's catalog follows the other node's writes by their deltas alone
    and answers as the uncached path does (its reads wait for the cluster:
    wsrep_sync_wait)."""
    fixtures.require_backend("galera")
    nodes = fixtures.galera_urls()
    with fixtures.database_url("galera", node=0) as first:
        name = sa.engine.make_url(first).database
        urls = ["%s/%s?charset=utf8mb4" % (node, name) for node in nodes[:2]]
        with test_candidate_catalog.two_workers(*urls) as cloud:
            test_candidate_catalog.random_day(cloud, steps=150)


def test_a_catalog_read_aborted_by_a_schema_change_is_read_again():
    """A catalog read takes no row lock, yet Galera aborts it with a
    deadlock when a schema change replicated from another node needs a
    table it has open (as another database's ``db sync`` did to a GET in
    CI, answered 409): the read runs again in a new snapshot."""
    fixtures.require_backend("galera")
    nodes = fixtures.galera_urls()
    with fixtures.database_url("galera", node=0) as first:
        engine = db_api.create_engine(first, fixtures.configure())
        schema.create_at_head(engine)
        engine.dispose()
        name = sa.engine.make_url(first).database
        here = "%s/%s?charset=utf8mb4" % (nodes[1], name)
        db = db_api.Database(
            db_api.create_engine(here, fixtures.configure()), fixtures.configure()
        )
        alter = sa.create_engine(first, poolclass=sa.pool.NullPool)
        tries = []

        def read(reading):
            tries.append(reading.exec_driver_sql("SELECT CONNECTION_ID()").scalar())
            count = "SELECT COUNT(*) FROM resource_providers"
            reading.exec_driver_sql(count)
            if len(tries) == 1:
                # Node 1 changes the table this snapshot has open: the
                # applier on node 2 aborts the snapshot's transaction.
                with alter.begin() as conn:
                    conn.exec_driver_sql("ALTER TABLE resource_providers COMMENT 'x'")
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    reading.exec_driver_sql(count)
                    time.sleep(0.05)
                pytest.fail("the schema change did not abort the read")
            return reading.exec_driver_sql(count).scalar()

        try:
            with db.engine.connect() as conn:
                assert snapshot.read(db, conn, read) == 0
        finally:
            db.engine.dispose()
            alter.dispose()
        assert len(tries) == 2
