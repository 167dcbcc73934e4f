"""The pool pings a connection before use only when it has been idle: a
connection the server closed while it sat in the pool is replaced
without the request noticing, and back-to-back requests send no ping."""

import time

import pytest

from placement.db import api as db_api
from placement.db import engine as db_engine
from tests import fixtures


@pytest.fixture(params=("mysql", "mysqldb", "postgresql"))
def engine(request):
    fixtures.require_backend(request.param)
    with fixtures.database_url(request.param) as url:
        engine = db_api.create_engine(url)
        admin = fixtures._admin(request.param)
        try:
            yield request.param, engine, admin
        finally:
            engine.dispose()
            admin.dispose()


def _session_id(backend, conn):
    dbapi = conn.connection.dbapi_connection
    return dbapi.info.backend_pid if backend == "postgresql" else dbapi.thread_id()


def _kill(backend, admin, session):
    with admin.connect() as conn:
        if backend != "postgresql":
            conn.exec_driver_sql("KILL CONNECTION %d" % session)
        else:
            conn.exec_driver_sql("SELECT pg_terminate_backend(%d)" % session)


@pytest.fixture
def pings(engine, monkeypatch):
    _, eng, _ = engine
    sent = []
    ping = eng.dialect.do_ping
    monkeypatch.setattr(
        eng.dialect, "do_ping", lambda dbapi_conn: sent.append(1) or ping(dbapi_conn)
    )
    return sent


def test_busy_connection_is_not_pinged(engine, pings):
    _, eng, _ = engine
    for _ in range(5):
        with eng.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
    assert pings == []


def test_idle_connection_closed_by_the_server_is_replaced(engine, pings, monkeypatch):
    backend, eng, admin = engine
    with eng.connect() as conn:
        session = _session_id(backend, conn)
    monkeypatch.setattr(db_engine, "PING_AFTER_IDLE_S", 0.05)
    _kill(backend, admin, session)
    time.sleep(0.1)
    with eng.connect() as conn:
        assert conn.exec_driver_sql("SELECT 1").scalar() == 1
        assert _session_id(backend, conn) != session
    # The idle one only: the new connection is used at once.
    assert pings == [1]
