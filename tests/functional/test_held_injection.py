"""Values sent through the writes whose statements are held for the COMMIT
(on MySQL one multi-statement query, ``db_api.at_commit``) are stored as
data, on SQLite, MySQL (both drivers) and PostgreSQL: shapes that would end a statement
and start another (``'; DROP TABLE ...``, comments, backslashes, format
markers) read back byte for byte, and no table is dropped or emptied.

Of the free text a client sends, a new consumer's project and user ids go
with the COMMIT (trait names, consumer types and aggregates are refused
unless they match their patterns; provider names are inserted by a
statement of their own): they are sent through the API. Every other held
write gets the same shapes through ``at_commit`` directly.
"""

import uuid

import pytest
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from tests import fixtures
from tests.functional.test_shared_database import _call
from tests.functional.test_shared_database import _host

SHAPES = [
    "p'; DROP TABLE allocations; --",
    'p"; DROP TABLE consumers; #',
    "p\\'; DROP TABLE projects; -- x",
    "p'); DELETE FROM resource_providers; /*",
    "p*/; DROP TABLE users; /*",
    "p;\nDROP TABLE inventories;\n",
    "p\\",
    "p\\\\'; TRUNCATE traits; --",
    "p%s%(b_uuid)s{0}%%",
    "p`; DROP TABLE `allocations`; --",
    "p\u02bc; DROP TABLE allocations; --",
    "p\x1a'; SELECT SLEEP(5); --",
]


@pytest.fixture(params=fixtures.EVERY_DRIVER)
def app(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        yield app, db


def _tables(db):
    """{table: row count} of every table of the schema."""
    with db.reader() as conn:
        names = sa.inspect(conn).get_table_names()
        return {
            name: conn.execute(
                sa.select(sa.func.count()).select_from(sa.table(name))
            ).scalar()
            for name in names
        }


def test_project_and_user_ids_of_a_claim_are_data(app):
    app, db = app
    rp = _host(app, "rp", vcpu=64)
    before = _tables(db)
    consumers = {}
    for shape in SHAPES:
        consumer = str(uuid.uuid4())
        put = _call(
            app,
            "/allocations/" + consumer,
            "PUT",
            {
                "allocations": {rp: {"resources": {"VCPU": 1}}},
                "project_id": shape,
                "user_id": shape + "u",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
        )
        assert put.status == 204, (shape, put.body)
        consumers[consumer] = shape
    for consumer, shape in consumers.items():
        got = _call(app, "/allocations/" + consumer).json()
        assert got["project_id"] == shape
        assert got["user_id"] == shape + "u"
    after = _tables(db)
    # Nothing but the claims' rows (and the change log's record of them,
    # written by the triggers) was added, and nothing went away.
    assert set(after) == set(before)
    grown = {name for name in after if after[name] != before[name]}
    claimed = {"allocations", "consumers", "consumer_types", "projects", "users"}
    assert grown <= claimed | {"catalog_log"}
    assert after["allocations"] == before["allocations"] + len(SHAPES)
    assert after["projects"] == before["projects"] + len(SHAPES)


def test_values_given_to_at_commit_are_data(app):
    """Through ``at_commit`` itself, as every held write uses it: one row
    and many rows in one statement, each value a shape."""
    _, db = app
    before = _tables(db)
    with db.writer() as conn:
        db_api.at_commit(
            conn, tables.projects.insert(), {"external_id": "one " + SHAPES[0]}
        )
        db_api.at_commit(
            conn, tables.users.insert(), [{"external_id": s} for s in SHAPES]
        )
    with db.reader() as conn:
        projects = set(conn.execute(sa.select(tables.projects.c.external_id)).scalars())
        users = set(conn.execute(sa.select(tables.users.c.external_id)).scalars())
    assert "one " + SHAPES[0] in projects
    assert set(SHAPES) <= users
    after = _tables(db)
    assert set(after) == set(before)
    assert after["users"] == before["users"] + len(SHAPES)
    assert {n for n in after if after[n] != before[n]} == {"projects", "users"}


def test_only_the_commit_may_carry_several_statements(app):
    """On MySQL the connections refuse a query of several statements
    (CLIENT.MULTI_STATEMENTS is not asked for): only the one sending the
    held statements with the COMMIT is let through, before a write and
    after it, in readers and writers alike."""
    _, db = app
    if db.dialect != "mysql":
        pytest.skip("MySQL's multi-statement queries")
    before = _tables(db)
    for _ in range(2):
        for transaction in (db.reader, db.writer):
            with pytest.raises(sa.exc.ProgrammingError):
                with transaction() as conn:
                    conn.exec_driver_sql("SELECT 1; DROP TABLE users")
        with db.writer() as conn:
            db_api.at_commit(conn, tables.users.insert(), {"external_id": "x; y"})
            db_api.at_commit(conn, tables.users.delete())
    assert _tables(db) == before
