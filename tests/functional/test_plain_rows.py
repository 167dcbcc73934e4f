"""``db_api.plain_rows``: a SELECT run on the driver's cursor directly
gives the rows ``conn.execute`` gives, is seen by the statement
listeners, and fails as ``conn.execute`` fails (a DBAPIError wrapping the
driver's error; a lost connection invalidated, which the API answers
as a 503: ``test_lost_connection.py`` kills the look's connection too)."""

import datetime
import uuid

import pytest
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import errors
from placement.db import tables
from placement.objects import allocation
from placement.objects import common
from placement.objects import consumer as consumer_obj
from placement.objects.catalog import changes
from tests import fixtures
from tests import helpers

# Both MySQL drivers: the cursor is the driver's own.
db = fixtures.db_fixture(fixtures.EVERY_DRIVER)


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


def test_percent_signs_without_parameters(db):
    """A statement without parameters (on mysqlclient sent on the
    connection itself, not its cursor) with percent signs in its text
    gives the rows ``conn.execute`` gives."""
    classes = tables.resource_classes
    statement = sa.select(
        classes.c.id % sa.literal_column("2"),
        classes.c.name.like(sa.literal_column("'V%'")),
    ).order_by(classes.c.id)
    with db.single_read() as conn:
        expected = [tuple(row) for row in conn.execute(statement)]
        found = [tuple(row) for row in db_api.plain_rows(conn, statement)]
    assert found == expected
    assert {row[1] for row in found} == {0, 1}


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


@pytest.mark.parametrize("backend", ("mysql", "mysqldb"))
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


def _statements_seen(db):
    """The statements the cursor listeners of ``db``'s engine see from
    now on, in order (a list that grows)."""
    seen = []
    sa.event.listen(
        db.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *args: seen.append(statement),
    )
    return seen


def test_count_of_a_generation_swap(db):
    """``plain_count``: the rows an UPDATE matched, its integers and row
    values written in (the generation swap of every claim), seen by the
    statement listeners."""
    seen = _statements_seen(db)
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


def _consumer_rows(db, uuids):
    consumers = tables.consumers
    with db.reader() as conn:
        return {
            row.uuid: row
            for row in conn.execute(
                sa.select(consumers).where(consumers.c.uuid.in_(uuids))
            )
        }


@pytest.mark.parametrize("at_commit", (False, True))
def test_inserts_write_what_execute_writes(db, at_commit):
    """``plain_insert``: a claim's consumer (its ids by name) and
    allocation rows written on the driver's cursor, at once or held for
    the COMMIT where that is done, are the rows ``conn.execute`` writes
    (``created_at`` of the same type, now), one statement seen by the
    listeners per call whatever the rows."""
    seen = _statements_seen(db)
    rp = helpers.new_provider(db)
    uuids = [str(uuid.uuid4()) for _ in range(4)]
    rows = [
        {"b_uuid": u, "b_project": "p", "b_user": "u", "b_type": t}
        for u, t in zip(uuids, (None, "INSTANCE", None, "INSTANCE"))
    ]
    with db.writer() as conn:
        for table, column, names in (
            (tables.projects, "external_id", ["p"]),
            (tables.users, "external_id", ["u"]),
            (tables.consumer_types, "name", ["INSTANCE"]),
        ):
            conn.execute(
                db_api.insert_ignore(conn.dialect.name, table),
                [{column: n} for n in names],
            )
        rp_id = common.get_provider(conn, rp)["id"]
    allocations = [
        {"consumer_id": u, "resource_provider_id": rp_id, "resource_class_id": 0}
        | {"used": n + 1}
        for n, u in enumerate(uuids)
    ]
    with db.writer() as conn:
        conn.execute(consumer_obj._INSERT_NAMED, rows[:2])
        conn.execute(allocation._INSERT, allocations[:2])
    with db.writer() as conn:
        del seen[:]
        db_api.plain_insert(conn, consumer_obj._INSERT_NAMED, rows[2:3], at_commit)
        db_api.plain_insert(conn, consumer_obj._INSERT_NAMED, rows[3:], at_commit)
        db_api.plain_insert(conn, allocation._INSERT, allocations[2:], at_commit)
    assert len(seen) == 3 and "consumers" in seen[0] and "allocations" in seen[2]
    found = _consumer_rows(db, uuids)

    def kept(row):
        return (row.project_id, row.user_id, row.generation, row.consumer_type_id)

    assert [kept(found[u]) for u in uuids[2:]] == [kept(found[u]) for u in uuids[:2]]
    assert {type(row.created_at) for row in found.values()} == {datetime.datetime}
    assert max(r.created_at for r in found.values()) - min(
        r.created_at for r in found.values()
    ) < datetime.timedelta(minutes=5)
    alloc = tables.allocations
    with db.reader() as conn:
        written = conn.execute(
            sa.select(alloc.c.consumer_id, alloc.c.used, alloc.c.created_at)
            .where(alloc.c.consumer_id.in_(uuids))
            .order_by(alloc.c.used)
        ).all()
    assert [(c, used) for c, used, _ in written] == [
        (u, n + 1) for n, u in enumerate(uuids)
    ]
    assert {type(created) for _, _, created in written} == {datetime.datetime}


@pytest.mark.parametrize("at_commit", (False, True))
def test_insert_of_a_taken_consumer_fails_the_write(db, at_commit):
    """A new consumer's uuid taken fails the write as through
    ``conn.execute`` (an IntegrityError ``is_created_concurrently`` names,
    at once or at the commit), and nothing of it is written."""
    rp = helpers.new_provider(db)
    taken = str(uuid.uuid4())
    row = {"b_uuid": taken, "b_project": "p", "b_user": "u", "b_type": None}
    with db.writer() as conn:
        for table in (tables.projects, tables.users):
            conn.execute(
                db_api.insert_ignore(conn.dialect.name, table), [{"external_id": "p"}]
            )
            conn.execute(
                db_api.insert_ignore(conn.dialect.name, table), [{"external_id": "u"}]
            )
        rp_id = common.get_provider(conn, rp)["id"]
        db_api.plain_insert(conn, consumer_obj._INSERT_NAMED, [row])
    other = str(uuid.uuid4())
    with pytest.raises(sa.exc.IntegrityError) as raised:
        with db.writer() as conn:
            db_api.plain_insert(
                conn, consumer_obj._INSERT_NAMED, [dict(row, b_uuid=other)], at_commit
            )
            db_api.plain_insert(conn, consumer_obj._INSERT_NAMED, [row], at_commit)
            db_api.plain_insert(
                conn,
                allocation._INSERT,
                [
                    {
                        "consumer_id": other,
                        "resource_provider_id": rp_id,
                        "resource_class_id": 0,
                        "used": 1,
                    }
                ],
                at_commit,
            )
    assert consumer_obj.is_created_concurrently(raised.value)
    assert list(_consumer_rows(db, [taken, other])) == [taken]
