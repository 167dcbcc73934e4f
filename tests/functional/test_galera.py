"""Several API servers on different nodes of a MariaDB Galera cluster.

The cluster is the one tools/run-tests starts (tests/galera.py: three nodes
on this machine). Two write paths meet on different nodes here, so a
conflict shows up as a certification failure at COMMIT rather than as a
lock wait: the servers must retry those as whole transactions and still
never over-allocate, lose a claim, leave anything behind a refused one or
answer 5xx. Run with ``-s`` for claims/s and the cluster's certification
failure count.
"""

import pymysql
import pytest
import requests
import sqlalchemy as sa

from placement.db import api as db_api
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
            with engine.connect() as conn:
                assert conn.exec_driver_sql("SELECT @@wsrep_sync_wait").scalar() == 1
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
                    listed = session.get(other + "/resource_providers/%s" % rp)
                    assert listed.status_code == 200


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
