"""The catalog's comparison with the database (``refresh.Cache.verify``)
skips the fingerprint statement, which reads every row of the catalog's
tables, when a cheap look (``catalog/precheck.py``) shows they have not
changed since the last comparison, on SQLite and MariaDB; every change by
SQL that bypasses the service (insert, update, delete, TRUNCATE, a table
dropped and created again with other rows, a transaction open across the
comparison) still has the next comparison run it and catch the change.
PostgreSQL has no such look: the statement runs every time."""

import time
import uuid

import pytest
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import precheck
from placement.objects.catalog import refresh
from placement.objects.catalog import verify
from tests import fixtures
from tests import wsgi_client

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}
# How long a MariaDB look may take to say "unchanged" after a write: the
# marks have whole seconds, and another session's open transaction on the
# shared server holds the bound back while it lasts.
SETTLE_S = 20


def _call(app, path, method="GET", body=None):
    resp = wsgi_client.call(app, path, method=method, body=body, **HEADERS)
    assert resp.status == 200, resp.body
    return resp


def _candidates(app):
    return set(
        _call(app, "/allocation_candidates?resources=VCPU:1").json()[
            "provider_summaries"
        ]
    )


def _host(app, name):
    rp = _call(app, "/resource_providers", "POST", {"name": name}).json()["uuid"]
    _call(
        app,
        "/resource_providers/%s/inventories" % rp,
        "PUT",
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
    )
    return rp


class Fingerprints:
    """Counts the fingerprint statements (whole, or of some tables) run
    on an engine."""

    def __init__(self, engine):
        self.count = 0
        sa.event.listen(engine, "before_cursor_execute", self._seen)
        self.engine = engine

    def _seen(self, conn, cursor, statement, parameters, context, executemany):
        # Each part of the statement is a SELECT of (part, count(*),
        # coalesce(sum(row hash))).
        if "count(*) AS count_" in statement and "coalesce(sum((" in statement:
            self.count += 1

    def close(self):
        sa.event.remove(self.engine, "before_cursor_execute", self._seen)


@pytest.fixture(params=fixtures.BACKENDS)
def served(request):
    fixtures.require_backend(request.param)
    # The comparison each period is the fallback's.
    with fixtures.app(request.param, triggers=False) as (app, db):
        hosts = {_host(app, "a"), _host(app, "b")}
        assert _candidates(app) == hosts
        counted = Fingerprints(db.engine)
        try:
            yield app, db, hosts, counted
        finally:
            counted.close()


def _verify(db, counted):
    """What one comparison found, and how many fingerprint statements it
    ran."""
    before = counted.count
    how = refresh._cache(db).verify(db)
    return how, counted.count - before


def _settled(db, counted):
    """Compare until a comparison finds the tables unchanged (where a look
    exists): the first comparisons after a write run the statement."""
    how, ran = _verify(db, counted)
    assert (how, ran) == ("same", 1)
    if db.dialect == "postgresql":
        return
    deadline = time.monotonic() + SETTLE_S
    while how != "unchanged":
        assert time.monotonic() < deadline, "the look never settled"
        time.sleep(0.3)
        how, ran = _verify(db, counted)
        assert ran == (0 if how == "unchanged" else 1)


def test_an_unchanged_database_is_not_read_again(served):
    app, db, hosts, counted = served
    _settled(db, counted)
    for _ in range(3):
        if db.dialect == "postgresql":
            assert _verify(db, counted) == ("same", 1)
        else:
            assert _verify(db, counted) == ("unchanged", 0)
    # Requests past the period compare through the same path.
    time.sleep(verify.VERIFY_EVERY_S + 0.05)
    before = counted.count
    assert _candidates(app) == hosts
    assert counted.count - before == (1 if db.dialect == "postgresql" else 0)


def _provider_id(conn, rp):
    return conn.execute(
        sa.text("SELECT id FROM resource_providers WHERE uuid = :u"), {"u": rp}
    ).scalar_one()


def _insert(conn, hosts):
    new = str(uuid.uuid4())
    conn.execute(
        sa.text(
            "INSERT INTO resource_providers (uuid, name, generation)"
            " VALUES (:u, 'by-sql', 0)"
        ),
        {"u": new},
    )
    conn.execute(
        sa.text("UPDATE resource_providers SET root_provider_id = id WHERE uuid = :u"),
        {"u": new},
    )
    conn.execute(
        sa.text(
            "INSERT INTO inventories (resource_provider_id, resource_class_id,"
            " total, reserved, min_unit, max_unit, step_size, allocation_ratio)"
            " VALUES (:rp, 0, 4, 0, 1, 4, 1, 1.0)"
        ),
        {"rp": _provider_id(conn, new)},
    )
    return hosts | {new}


def _set(conn, rp, assignment):
    conn.execute(
        sa.text(
            "UPDATE inventories SET %s WHERE resource_provider_id = :rp" % assignment
        ),
        {"rp": _provider_id(conn, rp)},
    )


def _update(conn, hosts):
    rp = sorted(hosts)[0]
    _set(conn, rp, "reserved = total")
    return hosts - {rp}


def _delete(conn, hosts):
    rp = sorted(hosts)[1]
    conn.execute(
        sa.text("DELETE FROM inventories WHERE resource_provider_id = :rp"),
        {"rp": _provider_id(conn, rp)},
    )
    return hosts - {rp}


def _recreate(conn, hosts):
    """A restore: the inventories table dropped and created again, with
    another provider's rows only."""
    rp = sorted(hosts)[0]
    inventories = tables.inventories
    kept = [
        dict(row)
        for row in conn.execute(
            inventories.select().where(
                inventories.c.resource_provider_id == _provider_id(conn, rp)
            )
        ).mappings()
    ]
    tables.inventories.drop(conn)
    tables.inventories.create(conn)
    conn.execute(tables.inventories.insert(), kept)
    return {rp}


def _truncate(conn, hosts):
    if conn.dialect.name == "sqlite":
        conn.execute(sa.text("DELETE FROM inventories"))
    else:
        conn.execute(sa.text("TRUNCATE TABLE inventories"))
    return set()


@pytest.mark.parametrize("write", [_insert, _update, _delete, _recreate, _truncate])
def test_a_write_by_sql_has_the_next_comparison_read_the_tables(served, write):
    app, db, hosts, counted = served
    _settled(db, counted)
    with db.engine.begin() as conn:
        if conn.dialect.name == "mysql":
            conn.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 0")
        expected = write(conn, hosts)
    assert _verify(db, counted) == ("foreign", 1)
    assert _candidates(app) == expected


def _second(conn, query):
    return conn.execute(sa.text("SELECT UNIX_TIMESTAMP(%s)" % query)).scalar()


# The second of the last change InnoDB marked on inventories, and the
# start of the session's own transaction.
MARKED = (
    "(SELECT UPDATE_TIME FROM information_schema.TABLES"
    " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inventories')"
)
STARTED = (
    "(SELECT trx_started FROM information_schema.INNODB_TRX"
    " WHERE trx_mysql_thread_id = CONNECTION_ID())"
)


def _started(conn):
    """The second the connection's open transaction started. InnoDB's
    list of transactions is a copy renewed at most every 0.1 s, so one
    just begun may be missing from it for that long."""
    for _ in range(20):
        started = _second(conn, STARTED)
        if started is not None:
            return started
        time.sleep(0.11)
    pytest.fail("the open transaction never showed in INNODB_TRX")


def test_a_transaction_open_across_the_comparison_is_caught():
    """MariaDB marks a table changed at the start of the transaction that
    commits the change, in whole seconds: a transaction that began in the
    second of the last other change, and commits after a comparison's
    snapshot, leaves the mark as it was. The look's bound, the oldest open
    transaction, still has the next comparison read the tables."""
    fixtures.require_backend("mysql")
    with fixtures.app("mysql", triggers=False) as (app, db):
        first, second = sorted({_host(app, "a"), _host(app, "b")})
        assert _candidates(app) == {first, second}
        counted = Fingerprints(db.engine)
        try:
            with db.engine.connect() as open_:
                seen = []
                for _ in range(30):
                    # Start just after a whole second of the database's
                    # clock: a loaded machine's slow steps then still fit
                    # in that second.
                    now = open_.exec_driver_sql("SELECT UNIX_TIMESTAMP(NOW(6))")
                    now = float(now.scalar())
                    open_.rollback()
                    time.sleep(1.01 - now % 1)
                    trx = open_.begin()
                    _set(open_, first, "reserved = total")
                    with db.engine.begin() as other:
                        # A change every try: an UPDATE that changes no
                        # value leaves the mark as it was.
                        _set(other, second, "max_unit = IF(max_unit = 7, 6, 7)")
                    started = _started(open_)
                    seen.append((started, _second(open_, MARKED)))
                    if seen[-1][1] == started:
                        break
                    trx.rollback()
                else:
                    pytest.fail("no two transactions started in one second: %s" % seen)
                # The comparison reads the other change, not the open one.
                time.sleep(1.1)
                assert _verify(db, counted) == ("foreign", 1)
                trx.commit()
                assert _second(open_, MARKED) == started  # the mark stayed
            assert _verify(db, counted) == ("foreign", 1)
            assert _candidates(app) == {second}
        finally:
            counted.close()


def test_no_look_where_the_url_names_no_file(tmp_path):
    """A SQLite URI filename (or a database in memory) is no path to
    stat: there is no look, rather than one that never sees a change."""
    uri = "sqlite:///file:%s/placement.sqlite?mode=rwc&uri=true" % tmp_path
    for url in (uri, "sqlite://"):
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (id INTEGER)")
        assert precheck.look(db_api.Database(engine, fixtures.configure())) is None
        engine.dispose()
    assert (tmp_path / "placement.sqlite").exists()


@pytest.mark.galera
def test_no_look_on_a_galera_node():
    """The look's bound is untested against a cluster's appliers: on a
    Galera node the fingerprint runs every time."""
    fixtures.require_backend("galera")
    with fixtures.database_url("galera") as url:
        db = db_api.Database(sa.create_engine(url), fixtures.configure())
        try:
            tables.metadata.create_all(db.engine)
            assert precheck.look(db) is None
        finally:
            db.engine.dispose()


def test_no_look_without_the_process_privilege():
    """MariaDB refuses the InnoDB views to a user without PROCESS: no
    look then (the fingerprint runs every time), not a look that misses
    the open transactions."""
    fixtures.require_backend("mysql")
    with fixtures.database("mysql") as db:
        name = db.engine.url.database
        user = "p_%s" % uuid.uuid4().hex[:12]
        with db.engine.begin() as conn:
            conn.execute(sa.text("CREATE USER '%s'@'%%'" % user))
            conn.execute(sa.text("GRANT ALL ON %s.* TO '%s'@'%%'" % (name, user)))
        limited = sa.create_engine(db.engine.url.set(username=user, password=None))
        try:
            # Connected once, as a serving engine is before any comparison:
            # the dialect knows the server is MariaDB.
            limited.connect().close()
            refused = db_api.Database(limited, fixtures.configure())
            assert precheck.look(refused) is None
            assert precheck.look(db) is not None
            # Refused once, the engine's later comparisons do not ask again.
            asked = []
            sa.event.listen(
                limited, "before_cursor_execute", lambda *a: asked.append(1)
            )
            assert precheck.look(refused) is None
            assert asked == []
        finally:
            limited.dispose()
            with db.engine.begin() as conn:
                conn.execute(sa.text("DROP USER '%s'@'%%'" % user))


def test_only_the_tables_whose_marks_moved_are_read_again(served):
    """On MariaDB a look tells the tables apart: after claims (which bump
    providers' generations and nothing else of the catalog's tables) a
    comparison reads the providers again, not their inventories, traits
    and aggregates; a change by SQL to an inventory is still caught."""
    app, db, hosts, counted = served
    if db.dialect != "mysql":
        pytest.skip("a look tells tables apart on MariaDB only")
    _settled(db, counted)
    statements = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        if "coalesce(sum(" in statement:
            statements.append(statement)

    sa.event.listen(db.engine, "before_cursor_execute", seen)
    try:
        with db.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE resource_providers SET generation = generation + 1")
            )
        assert _verify(db, counted) == ("same", 1)
        assert len(statements) == 1
        assert "FROM resource_providers" in statements[0]
        assert "FROM inventories" not in statements[0]
        with db.engine.begin() as conn:
            hosts = _update(conn, hosts)
        how, _ = _verify(db, counted)
        assert how == "foreign"
        assert "FROM inventories" in statements[-1]
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", seen)
    assert _candidates(app) == hosts
