"""``db_api.plain_rows``: a SELECT run on the driver's cursor directly
gives the rows ``conn.execute`` gives, is seen by the statement
listeners, and fails as ``conn.execute`` fails (a DBAPIError wrapping the
driver's error; a lost connection invalidated, which the API answers
as a 503: ``test_lost_connection.py`` kills the look's connection too)."""

import pytest
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import errors
from placement.db import tables
from placement.objects import common
from placement.objects.catalog import changes
from tests import fixtures
from tests import helpers


def test_rows_and_listeners(db):
    seen = []
    for name in ("before_cursor_execute", "after_cursor_execute"):
        sa.event.listen(
            db.engine,
            name,
            lambda conn, cursor, statement, *args, name=name: seen.append(
                (name, statement)
            ),
        )
    statement = sa.select(tables.resource_classes.c.id, tables.resource_classes.c.name)
    with db.single_read() as conn:
        expected = [tuple(row) for row in conn.execute(statement)]
        del seen[:]
        found = [tuple(row) for row in db_api.plain_rows(conn, statement)]
        assert db_api.plain_rows(conn, changes.STAMP)
    assert found == expected and found
    text = seen[0][1]
    assert "resource_classes" in text
    assert [name for name, _ in seen[:2]] == [
        "before_cursor_execute",
        "after_cursor_execute",
    ]
    assert seen[1][1] == text


def test_parameters_bound_and_written(db):
    """Bound parameters, those written into the text (``literal_execute``,
    None as NULL) and the statement's own (its limit) give the rows
    ``conn.execute`` gives, on every backend's parameter style."""
    classes = tables.resource_classes
    statement = (
        sa.select(classes.c.id, classes.c.name)
        .where(
            classes.c.id >= sa.bindparam("low", literal_execute=True),
            sa.or_(
                classes.c.name != sa.bindparam("name"),
                sa.bindparam("none", type_=sa.Integer, literal_execute=True).is_(None),
            ),
        )
        .order_by(classes.c.id)
        .limit(3)
    )
    params = {"low": 1, "name": "MEMORY_MB", "none": None}
    with db.single_read() as conn:
        expected = [tuple(row) for row in conn.execute(statement, params)]
        found = [tuple(row) for row in db_api.plain_rows(conn, statement, params)]
    assert found == expected
    assert len(found) == 3 and found[0][0] >= 1
    listed = sa.select(classes.c.id).where(classes.c.id.in_(db_api.int_list("ids")))
    with db.single_read() as conn:
        for ids in ([0, 1, 2], [1], []):
            expected = [tuple(row) for row in conn.execute(listed, {"ids": ids})]
            found = [tuple(r) for r in db_api.plain_rows(conn, listed, {"ids": ids})]
            assert sorted(found) == sorted(expected)
        expanding = sa.select(classes.c.id).where(
            classes.c.name.in_(sa.bindparam("names", expanding=True))
        )
        for names in (["VCPU", "DISK_GB"], ["VCPU"], []):
            params = {"names": names}
            expected = [tuple(row) for row in conn.execute(expanding, params)]
            found = [tuple(r) for r in db_api.plain_rows(conn, expanding, params)]
            assert sorted(found) == sorted(expected)
            assert len(found) == len(names)


def test_a_driver_error_is_sqlalchemys(db):
    missing = sa.table("no_such_table", sa.column("id"))
    with db.single_read() as conn:
        with pytest.raises(sa.exc.DBAPIError) as raised:
            db_api.plain_rows(conn, sa.select(missing.c.id))
    assert isinstance(raised.value.orig, db.engine.dialect.loaded_dbapi.Error)
    assert not raised.value.connection_invalidated
    assert not errors.is_unavailable(raised.value)
    # The pool's connection is still good.
    with db.single_read() as conn:
        assert db_api.plain_rows(conn, changes.STAMP)


@pytest.mark.parametrize("backend", ("mysql",))
def test_a_lost_connection_is_invalidated(backend):
    fixtures.require_backend(backend)
    with fixtures.database(backend) as db:
        admin = fixtures._admin(backend)
        try:
            with db.single_read() as conn:
                thread = conn.connection.dbapi_connection.thread_id()
                with admin.connect() as other:
                    other.exec_driver_sql("KILL CONNECTION %d" % thread)
                with pytest.raises(sa.exc.DBAPIError) as raised:
                    db_api.plain_rows(conn, changes.STAMP)
                assert conn.invalidated
        finally:
            admin.dispose()
        assert raised.value.connection_invalidated
        assert errors.is_unavailable(raised.value)
        with db.single_read() as conn:
            assert db_api.plain_rows(conn, changes.STAMP)


def test_count_of_a_generation_swap(db):
    """``plain_count``: the rows an UPDATE matched, its integers and row
    values written in (the generation swap of every claim), seen by the
    statement listeners."""
    seen = []
    sa.event.listen(
        db.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *args: seen.append(statement),
    )
    rp = helpers.new_provider(db)
    with db.reader() as conn:
        rp_id, generation = conn.execute(
            sa.select(
                tables.resource_providers.c.id, tables.resource_providers.c.generation
            ).where(tables.resource_providers.c.uuid == rp)
        ).one()
    with db.writer() as conn:
        del seen[:]
        assert common.swap_count(conn, {rp_id: generation + 1}) == 0
        assert common.swap_count(conn, {rp_id: generation}) == 1
        assert common.swap_count(conn, {rp_id: generation}) == 0
    assert len(seen) == 3 and "(%d, %d)" % (rp_id, generation) in seen[1]
    with db.reader() as conn:
        assert common.get_provider(conn, rp)["generation"] == generation + 1
