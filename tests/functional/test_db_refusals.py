"""Each class of database refusal, on each backend, as a client meets it
(doc/operations.md "Database faults"): the driver's own exception, with
the code (or message) the server sends, raised where the driver would
raise it (a listener on the engine, just before the statement is sent),
then what the API answers. Never a 500; nothing half written; the next
request is served again."""

import contextlib
import re
import sqlite3
import threading
import time
import uuid

import MySQLdb
import psycopg
import psycopg.errors
import pymysql
import pytest
import sqlalchemy as sa

from tests import fixtures
from tests import helpers

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}

# What each class answers: status, words of the detail, Retry-After.
READ_ONLY = (503, "refuses writes", True)
FULL = (503, "no room left", True)
AWAY = (503, "unavailable", True)
INTERRUPTED = (503, "cancelled or killed", True)
OVER_BUDGET = (503, "ran longer", True)
DEADLOCK = (409, "kept refusing this write", False)


def gone(name=None):
    """A row gone under the write, the answer naming what."""
    named = " (%s)" % name if name else ""
    return (409, "removed or renumbered by another writer meanwhile%s:" % named, 0)


# backend -> (code, the server's message (cut short), answer, also met by
# reads)
FAULTS = {
    "mysql": [
        (1290, "The MariaDB server is running with the --read-only", READ_ONLY, 0),
        (1836, "Running in read-only mode", READ_ONLY, 0),
        (1792, "Cannot execute statement in a READ ONLY transaction", READ_ONLY, 0),
        (1021, "Disk full (./ib_logfile0); waiting for someone", FULL, 0),
        (1114, "The table 'resource_providers' is full", FULL, 0),
        (1040, "Too many connections", AWAY, 1),
        (1203, "User placement already has more than 'max_user_connections'", AWAY, 1),
        (1226, "User 'placement' has exceeded the 'max_queries_per_hour'", AWAY, 1),
        (1037, "Out of memory; restart server and try again", AWAY, 1),
        (1030, 'Got error 28 "No space left on device" from storage engine', FULL, 0),
        (2006, "MySQL server has gone away", AWAY, 1),
        (2013, "Lost connection to MySQL server during query", AWAY, 1),
        (1317, "Query execution was interrupted", INTERRUPTED, 1),
        (1969, "Query execution was interrupted (max_statement_time", OVER_BUDGET, 1),
        (1213, "Deadlock found when trying to get lock", DEADLOCK, 0),
        (1205, "Lock wait timeout exceeded; try restarting", DEADLOCK, 0),
        (1048, "Column 'project_id' cannot be null", gone("project_id"), 0),
        (
            1452,
            "a foreign key constraint fails (... FOREIGN KEY (`root_id`)",
            gone("root_id"),
            0,
        ),
    ],
    "postgresql": [
        ("25006", "cannot execute INSERT in a read-only transaction", READ_ONLY, 0),
        ("53100", "could not extend file: No space left on device", FULL, 0),
        ("53300", "sorry, too many clients already", AWAY, 1),
        ("53200", "out of memory", AWAY, 1),
        ("57P05", "terminating connection due to idle-session timeout", AWAY, 1),
        ("58030", 'could not extend file "x": No space left on device', FULL, 0),
        ("57014", "canceling statement due to user request", INTERRUPTED, 1),
        ("57014", "canceling statement due to statement timeout", OVER_BUDGET, 1),
        ("40001", "could not serialize access due to concurrent update", DEADLOCK, 0),
        ("40P01", "deadlock detected", DEADLOCK, 0),
        ("23502", 'null value in column "user_id" of relation "x"', gone("user_id"), 0),
        ("23503", "violates\nDETAIL:  Key (a)=(5) is not present in", gone("a"), 0),
    ],
    "sqlite": [
        (None, "attempt to write a readonly database", READ_ONLY, 0),
        (None, "database or disk is full", FULL, 0),
        (None, "disk I/O error", AWAY, 1),
        (None, "database is locked", DEADLOCK, 0),
        (
            None,
            "NOT NULL constraint failed: consumers.project_id",
            gone("consumers.project_id"),
            0,
        ),
        (None, "FOREIGN KEY constraint failed", gone(), 0),
    ],
}
# The same server through mysqlclient: its errors carry the same numbers.
FAULTS["mysqldb"] = FAULTS["mysql"]
CASES = [
    pytest.param(backend, *fault, id="%s-%s-%s" % (backend, fault[0], fault[2][1]))
    for backend, faults in FAULTS.items()
    for fault in faults
]
DEADLOCKS = [
    pytest.param(backend, code, message, id="%s-%s" % (backend, code))
    for backend, faults in FAULTS.items()
    for code, message, answer, _ in faults
    if answer is DEADLOCK
]


def driver_error(backend, code, message):
    """The exception the backend's driver raises for ``code``."""
    if backend == "mysql":
        # As pymysql.err.raise_mysql_exception picks the class.
        cls = pymysql.err.error_map.get(
            code,
            pymysql.err.InternalError if code < 1000 else pymysql.err.OperationalError,
        )
        return cls(code, message)
    if backend == "mysqldb":
        # As MySQLdb's C module picks the class, for the codes above.
        cls = {1048: MySQLdb.IntegrityError, 1452: MySQLdb.IntegrityError}.get(
            code, MySQLdb.OperationalError
        )
        return cls(code, message)
    if backend == "postgresql":
        return psycopg.errors.lookup(code)(message)
    if "constraint failed" in message:
        return sqlite3.IntegrityError(message)
    return sqlite3.OperationalError(message)


class Refusing:
    """Makes ``engine`` raise ``error()`` instead of sending a statement
    matching ``pattern``, ``times`` times (None: every time)."""

    def __init__(self, engine, error, pattern, times=None):
        self.engine, self.error = engine, error
        self.pattern = re.compile(pattern, re.IGNORECASE)
        self.left = times
        self.raised = 0

    def _statement(self, conn, cursor, statement, *args):
        if self.left == 0 or not self.pattern.match(statement):
            return
        if self.left is not None:
            self.left -= 1
        self.raised += 1
        raise self.error()

    def __enter__(self):
        sa.event.listen(self.engine, "before_cursor_execute", self._statement)
        return self

    def __exit__(self, *exc):
        sa.event.remove(self.engine, "before_cursor_execute", self._statement)


WRITE = r"\s*(INSERT|UPDATE|DELETE)\b"
READ = r"\s*SELECT\b"


@pytest.fixture(scope="module")
def served():
    """``of(backend)``: (client, db) of an app on a fresh database of
    ``backend``, made at first use and shared by the module's tests."""
    made = {}
    with contextlib.ExitStack() as stack:

        def of(backend):
            if backend not in made:
                fixtures.require_backend(backend)
                app, db = stack.enter_context(fixtures.app(backend))
                made[backend] = helpers.wsgi_client(app, ADMIN), db
            return made[backend]

        yield of


def _assert_answer(resp, answer):
    status, words, retry_after = answer
    assert resp.status_code == status, resp.text
    (error,) = resp.json()["errors"]
    assert error["status"] == status
    assert words in error["detail"], error["detail"]
    assert error["request_id"] == resp.headers["x-openstack-request-id"]
    if retry_after:
        assert int(resp.headers["retry-after"]) > 0
    if status == 409:
        assert error["code"] == "placement.concurrent_update"


def _write_refused(client, db, error, answer):
    name = "rp-%s" % uuid.uuid4().hex[:8]
    with Refusing(db.engine, error, WRITE) as refusing:
        resp = client.post("/resource_providers", json={"name": name})
    assert refusing.raised
    _assert_answer(resp, answer)
    # Nothing half written, and the next write goes through.
    found = client.get("/resource_providers", params={"name": name})
    assert found.json()["resource_providers"] == []
    assert client.post("/resource_providers", json={"name": name}).status_code == 200


@pytest.mark.parametrize("backend,code,message,answer,reads", CASES)
def test_a_refusal(served, backend, code, message, answer, reads):
    client, db = served(backend)

    def error():
        return driver_error(backend, code, message)

    _write_refused(client, db, error, answer)
    if not reads:
        # A read never meets it: reads go on answering.
        with Refusing(db.engine, error, WRITE):
            assert client.get("/resource_providers").status_code == 200
        return
    with Refusing(db.engine, error, READ) as refusing:
        resp = client.get("/traits")
    assert refusing.raised
    _assert_answer(resp, answer)
    assert client.get("/traits").status_code == 200


@pytest.mark.parametrize("backend,code,message", DEADLOCKS)
def test_a_deadlock_once_is_retried(served, backend, code, message):
    client, db = served(backend)
    name = "rp-%s" % uuid.uuid4().hex[:8]

    def error():
        return driver_error(backend, code, message)

    with Refusing(db.engine, error, WRITE, times=1) as refusing:
        resp = client.post("/resource_providers", json={"name": name})
    assert refusing.raised == 1
    assert resp.status_code == 200, resp.text
    assert resp.json()["name"] == name


def test_a_full_sqlite_file():
    """For real: a SQLite file that may not grow (``max_page_count`` at its
    size, as a full disk leaves it). Writes fill the free room of its
    pages, then answer 503 saying there is no room, never 500; what they
    wrote before is whole, and reads answer."""
    with fixtures.app("sqlite") as (app, db):
        client = helpers.wsgi_client(app, ADMIN)

        def no_growth(dbapi_conn, record):
            pages = dbapi_conn.execute("PRAGMA page_count").fetchone()[0]
            dbapi_conn.execute("PRAGMA max_page_count = %d" % pages)

        sa.event.listen(db.engine, "connect", no_growth)
        db.engine.dispose()
        created = []
        for i in range(200):
            name = "rp-%d-%s" % (i, "x" * 150)
            resp = client.post("/resource_providers", json={"name": name})
            if resp.status_code != 200:
                break
            created.append(name)
        assert created, "no room even for one provider"
        _assert_answer(resp, FULL)
        listed = client.get("/resource_providers").json()["resource_providers"]
        assert sorted(rp["name"] for rp in listed) == sorted(created)


# The session of the request's statement, waiting for a row lock, and
# how an operator stops it.
WAITING = {
    "mysql": (
        "SELECT id FROM information_schema.processlist WHERE db = DATABASE()"
        " AND id <> CONNECTION_ID() AND info LIKE '%%FOR UPDATE%%'",
        "KILL QUERY %d",
    ),
    "postgresql": (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'",
        "SELECT pg_cancel_backend(%d)",
    ),
}
WAITING["mysqldb"] = WAITING["mysql"]


@pytest.mark.parametrize("backend", sorted(WAITING))
def test_a_statement_killed_while_it_waits(served, backend):
    """For real: a write waits behind an operator's ``SELECT ... FOR
    UPDATE`` of its provider, and the operator kills its statement
    (``KILL QUERY``, ``pg_cancel_backend``): 503 saying so, nothing
    written, and the write goes through once the lock is gone."""
    client, db = served(backend)
    uuid_ = client.post("/resource_providers", json={"name": "locked"}).json()["uuid"]
    path = "/resource_providers/%s/inventories" % uuid_
    body = {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}
    find, kill = WAITING[backend]
    answered = []
    with db.engine.connect() as locker, db.engine.connect() as operator:
        locker.execute(
            sa.text("SELECT id FROM resource_providers WHERE uuid = :u FOR UPDATE"),
            {"u": uuid_},
        )
        writer = threading.Thread(
            target=lambda: answered.append(client.put(path, json=body))
        )
        writer.start()
        waiting = []
        deadline = time.monotonic() + 20
        while not waiting and time.monotonic() < deadline:
            time.sleep(0.05)
            waiting = operator.exec_driver_sql(find).scalars().all()
            operator.rollback()
        assert len(waiting) == 1, waiting
        operator.exec_driver_sql(kill % waiting[0])
        writer.join(30)
        locker.rollback()
    (resp,) = answered
    _assert_answer(resp, INTERRUPTED)
    assert client.get(path).json()["inventories"] == {}
    assert client.put(path, json=body).status_code == 200
