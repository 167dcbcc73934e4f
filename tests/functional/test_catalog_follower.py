"""The catalog follower of a worker (placement.cmd.follower): while the
worker's gate has been empty for a while, it brings the worker's provider
catalog up to date with other workers' writes, so that the next request
finds it current; while requests come, it leaves that to them."""

import multiprocessing
import threading
import time
import uuid

import pytest

from placement.cmd import follower
from placement.cmd import gate
from placement.db import api as db_api
from placement.objects.allocation_candidates import catalog_index
from placement.objects.catalog import changes
from placement.objects.catalog import columns
from placement.objects.catalog import fingerprint
from placement.objects.catalog import precheck
from placement.objects.catalog import refresh
from placement.objects.catalog import verify
from tests import fixtures
from tests import helpers
from tests import round_trips
from tests import wsgi_client
from tests.functional.test_candidate_catalog import two_workers
from tests.helpers import statements

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.database_url(request.param) as url, two_workers(url, url) as cloud:
        refresh.warm(cloud.reader_db)
        yield cloud


def _stamp(db):
    with db.reader() as conn:
        return changes.stamp(conn)


def _catalog(db):
    return refresh._CACHES[db].catalog


def _new_host(cloud):
    rp = cloud.provider("host-%s" % uuid.uuid4())
    cloud.inventories(rp, VCPU=4)
    return rp


def test_an_idle_worker_catches_up_and_its_next_request_hits(cloud):
    gated = gate.Gate(cloud.reader, 2)
    watcher = follower.Follower(cloud.reader_db, gated, idle=0)
    assert watcher.step() == "none"
    rp = _new_host(cloud)
    assert _catalog(cloud.reader_db).stamp < _stamp(cloud.writer_db)

    assert watcher.step() == "deltas"
    catalog = _catalog(cloud.reader_db)
    assert catalog.stamp == _stamp(cloud.writer_db)
    assert rp in catalog.uuids.values()
    # The request through the gate takes that catalog as it is.
    resp = wsgi_client.call(gated, "/allocation_candidates?resources=VCPU:4", **HEADERS)
    assert resp.status == 200
    assert [rp] == [list(r["allocations"]) for r in resp.json()["allocation_requests"]][
        0
    ]
    assert _catalog(cloud.reader_db) is catalog
    assert watcher.step() == "none"


class _Holding:
    """A WSGI app that holds its request until ``done`` is set."""

    def __init__(self):
        self.inside = threading.Event()
        self.done = threading.Event()

    def __call__(self, environ, start_response):
        self.inside.set()
        self.done.wait(10)
        start_response("204 No Content", [])
        return [b""]


def test_a_busy_worker_leaves_catching_up_to_its_requests(cloud):
    app = _Holding()
    gated = gate.Gate(app, 2)
    watcher = follower.Follower(cloud.reader_db, gated, idle=60)
    _new_host(cloud)
    stamp = _catalog(cloud.reader_db).stamp
    request = threading.Thread(
        target=gated, args=({"REQUEST_METHOD": "PUT"}, lambda *a: None)
    )
    request.start()
    try:
        assert app.inside.wait(10)
        assert watcher.step() is None  # a request is in
    finally:
        app.done.set()
        request.join()
    assert watcher.step() is None  # one left less than a minute ago
    assert _catalog(cloud.reader_db).stamp == stamp
    watcher.idle = 0
    assert watcher.step() == "deltas"
    assert _catalog(cloud.reader_db).stamp == _stamp(cloud.writer_db)


def _looked_elsewhere(db):
    """Another worker of this host (a process forked from this one) takes
    its follower's look now."""
    cache = refresh._CACHES[db]
    context = multiprocessing.get_context("fork")

    def look():
        with db.reader() as conn:
            sent = time.monotonic()
            cache.host_look.saw(*changes.look(conn)[:2], sent)

    child = context.Process(target=look)
    child.start()
    child.join(30)
    assert child.exitcode == 0


def test_an_idle_host_looks_once_per_period_not_once_per_worker(cloud):
    db = cloud.reader_db
    watcher = follower.Follower(db, gate.Gate(cloud.reader, 2), every=60, idle=0)
    assert watcher.step() == "none"
    _looked_elsewhere(db)
    with statements(db) as seen:
        assert watcher.step() == "none"
    assert seen == []  # the other worker's look told it
    # After a write, the other worker's look found a stamp past the
    # catalog's: this one waits one period for that worker's move
    # (host_deltas: none comes for a new host), then looks itself and
    # follows the write.
    rp = _new_host(cloud)
    _looked_elsewhere(db)
    with statements(db) as seen:
        assert watcher.step() is None
    assert seen == []
    assert watcher.step() == "deltas"
    assert rp in _catalog(db).uuids.values()
    # Its own look is no tell: the next step looks again.
    with statements(db) as seen:
        assert watcher.step() == "none"
    assert seen


def test_an_idle_workers_look_and_catch_up_send_their_statements_alone(
    cloud, monkeypatch
):
    """The follower reads as a request does, in autocommit: its look is
    its one round trip on MySQL and PostgreSQL (no BEGIN, no COMMIT
    after it), and following a claim sends the catch-up's statements
    alone (the look, the shards' counts, the log items, the consumer's
    allocations with the provider's usage)."""
    db = cloud.reader_db
    watcher = follower.Follower(db, gate.Gate(cloud.reader, 2), every=60, idle=0)
    rp = _new_host(cloud)
    assert watcher.step() == "deltas"
    for how, count in (("none", 1), ("counts", 4)):
        if how == "counts":
            claim = helpers.claim(rp, {"VCPU": 1})
            cloud.write("/allocations/%s" % uuid.uuid4(), body=claim)
        with round_trips.counted(db, monkeypatch) as trips, statements(db) as seen:
            assert watcher.step() == how
        sent = [s for s in seen if s != "BEGIN"]  # SQLite's
        assert len(sent) == count, seen
        assert "catalog_changes" in sent[0]
        assert trips is None or len(trips) == count, trips
    assert _catalog(db).stamp == _stamp(cloud.writer_db)


def test_the_follower_thread_follows_until_stopped(cloud):
    watcher = follower.Follower(
        cloud.reader_db, gate.Gate(cloud.reader, 2), every=0.01, idle=0
    )
    watcher.start()
    try:
        for _ in range(3):
            rp = _new_host(cloud)
            stamp = _stamp(cloud.writer_db)
            deadline = time.monotonic() + 10
            while _catalog(cloud.reader_db).stamp != stamp:
                assert time.monotonic() < deadline, "not followed"
                time.sleep(0.01)
            assert rp in _catalog(cloud.reader_db).uuids.values()
    finally:
        watcher.stop()
    assert not watcher._thread.is_alive()


def test_nothing_to_follow_with_the_catalog_off(cloud):
    _new_host(cloud)
    watcher = follower.Follower(cloud.reader_db, gate.Gate(cloud.reader, 2), idle=0)
    with fixtures.overrides(**{"placement.provider_catalog": False}):
        assert watcher.step() is None
    assert _catalog(cloud.reader_db).stamp < _stamp(cloud.writer_db)


def test_a_database_away_is_no_error(tmp_path):
    conf = fixtures.configure()
    away = db_api.Database(
        db_api.create_engine("sqlite:///%s/missing/placement.sqlite" % tmp_path, conf),
        conf,
    )
    watcher = follower.Follower(away, gate.Gate(lambda e, s: [b""], 1), idle=0)
    assert watcher.step() is None


@pytest.fixture(params=fixtures.BACKENDS)
def fallback_cloud(request):
    """``cloud`` without the change-log triggers: the comparison every
    period is the fallback's."""
    fixtures.require_backend(request.param)
    with (
        fixtures.database_url(request.param) as url,
        two_workers(url, url, triggers=False) as cloud,
    ):
        refresh.warm(cloud.reader_db)
        yield cloud


def test_requests_leave_comparing_to_the_follower_until_it_falls_behind(
    fallback_cloud, monkeypatch
):
    """Where a follower compares the catalog with the database, a request
    does not run the comparison itself (a statement that reads every row
    of the catalog's tables) while the last one is less than
    FOLLOWED_VERIFY_S old; past that, or without a follower, it does."""
    db = fallback_cloud.reader_db
    compared = []
    real = fingerprint.of_database

    def counted(conn):
        compared.append(conn)
        return real(conn)

    monkeypatch.setattr(fingerprint, "of_database", counted)
    monkeypatch.setattr(precheck, "look", lambda db: None)  # always compare

    def search():
        resp = wsgi_client.call(
            fallback_cloud.reader, "/allocation_candidates?resources=VCPU:1", **HEADERS
        )
        assert resp.status == 200

    watcher = follower.Follower(db, gate.Gate(fallback_cloud.reader, 2), idle=60)
    refresh.follow(db, True)
    try:
        # The whole read at warm() counted as a comparison: none is due
        # until VERIFY_EVERY_S later.
        monkeypatch.setattr(verify, "VERIFY_EVERY_S", 60.0)
        watcher.step()
        assert compared == []
        monkeypatch.setattr(verify, "VERIFY_EVERY_S", 0.0)  # always due
        watcher.step()
        assert len(compared) == 1
        search()
        assert len(compared) == 1  # left to the follower
        watcher.step()
        assert len(compared) == 2
        monkeypatch.setattr(verify, "FOLLOWED_VERIFY_S", 0.0)  # fallen behind
        monkeypatch.setattr(verify, "BOUND_TOOK", 0)
        search()
        assert len(compared) == 3
    finally:
        refresh.follow(db, False)
    monkeypatch.setattr(verify, "FOLLOWED_VERIFY_S", 60.0)
    search()  # no follower: the request compares when due
    assert len(compared) == 4


def test_a_catalog_read_whole_answers_at_once_without_a_comparison(cloud, monkeypatch):
    """A worker forked after its master read the catalog whole (warm)
    answers its first search from it without comparing it with the
    database first: the whole read found it right."""
    compared = []
    real = fingerprint.of_database
    monkeypatch.setattr(
        fingerprint, "of_database", lambda conn: compared.append(conn) or real(conn)
    )
    rp = _new_host(cloud)
    refresh._CACHES[cloud.reader_db].catalog = None
    refresh.warm(cloud.reader_db)
    watcher = follower.Follower(cloud.reader_db, gate.Gate(cloud.reader, 2))
    refresh.follow(cloud.reader_db, True)
    try:
        watcher.step()
        resp = wsgi_client.call(
            cloud.reader, "/allocation_candidates?resources=VCPU:1", **HEADERS
        )
    finally:
        refresh.follow(cloud.reader_db, False)
    assert resp.status == 200
    found = [list(r["allocations"]) for r in resp.json()["allocation_requests"]]
    assert found == [[rp]]
    assert compared == []


def test_an_overdue_comparison_is_made_by_the_next_request_first(cloud):
    """What keeps such a request out of granian's event loop
    (``cmd/rsgi``): ``compares_first`` is true from when the comparison
    is overdue until a request has made it."""
    db = cloud.reader_db
    rp = _new_host(cloud)
    assert not refresh.compares_first(db)
    refresh._CACHES[db].verified_at -= 24 * 3600
    assert refresh.compares_first(db)
    resp = wsgi_client.call(cloud.reader, "/resource_providers/" + rp, **HEADERS)
    assert resp.status == 200
    assert not refresh.compares_first(db)


def test_an_idle_worker_summarises_the_trees_its_next_search_reads(cloud, monkeypatch):
    monkeypatch.setattr(catalog_index, "WARM_TREES", 2)
    gated = gate.Gate(cloud.reader, 2)
    watcher = follower.Follower(cloud.reader_db, gated, idle=0)
    watcher.step()
    hosts = [_new_host(cloud) for _ in range(3)]
    assert watcher.step() == "deltas"
    catalog = _catalog(cloud.reader_db)
    roots = [r for r, u in catalog.uuids.items() if u in hosts]

    def summarised():
        derived = catalog.derived_by_tree
        return {r: derived[r].summaries if r in derived else None for r in roots}

    assert sum(s is not None for s in summarised().values()) == 2
    assert watcher.step() == "none"
    made = summarised()
    assert None not in made.values()
    # With their JSON in the newest microversions' form.
    written = {r: dict(made[r].json) for r in roots}
    assert all(len(json) == 1 for json in written.values())
    # The next search takes them as made, and its answer shows them as
    # written.
    resp = wsgi_client.call(gated, "/allocation_candidates?resources=VCPU:1", **HEADERS)
    assert resp.status == 200
    assert _catalog(cloud.reader_db) is catalog
    assert all(summarised()[r] is made[r] for r in roots)
    assert {r: made[r].json for r in roots} == written
    shown = resp.json()["provider_summaries"]
    for rp in hosts:
        assert shown[rp]["resources"] == {"VCPU": {"capacity": 4, "used": 0}}
        assert shown[rp]["traits"] == []
        assert shown[rp]["root_provider_uuid"] == rp
        assert shown[rp]["parent_provider_uuid"] is None


def test_an_idle_worker_summarises_new_trees_without_walking_the_catalog(
    cloud, monkeypatch
):
    """The trees a load just added (nested, with usage on a child) are
    summarised by the idle worker's follower from their own providers:
    the catalog's columns, which are made from every provider, are not
    made for it (issue 45: a cost per look that grew with the cloud);
    the next search takes the summaries as made, and the trees' usage is
    the same bytes once the columns are made (what a search that makes
    them compares the kept summaries' with)."""
    monkeypatch.setattr(catalog_index, "WARM_TREES", 10)
    gated = gate.Gate(cloud.reader, 2)
    watcher = follower.Follower(cloud.reader_db, gated, idle=0)
    watcher.step()
    hosts = []
    for _ in range(2):
        host = _new_host(cloud)
        child = cloud.provider("numa-%s" % uuid.uuid4(), parent=host)
        cloud.inventories(child, VCPU=8, MEMORY_MB=1024)
        hosts.append((host, child))
    consumer = str(uuid.uuid4())
    cloud.write(
        "/allocations/" + consumer,
        body={
            "allocations": {hosts[1][1]: {"resources": {"VCPU": 3}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    assert watcher.step() == "deltas"
    catalog = _catalog(cloud.reader_db)
    roots = [r for r, u in catalog.uuids.items() if u in {h for h, _ in hosts}]
    derived = catalog.derived_by_tree
    made = {r: derived[r].summaries for r in roots}
    assert None not in made.values()
    assert catalog.columns is None

    resp = wsgi_client.call(gated, "/allocation_candidates?resources=VCPU:1", **HEADERS)
    assert resp.status == 200
    assert _catalog(cloud.reader_db) is catalog
    assert all(derived[r].summaries is made[r] for r in roots)
    index = catalog_index.CatalogIndex(
        None, catalog, used=refresh.used_of(cloud.reader_db, catalog)
    )
    classes = sorted(index.used.rp)
    every = list(catalog.roots)
    by_members = index.tree_usage(classes, every)
    assert catalog.columns is None
    columns.of(catalog)
    assert index.tree_usage(classes, every) == by_members
    assert {r: made[r].usage for r in roots} == {r: by_members[r] for r in roots}
    shown = resp.json()["provider_summaries"]
    assert shown[hosts[0][1]]["resources"]["VCPU"] == {"capacity": 8, "used": 0}
    assert shown[hosts[1][1]]["resources"]["VCPU"] == {"capacity": 8, "used": 3}
    assert shown[hosts[1][0]]["resources"]["VCPU"] == {"capacity": 4, "used": 0}
