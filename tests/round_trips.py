"""Round trips to the database server, counted where the driver sends them:
each command PyMySQL sends (a statement, COMMIT, ROLLBACK, a ping), each
batch psycopg sends and waits on (libpq's trace of the protocol: a simple
Query, or messages up to a Sync).

    with counted(db) as trips:
        ...
    trips  # one entry per round trip; None on SQLite (no server)
"""

import contextlib
import os
import tempfile

from sqlalchemy import event

from placement.db import engine as db_engine
from placement.db import transaction


@contextlib.contextmanager
def counted(db, monkeypatch):
    """The round trips of ``db``'s connections (both pools) meanwhile:
    MySQL, the SQL of each command; PostgreSQL, the frontend messages of
    each batch (e.g. "Parse Bind Describe Execute Sync"); None on SQLite.
    An idle connection's ping is one too: none is sent meanwhile (a slow
    machine may leave a connection idle between two requests)."""
    monkeypatch.setattr(db_engine, "PING_AFTER_IDLE_S", 3600.0)
    counter = {"mysql": _mysql, "postgresql": _postgresql}.get(db.dialect)
    if counter is None:
        yield None
        return
    with counter(db, monkeypatch) as trips:
        yield trips


@contextlib.contextmanager
def _mysql(db, monkeypatch):
    from pymysql import connections

    sent = []
    original = connections.Connection._execute_command

    def counting(conn, command, sql):
        sent.append(sql.decode() if isinstance(sql, bytes) else sql)
        return original(conn, command, sql)

    monkeypatch.setattr(connections.Connection, "_execute_command", counting)
    try:
        yield sent
    finally:
        monkeypatch.setattr(connections.Connection, "_execute_command", original)


@contextlib.contextmanager
def _postgresql(db, monkeypatch):
    trips = []
    # A connection is traced from its checkout: reads of one statement
    # take theirs from the pool each time (none kept by a thread).
    monkeypatch.setattr(transaction, "KEEP_S", 0.0)
    fd, path = tempfile.mkstemp(prefix="placement-pq-trace-")
    engines = {db.engine, db_engine.autocommit(db.engine)}

    def checkout(dbapi_conn, record, proxy):
        dbapi_conn.pgconn.trace(fd)

    def checkin(dbapi_conn, record):
        # PQuntrace flushes what was traced.
        dbapi_conn.pgconn.untrace()

    for engine in engines:
        event.listen(engine, "checkout", checkout)
        event.listen(engine, "checkin", checkin)
    try:
        yield trips
    finally:
        for engine in engines:
            event.remove(engine, "checkout", checkout)
            event.remove(engine, "checkin", checkin)
        with open(path) as f:
            trips.extend(_batches(f.read()))
        os.close(fd)
        os.unlink(path)


def _batches(trace):
    """The frontend messages of libpq's ``trace``, one string per round
    trip. psycopg prepares a statement the fifth time a connection runs it
    (a Parse alone, in a round trip of its own, once per connection and
    statement): not counted, it is not the request's."""
    batch = []
    for line in trace.splitlines():
        fields = line.split("\t")
        if len(fields) < 4 or fields[1] != "F":
            continue
        batch.append(fields[3])
        if fields[3] in ("Query", "Sync"):
            if batch != ["Parse", "Sync"]:
                yield " ".join(batch)
            batch = []
