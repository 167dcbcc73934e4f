"""db/errors.py's tables, row by row: each driver code (or message) with
a real exception of that driver, as SQLAlchemy wraps it, is of its row's
kind and answers that kind's question alone."""

import sqlite3

import psycopg
import psycopg.errors
import pymysql
import pytest
from sqlalchemy import exc as sa_exc

from placement.db import errors

QUESTIONS = {
    errors.DEADLOCK: errors.is_deadlock,
    errors.UNAVAILABLE: errors.is_unavailable,
    errors.READ_ONLY: errors.is_read_only,
    errors.FULL: errors.is_full,
    errors.INTERRUPTED: errors.is_interrupted,
    errors.OVER_TIME_BUDGET: errors.is_over_time_budget,
    errors.SCHEMA_MISSING: errors.is_schema_missing,
    errors.UNSTORABLE_TEXT: errors.is_unstorable_text,
    errors.TOO_MANY_PARAMETERS: errors.is_too_many_parameters,
    errors.FOREIGN_CHANGE: errors.is_foreign_change,
    errors.COUNT_CHECK: errors.is_count_check,
}


def wrapped(orig):
    """``orig`` as SQLAlchemy raises it from a statement (OperationalError
    for the driver's OperationalError, and so on)."""
    for base in (pymysql.err.Error, psycopg.Error, sqlite3.Error):
        if isinstance(orig, base):
            return sa_exc.DBAPIError.instance("SELECT 1", {}, orig, base)
    return sa_exc.DBAPIError("SELECT 1", {}, orig)


def _pg_error(code):
    # A class row ("08") stands for every SQLSTATE of the class.
    return psycopg.errors.lookup(code if len(code) == 5 else code + "000")("failed")


ROWS = (
    [
        (pymysql.err.OperationalError(c, "failed"), k)
        for c, k in errors.MYSQL.codes.items()
    ]
    + [
        (pymysql.err.OperationalError(1030, "Got error 28 %s" % w), k)
        for w, k in errors.MYSQL.messages.items()
    ]
    + [(_pg_error(c), k) for c, k in errors.POSTGRESQL.codes.items()]
    + [
        (psycopg.OperationalError("sending query failed: %s 0 and 65535" % w), k)
        for w, k in errors.POSTGRESQL.messages.items()
    ]
    + [
        (sqlite3.OperationalError("%s: providers" % w), k)
        for w, k in errors.SQLITE.messages.items()
    ]
)


@pytest.mark.parametrize(
    "orig,kind", ROWS, ids=["%s-%s" % (type(o).__name__, o) for o, _ in ROWS]
)
def test_a_row(orig, kind):
    error = wrapped(orig)
    assert errors.kind(error) == kind
    answered = [k for k, question in QUESTIONS.items() if question(error)]
    assert answered == [kind]


def test_every_kind_has_a_row():
    assert {kind for _, kind in ROWS} == set(QUESTIONS)


@pytest.mark.parametrize(
    "orig",
    [
        pymysql.err.IntegrityError(1062, "Duplicate entry"),
        psycopg.errors.lookup("23505")("duplicate key"),
        sqlite3.IntegrityError("UNIQUE constraint failed: providers.uuid"),
        ValueError("not a driver's"),
    ],
)
def test_codes_no_row_names(orig):
    error = sa_exc.DBAPIError("SELECT 1", {}, orig)
    assert errors.kind(error) is None
    assert not any(question(error) for question in QUESTIONS.values())


def test_only_a_statements_error_has_a_kind():
    assert errors.kind(RuntimeError("database is locked")) is None


def test_psycopg_without_a_sqlstate_could_not_connect():
    error = sa_exc.OperationalError("SELECT 1", {}, psycopg.OperationalError("no"))
    assert errors.kind(error) is None
    assert errors.is_unavailable(error)


@pytest.mark.parametrize(
    "orig,name",
    [
        (
            pymysql.err.IntegrityError(1048, "Column 'project_id' cannot be null"),
            "project_id",
        ),
        (
            pymysql.err.IntegrityError(
                1452,
                "Cannot add or update a child row: a foreign key constraint "
                "fails (`p`.`t`, CONSTRAINT `f` FOREIGN KEY (`root_id`) "
                "REFERENCES `t` (`id`))",
            ),
            "root_id",
        ),
        (
            psycopg.errors.lookup("23502")(
                'null value in column "user_id" of relation "consumers" '
                "violates not-null constraint"
            ),
            "user_id",
        ),
        (
            psycopg.errors.lookup("23503")(
                'insert or update on table "t" violates foreign key constraint '
                '"f"\nDETAIL:  Key (root_id)=(5) is not present in table "t".'
            ),
            "root_id",
        ),
        (
            sqlite3.IntegrityError("NOT NULL constraint failed: consumers.user_id"),
            "consumers.user_id",
        ),
        (sqlite3.IntegrityError("FOREIGN KEY constraint failed"), None),
    ],
)
def test_what_a_foreign_change_names(orig, name):
    error = wrapped(orig)
    assert errors.is_foreign_change(error)
    assert errors.missing(error) == name
