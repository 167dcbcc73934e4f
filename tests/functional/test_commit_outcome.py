"""An allocation write whose COMMIT fails says what happened, on SQLite,
MySQL and PostgreSQL: a non-2xx answer means nothing of it was written.

The failure is injected in the database layer (``Database.commit_fault``):
raised just after a COMMIT that succeeded (as a connection lost while its
answer was on the way, or a certification failure reported late on
Galera, would be), the write is answered as done, with exactly its rows;
raised just before the COMMIT is sent, the client gets a clean 409 (or a
503 for a lost connection) and nothing is written.
"""

import sqlite3
import uuid

import pytest
from sqlalchemy import exc as sa_exc

from placement.db import api as db_api
from tests import fixtures
from tests.functional.test_shared_database import _call
from tests.functional.test_shared_database import _host


@pytest.fixture(params=fixtures.BACKENDS)
def app(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        yield app, db


def _error(db, kind):
    """A DBAPIError of ``db``'s driver: a deadlock (retried) or a lost
    connection (503)."""
    if db.dialect == "mysql":
        import pymysql

        code = 1213 if kind == "deadlock" else 2013
        orig = pymysql.err.OperationalError(code, kind)
    elif db.dialect == "postgresql":
        import psycopg

        orig = (
            psycopg.errors.DeadlockDetected(kind)
            if kind == "deadlock"
            else psycopg.OperationalError("server closed the connection unexpectedly")
        )
    else:
        orig = sqlite3.OperationalError(
            "database is locked" if kind == "deadlock" else "disk I/O error"
        )
    error = sa_exc.OperationalError("COMMIT", None, orig)
    if kind == "lost":
        error.connection_invalidated = True
    return error


def _fail(db, point, kind, times):
    """Raise ``kind`` at ``point`` of the next ``times`` COMMITs."""
    left = [times]

    def fault(conn, at):
        if at == point and left[0]:
            left[0] -= 1
            raise _error(db, kind)

    db.commit_fault = fault


def _claim(rp, amount=1, generation=None):
    return {
        "allocations": {rp: {"resources": {"VCPU": amount}}},
        "project_id": "proj",
        "user_id": "user",
        "consumer_generation": generation,
        "consumer_type": "INSTANCE",
    }


def _usage(app, rp):
    usages = _call(app, "/resource_providers/%s/usages" % rp)
    assert usages.status == 200, usages.body
    return usages.json()["usages"]["VCPU"]


@pytest.mark.parametrize("kind", ["deadlock", "lost"])
def test_a_claim_committed_then_failed_is_answered_done(app, kind):
    app, db = app
    rp = _host(app, "rp")
    consumer = str(uuid.uuid4())
    _fail(db, db_api.AFTER_COMMIT, kind, 1)
    put = _call(app, "/allocations/" + consumer, "PUT", _claim(rp, 2))
    db.commit_fault = None
    assert put.status == 204, put.body
    got = _call(app, "/allocations/" + consumer).json()
    assert list(got["allocations"]) == [rp]
    assert got["allocations"][rp]["resources"] == {"VCPU": 2}
    assert got["consumer_generation"] == 1
    assert _usage(app, rp) == 2


def test_a_replacement_committed_then_failed_is_answered_done(app):
    app, db = app
    rp = _host(app, "rp")
    consumer = str(uuid.uuid4())
    assert _call(app, "/allocations/" + consumer, "PUT", _claim(rp)).status == 204
    _fail(db, db_api.AFTER_COMMIT, "deadlock", 1)
    put = _call(app, "/allocations/" + consumer, "PUT", _claim(rp, 3, generation=1))
    db.commit_fault = None
    assert put.status == 204, put.body
    got = _call(app, "/allocations/" + consumer).json()
    assert got["consumer_generation"] == 2
    assert got["allocations"][rp]["resources"] == {"VCPU": 3}
    assert _usage(app, rp) == 3


def test_several_consumers_committed_then_failed_are_answered_done(app):
    app, db = app
    rp = _host(app, "rp")
    consumers = [str(uuid.uuid4()) for _ in range(3)]
    body = {c: _claim(rp, n + 1) for n, c in enumerate(consumers)}
    _fail(db, db_api.AFTER_COMMIT, "deadlock", 1)
    post = _call(app, "/allocations", "POST", body)
    db.commit_fault = None
    assert post.status == 204, post.body
    for n, c in enumerate(consumers):
        got = _call(app, "/allocations/" + c).json()
        assert got["allocations"][rp]["resources"] == {"VCPU": n + 1}
        assert got["consumer_generation"] == 1
    assert _usage(app, rp) == 6


def test_a_delete_committed_then_failed_is_answered_done(app):
    app, db = app
    rp = _host(app, "rp")
    consumer = str(uuid.uuid4())
    assert _call(app, "/allocations/" + consumer, "PUT", _claim(rp)).status == 204
    _fail(db, db_api.AFTER_COMMIT, "deadlock", 1)
    deleted = _call(app, "/allocations/" + consumer, "DELETE")
    db.commit_fault = None
    assert deleted.status == 204, deleted.body
    assert _call(app, "/allocations/" + consumer).json()["allocations"] == {}
    assert _usage(app, rp) == 0


@pytest.mark.parametrize("kind, status", [("deadlock", 409), ("lost", 503)])
def test_a_claim_whose_commit_failed_wrote_nothing(app, kind, status):
    app, db = app
    rp = _host(app, "rp")
    consumer = str(uuid.uuid4())
    _fail(db, db_api.BEFORE_COMMIT, kind, 100)
    put = _call(app, "/allocations/" + consumer, "PUT", _claim(rp, 2))
    db.commit_fault = None
    assert put.status == status, put.body
    if status == 409:
        assert put.json()["errors"][0]["code"] == "placement.concurrent_update"
    got = _call(app, "/allocations/" + consumer).json()
    assert got["allocations"] == {}
    assert _usage(app, rp) == 0
    # And the same claim goes through once the COMMIT does.
    put = _call(app, "/allocations/" + consumer, "PUT", _claim(rp, 2))
    assert put.status == 204, put.body
    assert _usage(app, rp) == 2
