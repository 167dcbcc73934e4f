"""One comparison of the provider catalog with the database per cloud
(``catalog/currency.py``, "Writes by other writers" in
doc/architecture.md): however many processes follow the catalog, one of
them (the lease holder) runs the fingerprint statement per period and the
others compare their own catalog with what it published; a write by SQL
that bypasses the change log is still seen by every process one period
after the holder's comparison; a holder that stops publishing loses its
lease to the next process that looks. Each ``Database`` here stands for a
process (its own catalog and lease identity); periods are driven by
calling the followers, not by sleeping. On SQLite (one host's file)
there is no lease: each process compares by itself and writes nothing."""

import contextlib
import os
import uuid

import pytest
import sqlalchemy as sa

from placement.cmd import follower
from placement.cmd import gate
from placement.db import tables
from placement.objects.catalog import currency
from placement.objects.catalog import fingerprint
from placement.objects.catalog import precheck
from placement.objects.catalog import refresh
from placement.objects.catalog import verify
from tests import fixtures
from tests.functional import test_candidate_catalog as catalog_tests

PROCESSES = 3


class Statements:
    """Fingerprint statements run, per database (process)."""

    def __init__(self, monkeypatch):
        self.by_engine: dict = {}
        real = fingerprint.of_database

        def counted(conn):
            self.by_engine[conn.engine] = self.by_engine.get(conn.engine, 0) + 1
            return real(conn)

        monkeypatch.setattr(fingerprint, "of_database", counted)

    def total(self):
        return sum(self.by_engine.values())

    def of(self, db):
        return self.by_engine.get(db.engine, 0)


SERVER_BACKENDS = tuple(b for b in fixtures.BACKENDS if b != "sqlite") + ("galera",)


@pytest.fixture(params=SERVER_BACKENDS)
def cloud(request, monkeypatch):
    """(Cloud, [(app, db, Follower)] of PROCESSES processes, Statements)."""
    yield from _cloud(request.param, monkeypatch)


@pytest.fixture
def sqlite_cloud(monkeypatch):
    yield from _cloud("sqlite", monkeypatch)


def _cloud(backend, monkeypatch):
    fixtures.require_backend(backend)
    # Every step is a period: the comparison is always due.
    monkeypatch.setattr(verify, "VERIFY_EVERY_S", 0.0)
    # No cheap look: the holder's comparison always runs the statement.
    monkeypatch.setattr(precheck, "look", lambda db: None)
    with (
        fixtures.database_url(backend) as url,
        # The comparison every period is the fallback's (with the
        # triggers it is a safety net minutes apart).
        catalog_tests.two_workers(url, url, triggers=False) as cloud,
        contextlib.ExitStack() as stack,
    ):
        conf = fixtures.configure()
        processes = []
        for _ in range(PROCESSES):
            app, db = stack.enter_context(catalog_tests._worker(url, conf))
            refresh.warm(db)
            refresh.follow(db, True)
            stack.callback(refresh.follow, db, False)
            processes.append((app, db, follower.Follower(db, gate.Gate(app, 2))))
        yield cloud, processes, Statements(monkeypatch)


def _period(processes):
    """Every process's follower looks once; what each comparison found."""
    return [refresh.verify_if_due(db) for _, db, _ in processes]


def _holder(db):
    with db.engine.connect() as conn:
        return currency.read(conn).holder


def _identity(db):
    return str(refresh._cache(db).me)


def _candidates(cloud, app):
    resp = cloud.call(app, "/allocation_candidates?resources=VCPU:1", status=200)
    return set(resp.json()["provider_summaries"])


def test_one_statement_per_period_however_many_processes(cloud):
    cloud, processes, statements = cloud
    rp = cloud.provider("host")
    cloud.inventories(rp, VCPU=4)
    # The first to look takes the free lease and compares; the others
    # compare their catalog with what it published.
    assert _period(processes) == ["same"] * PROCESSES
    assert _holder(processes[0][1]) == _identity(processes[0][1])
    assert statements.total() == 1
    for n in range(2, 6):
        assert _period(processes) == ["same"] * PROCESSES
        assert statements.total() == n
        assert statements.of(processes[0][1]) == n
    # A structural write through the service: the others follow the log
    # to the counts the holder published, and compare there.
    other = cloud.provider("other")
    cloud.inventories(other, VCPU=4)
    assert _period(processes) == ["same"] * PROCESSES
    assert statements.total() == 6
    for _, db, _ in processes[1:]:
        assert refresh._cache(db).catalog.stamp == catalog_tests._stamp(db)
    for app, _, _ in processes:
        assert _candidates(cloud, app) == {rp, other}


def test_a_write_by_sql_is_seen_by_every_process_a_period_after_the_holder(cloud):
    cloud, processes, statements = cloud
    rp = cloud.provider("host")
    cloud.inventories(rp, VCPU=4)
    assert _period(processes) == ["same"] * PROCESSES
    for app, _, _ in processes:
        assert _candidates(cloud, app) == {rp}
    new = _provider_by_sql(processes[0][1])
    before = statements.total()
    # Processes that look before the holder's next comparison have
    # nothing new to compare with; in the period of the holder's
    # comparison, the others that look after it see the write.
    readers = processes[1:]
    assert _period(readers) == [None] * len(readers)
    assert _period(processes) == ["foreign"] * PROCESSES
    # The holder's statement, and one per process in the snapshot it
    # reads its catalog again in.
    assert statements.total() - before == PROCESSES
    for app, _, _ in processes:
        assert _candidates(cloud, app) == {rp, new}
    assert _period(processes) == ["same"] * PROCESSES


def test_a_holder_that_stops_publishing_loses_its_lease(cloud):
    cloud, processes, statements = cloud
    (_, first, _), (_, second, _), _ = processes
    assert _period(processes) == ["same"] * PROCESSES
    assert _holder(first) == _identity(first)
    # The holder dies: nothing is published for longer than the lease.
    with first.engine.begin() as conn:
        conn.execute(
            sa.update(tables.catalog_currency).values(
                taken_us=tables.catalog_currency.c.taken_us
                - int(10e6 * currency.LEASE_S)
            )
        )
    before = statements.of(second)
    assert _period(processes[1:]) == ["same"] * (PROCESSES - 1)
    assert _holder(second) == _identity(second)
    assert statements.of(second) == before + 1
    # The old holder, back, finds the lease taken and compares with the
    # new holder's comparisons.
    before = statements.total()
    assert _period(processes) == ["same"] * PROCESSES
    assert statements.total() == before + 1
    assert _holder(second) == _identity(second)


def test_a_process_without_the_published_counts_compares_itself_when_due(
    cloud, monkeypatch
):
    """A process whose catalog never held the counts the holder published
    (they moved on meanwhile) cannot compare with it: past OWN_AFTER_S it
    runs the statement itself, on its follower's thread."""
    cloud, processes, statements = cloud
    (_, first, _), (_, second, _), _ = processes
    assert _period(processes) == ["same"] * PROCESSES
    assert refresh.verify_if_due(first) == "same"
    # The second process never held the published counts.
    refresh._cache(second).history.clear()
    cache = refresh._cache(second)
    monkeypatch.setattr(cache, "_remember", lambda *a, **kw: None)
    monkeypatch.setattr(verify, "OWN_AFTER_S", float("inf"))
    before = statements.of(second)
    assert refresh.verify_if_due(second) is None
    assert statements.of(second) == before
    monkeypatch.setattr(verify, "OWN_AFTER_S", 0.0)
    assert refresh.verify_if_due(first) == "same"
    assert refresh.verify_if_due(second) == "same"
    assert statements.of(second) == before + 1


def test_on_sqlite_each_process_compares_itself_and_writes_nothing(sqlite_cloud):
    """No lease row on SQLite: a follower's period leaves the database file
    as it was (another writer's transaction that read before a commit of
    ours could not write after it), and each process sees a write by SQL
    at its own next comparison."""
    cloud, processes, statements = sqlite_cloud
    rp = cloud.provider("host")
    cloud.inventories(rp, VCPU=4)
    assert _period(processes) == ["same"] * PROCESSES
    assert statements.total() == PROCESSES
    db = processes[0][1]
    files = [db.engine.url.database + suffix for suffix in ("", "-wal")]
    before = [_file_state(f) for f in files]
    for _ in range(3):
        _period(processes)
    assert [_file_state(f) for f in files] == before
    with db.engine.connect() as conn:
        row = currency.read(conn)
    assert (row.holder, row.beat) == (None, 0)
    new = _provider_by_sql(db)
    assert _period(processes) == ["foreign"] * PROCESSES
    for app, _, _ in processes:
        assert _candidates(cloud, app) == {rp, new}


def _file_state(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _provider_by_sql(db):
    """A provider with VCPU, inserted behind the service's back."""
    new = str(uuid.uuid4())
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO resource_providers (uuid, name, generation)"
                " VALUES (:uuid, 'by-sql', 0)"
            ),
            {"uuid": new},
        )
        conn.execute(
            sa.text(
                "UPDATE resource_providers SET root_provider_id = id WHERE uuid = :uuid"
            ),
            {"uuid": new},
        )
        conn.execute(
            sa.text(
                "INSERT INTO inventories (resource_provider_id,"
                " resource_class_id, total, reserved, min_unit, max_unit,"
                " step_size, allocation_ratio) SELECT id, 0, 4, 0, 1, 4, 1,"
                " 1.0 FROM resource_providers WHERE uuid = :uuid"
            ),
            {"uuid": new},
        )
    return new
