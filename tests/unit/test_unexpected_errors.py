"""api/app.py's UNEXPECTED table, row by row: an exception of each row's
kind raised under a request (GET /resource_classes) is logged at the
row's level and answered as the row says, as a client sees it."""

import logging
import sqlite3

import pymysql
import pytest
from sqlalchemy import exc as sa_exc

from placement.api import app
from placement.db import api as db_api
from placement.db import sqlite_file
from placement.objects import resource_class
from tests.wsgi_client import call
from tests.wsgi_client import pipeline


def statement_error(orig):
    return sa_exc.OperationalError("SELECT name FROM resource_classes", {}, orig)


SECRET = "db.example:3306 password=hunter2"
UNDEFINED = "placement.undefined_code"
CONCURRENT = "placement.concurrent_update"
# (what is raised, the status it answers, its Retry-After, the error
# code), in the order of app.UNEXPECTED.
ROWS = [
    (
        statement_error(sqlite3.OperationalError("too many SQL variables")),
        400,
        None,
        UNDEFINED,
    ),
    (statement_error(pymysql.err.OperationalError(1366, SECRET)), 400, None, UNDEFINED),
    (statement_error(pymysql.err.OperationalError(3024, SECRET)), 503, "5", UNDEFINED),
    (statement_error(pymysql.err.OperationalError(1290, SECRET)), 503, "5", UNDEFINED),
    (statement_error(pymysql.err.OperationalError(1021, SECRET)), 503, "5", UNDEFINED),
    (statement_error(pymysql.err.OperationalError(1317, SECRET)), 503, "5", UNDEFINED),
    (
        statement_error(pymysql.err.OperationalError(1213, SECRET)),
        409,
        None,
        CONCURRENT,
    ),
    (
        sa_exc.IntegrityError(
            "INSERT INTO consumers", {}, pymysql.err.IntegrityError(1048, SECRET)
        ),
        409,
        None,
        CONCURRENT,
    ),
    (sqlite_file.FileRemoved(SECRET), 503, None, UNDEFINED),
    (statement_error(pymysql.err.OperationalError(1146, SECRET)), 503, "5", UNDEFINED),
    (db_api.OutcomeUnknown(SECRET), 503, "5", UNDEFINED),
    (statement_error(pymysql.err.OperationalError(2013, SECRET)), 503, "5", UNDEFINED),
    (RuntimeError(SECRET), 500, None, UNDEFINED),
]


def test_a_row_for_each():
    picked = [next(r for r in app.UNEXPECTED if r.matches(ex)) for ex, *_ in ROWS]
    assert picked == list(app.UNEXPECTED)


@pytest.fixture(scope="module")
def placement():
    with pipeline() as wsgi:
        yield wsgi


@pytest.mark.parametrize("number", range(len(ROWS)))
def test_a_row(number, placement, monkeypatch, caplog):
    raised, status, retry_after, code = ROWS[number]
    row = app.UNEXPECTED[number]

    def fail(db):
        raise raised

    monkeypatch.setattr(resource_class, "list_all", fail)
    with caplog.at_level(logging.INFO, logger=app.LOG.name):
        response = call(
            placement,
            "/resource_classes",
            x_auth_token="admin",
            openstack_api_version="placement 1.23",
        )
    assert response.status == status
    request_id = response.headers["x-openstack-request-id"]
    error = response.json()["errors"][0]
    assert error["status"] == status
    assert error["code"] == code
    assert SECRET not in response.body.decode()
    if status >= 500:
        assert request_id in error["detail"]
        assert "openstack-api-version" not in response.headers
    else:
        assert response.headers["openstack-api-version"] == "placement 1.23"
    assert response.headers.get("retry-after") == retry_after
    [record] = [r for r in caplog.records if r.name == app.LOG.name]
    assert record.levelno == row.level
    logged = record.getMessage()
    assert logged.startswith("%s in GET /resource_classes (%s)" % (row.log, request_id))
    assert (SECRET in logged) == row.quote
    assert (record.exc_info is not None) == row.traceback
