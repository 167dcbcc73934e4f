"""``db_api.at_commit`` on MySQL (both drivers): a statement held a second
time is made into text without a SQLAlchemy execution (``held_text``),
the same text ``conn.execute`` holds (Python defaults, bind processors,
several rows as one INSERT), seen by the statement listeners, its writes
seen by the catalog's watcher; elsewhere (and for statements it does not
make) ``conn.execute`` runs it, and what is written is the same."""

import re
import uuid

import pytest
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import held
from placement.db import held_text
from placement.db import tables
from placement.objects import aggregate
from placement.objects import common
from placement.objects import inventory
from placement.objects import resource_provider
from placement.objects import trait
from placement.objects.catalog import changes
from tests import fixtures
from tests import helpers

db = fixtures.db_fixture(fixtures.EVERY_DRIVER)

INV = tables.inventories
# A timestamp a Python default made (created_at, updated_at): now.
_NOW = re.compile(r"'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?'")


def _record(rc_id, total, provider_id):
    return dict(
        inventory.with_defaults({"total": total}),
        resource_provider_id=provider_id,
        resource_class_id=rc_id,
    )


def _held_cases(provider_id):
    """(statement, parameters) of every shape the registration writes
    hold: built-once INSERTs of one and several rows (created_at), an
    UPDATE of several rows (updated_at), generation moves, the catalog's
    count and log, INSERTs taking an id by a subquery."""
    log = changes._STATEMENTS["mysql"]
    update = INV.update().where(
        INV.c.resource_provider_id == provider_id,
        INV.c.resource_class_id == sa.bindparam("b_rc_id"),
    )
    agg = str(uuid.uuid4())
    return [
        (common._BUMP_HELD, {"b_id": provider_id}),
        (resource_provider._ROOT_IS_SELF, {"b_id": provider_id}),
        (inventory._INSERT, [_record(0, 8, provider_id)]),
        (inventory._INSERT, [_record(1, 9, provider_id), _record(2, 5, provider_id)]),
        (
            update,
            [
                dict(inventory.with_defaults({"total": 7}), b_rc_id=0),
                dict(inventory.with_defaults({"total": 3}), b_rc_id=1),
            ],
        ),
        (trait._INSERT_LINKS, [{"resource_provider_id": provider_id, "trait_id": 1}]),
        (
            aggregate._INSERT_LINK,
            [{"b_rp": provider_id, "b_agg": agg}, {"b_rp": provider_id, "b_agg": agg}],
        ),
        (log.bump, {"token": 12345}),
        (log.log_rows(1), {"kind_0": 1, "ref_0": provider_id}),
        (log.log_rows(2), {"kind_0": 1, "ref_0": provider_id, "kind_1": 4, "ref_1": 2}),
        (log.prune, {"kept": 1000}),
        (INV.delete().where(INV.c.resource_class_id.in_([0, 1])), None),
    ]


class _Rollback(Exception):
    pass


def test_held_text_is_what_execute_holds(db):
    """Each shape held through ``conn.execute`` (held.at_commit) and
    through ``held_text`` (twice: the first as a statement seen once, the
    second made into text) holds the same SQL, but for the timestamps
    that Python defaults make; the listeners see every one."""
    if not db.engine.dialect.name == "mysql":
        pytest.skip("only MySQL holds statements for the COMMIT")
    provider_id = 1
    seen = []
    sa.event.listen(
        db.engine, "before_cursor_execute", lambda *args: seen.append(args[2])
    )
    made = 0
    for statement, parameters in _held_cases(provider_id):
        with pytest.raises(_Rollback):
            with db.writer() as conn:
                del seen[:]
                held.at_commit(conn, statement, parameters)
                for _ in range(2):
                    db_api.at_commit(conn, statement, parameters)
                texts = [_NOW.sub("'now'", text) for text in held.held_list(conn)]
                raise _Rollback()
        third = len(texts) // 3
        assert texts[:third] == texts[third : 2 * third] == texts[2 * third :]
        assert len(seen) == 3, statement
        text = held_text._text(db.engine.dialect, statement, _rows(parameters))
        made += text is not None
    # All but the DELETE's (an IN list of values) are made into text.
    assert made == len(_held_cases(provider_id)) - 1


def _rows(parameters):
    return parameters if isinstance(parameters, list) else [parameters or {}]


def test_written_as_execute_writes(db):
    """Inventories held (or, elsewhere, run at once) through ``at_commit``
    a second time are written as the first time: the same values,
    ``created_at`` set, then ``updated_at`` by an UPDATE of several."""
    providers = [helpers.new_provider(db) for _ in range(2)]
    with db.reader() as conn:
        ids = [common.get_provider(conn, rp)["id"] for rp in providers]
    update = INV.update().where(
        INV.c.resource_provider_id == sa.bindparam("b_rp"),
        INV.c.resource_class_id == sa.bindparam("b_rc_id"),
    )
    for provider_id in ids:
        with db.writer() as conn:
            db_api.at_commit(
                conn,
                inventory._INSERT,
                [_record(0, 8, provider_id), _record(1, 9, provider_id)],
            )
            changes.record(conn, changes.PROVIDER, [provider_id])
        with db.writer() as conn:
            db_api.at_commit(
                conn,
                update,
                [
                    dict(inventory.with_defaults({"total": 4}), b_rc_id=0)
                    | {"b_rp": provider_id},
                    dict(inventory.with_defaults({"total": 5}), b_rc_id=1)
                    | {"b_rp": provider_id},
                ],
            )
            changes.record(conn, changes.PROVIDER, [provider_id])
    with db.reader() as conn:
        rows = conn.execute(
            sa.select(
                INV.c.resource_provider_id,
                INV.c.resource_class_id,
                INV.c.total,
                INV.c.allocation_ratio,
                INV.c.created_at,
                INV.c.updated_at,
            )
            .where(INV.c.resource_provider_id.in_(ids))
            .order_by(INV.c.resource_provider_id, INV.c.resource_class_id)
        ).all()
    assert [tuple(row[:4]) for row in rows] == [
        (rp, rc, total, 1.0) for rp in ids for rc, total in ((0, 4), (1, 5))
    ]
    assert all(row.created_at is not None for row in rows)
    assert all(row.updated_at is not None for row in rows)


def test_held_writes_are_watched(db, monkeypatch):
    """A write of the catalog's tables held as text without a record of
    it is caught as through ``conn.execute``; a generation move alone is
    no change of the catalog."""
    reported = []
    monkeypatch.setattr(changes, "on_unrecorded", reported.append)
    rp = helpers.new_provider(db)
    with db.reader() as conn:
        provider = common.get_provider(conn, rp)
    for rc_id in (0, 1, 2):
        with db.writer() as conn:
            row = _record(rc_id, 1, provider["id"])
            db_api.at_commit(conn, inventory._INSERT, [row])
    assert reported == [{"inventories"}] * 3
    for _ in range(3):
        with db.writer() as conn:
            common.bump_held(conn, provider)
    assert reported == [{"inventories"}] * 3
