"""The catalog's look with every shard's count and token
(``changes.STAMP_SHARDS``): read as ``changes.marks`` reads them, on every
backend and driver, so that a catch-up needs no statement of its own for
them; a text that does not add up to the look's sums (MySQL's
``group_concat_max_len`` cutting it short) is not taken."""

import sqlalchemy as sa

from placement.db import tables
from placement.objects.catalog import changes
from tests import fixtures

db = fixtures.db_fixture(fixtures.EVERY_DRIVER)


def test_the_look_reads_the_marks(db):
    with db.engine.begin() as conn:
        conn.execute(
            changes.CATALOG.update().values(
                changes=changes.CATALOG.c.shard + 1, token=7
            )
        )
        conn.execute(
            changes.CATALOG.update()
            .where(changes.CATALOG.c.shard % 3 == 1)
            .values(changes=changes.CATALOG.c.changes + 3_000_000_000, token=2**31 - 1)
        )
        conn.execute(
            changes.CATALOG.update()
            .where(changes.CATALOG.c.shard % 3 == 2)
            .values(token=sa.null())
        )
    with db.single_read() as conn:
        seen = changes.look(conn, shards=True)
        marks = changes.marks(conn)
        plain = changes.look(conn)
    assert changes.shards(seen) == marks
    assert len(marks[0]) == tables.CATALOG_SHARDS
    assert (plain.stamp, plain.tokens) == (seen.stamp, seen.tokens)
    assert plain.text is None and changes.shards(plain) is None
    # Every shard counted: one left out changes the sums.
    items = seen.text.split(",")
    for cut in (seen.text[:-3], ",".join(items[:-1]), seen.text + ":"):
        assert changes.shards(changes.Look(seen.stamp, seen.tokens, cut)) is None
