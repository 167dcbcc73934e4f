"""Which database errors answer 503 (the database is away) and which are
the request's own fault."""

import pymysql
import pytest
from sqlalchemy import exc as sa_exc

from placement.db import errors as db_errors


def dbapi_error(orig):
    return sa_exc.OperationalError("SELECT 1", {}, orig)


@pytest.mark.parametrize(
    "code",
    [
        2003,  # can't connect
        2006,  # server has gone away
        2013,  # lost connection during query
        1047,  # Galera: WSREP has not yet prepared node for application use
    ],
)
def test_away(code):
    assert db_errors.is_unavailable(dbapi_error(pymysql.err.OperationalError(code, "")))


@pytest.mark.parametrize("code", [1062, 1452, 1213])
def test_the_statements_own_fault(code):
    error = dbapi_error(pymysql.err.OperationalError(code, ""))
    assert not db_errors.is_unavailable(error)


def test_an_error_raised_while_handling_a_lost_connection():
    lost = dbapi_error(pymysql.err.OperationalError(2013, ""))
    try:
        try:
            raise lost
        except sa_exc.OperationalError:
            raise sa_exc.PendingRollbackError("roll back first")
    except sa_exc.PendingRollbackError as e:
        assert db_errors.is_unavailable(e)
