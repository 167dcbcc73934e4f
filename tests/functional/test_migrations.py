"""The alembic chain builds exactly the schema the code uses, on SQLite and
MySQL, and its guard revisions refuse to run over unmigrated data."""

import alembic.autogenerate
import alembic.migration
import alembic.script
import pytest
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import schema
from placement.db import tables
from placement.db import triggers
from tests import fixtures

CHAIN = [
    "b4ed3a175331",
    "611cd6dffd7b",
    "b5c396305c25",
    "422ece571366",
    "a082b8bb98d0",
    "c7d1e4f2a9b3",
    "d3a8f1c6b2e4",
    "e5b2c9d7f1a6",
    "f6a1c3e8d2b7",
    "a7c2e9f4b1d3",
    "b8e3f1a6c9d4",
]


@pytest.fixture(params=fixtures.BACKENDS)
def engine(request):
    fixtures.require_backend(request.param)
    with fixtures.database_url(request.param) as url:
        engine = db_api.create_engine(url, fixtures.configure())
        yield engine
        engine.dispose()


def _differences(engine):
    with engine.connect() as conn:
        context = alembic.migration.MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return alembic.autogenerate.compare_metadata(context, tables.metadata)


def test_revision_chain():
    script = alembic.script.ScriptDirectory(schema.MIGRATIONS_DIR)
    revisions = [r.revision for r in script.walk_revisions("base", "heads")]
    assert list(reversed(revisions)) == CHAIN
    # Start-up compares the database with schema.HEAD without loading alembic.
    assert schema.HEAD == CHAIN[-1]


def test_upgrade_head_matches_models(engine):
    schema.upgrade(engine)
    assert schema.current_revision(engine) == CHAIN[-1]
    assert _differences(engine) == []


def test_upgrade_twice_is_a_no_op(engine):
    schema.upgrade(engine)
    before = sa.inspect(engine).get_table_names()
    schema.upgrade(engine)
    assert schema.current_revision(engine) == CHAIN[-1]
    assert sa.inspect(engine).get_table_names() == before


def test_initial_revision_has_no_consumer_types(engine):
    schema.upgrade(engine, CHAIN[0])
    inspector = sa.inspect(engine)
    assert "consumer_types" not in inspector.get_table_names()
    assert "consumer_type_id" not in [
        c["name"] for c in inspector.get_columns("consumers")
    ]
    # The comparison sees the missing table and column (and extra indexes).
    kinds = {d[0] if isinstance(d, tuple) else d[0][0] for d in _differences(engine)}
    assert {"add_table", "add_column", "remove_index"} <= kinds


def _provider(conn, root=True):
    conn.execute(
        tables.resource_providers.insert().values(
            id=1,
            uuid="7e9ac3d0-1b42-4e0e-8a4c-3f0f6a3b9b11",
            name="rp",
            generation=0,
            root_provider_id=1 if root else None,
        )
    )


def test_null_root_provider_blocks_upgrade(engine):
    schema.upgrade(engine, CHAIN[0])
    with engine.begin() as conn:
        _provider(conn, root=False)
    with pytest.raises(Exception, match="misses its root provider id"):
        schema.upgrade(engine)
    assert schema.current_revision(engine) == CHAIN[0]


def test_allocation_without_consumer_blocks_upgrade(engine):
    schema.upgrade(engine, CHAIN[0])
    with engine.begin() as conn:
        _provider(conn)
        conn.execute(
            tables.allocations.insert().values(
                resource_provider_id=1,
                resource_class_id=0,
                used=1,
                consumer_id="0c3e2a4e-9f4b-4d47-a3a5-63e2f6d0f1a2",
            )
        )
    with pytest.raises(Exception, match="missing a consumer record"):
        schema.upgrade(engine)
    assert schema.current_revision(engine) == CHAIN[1]


def test_names_compare_case_sensitively(engine):
    schema.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(
            tables.traits.insert(), [{"name": "CUSTOM_A"}, {"name": "custom_a"}]
        )
        found = conn.scalars(
            sa.select(tables.traits.c.name).where(tables.traits.c.name == "CUSTOM_A")
        ).all()
    assert found == ["CUSTOM_A"]


def _triggers(engine):
    """{name: definition} of the change-log triggers."""
    with engine.connect() as conn:
        dialect = conn.dialect.name
        if dialect == "mysql":
            query = (
                "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM"
                " information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
            )
        elif dialect == "postgresql":
            query = (
                "SELECT t.tgname, pg_get_triggerdef(t.oid) || p.prosrc"
                " FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
                " WHERE NOT t.tgisinternal"
            )
        else:
            query = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
        return dict(conn.exec_driver_sql(query).all())


def test_the_revision_makes_what_create_at_head_makes(engine):
    schema.upgrade(engine)
    migrated = _triggers(engine)
    assert set(migrated) == triggers.NAMES
    with engine.connect() as conn:
        assert triggers.installed(conn)
    with fixtures.database_url(engine.dialect.name) as url:
        fresh = db_api.create_engine(url, fixtures.configure())
        try:
            schema.create_at_head(fresh)
            assert _differences(fresh) == []
            assert _triggers(fresh) == migrated
        finally:
            fresh.dispose()


def test_the_tokens_go_down_and_up_again(engine):
    schema.upgrade(engine)
    schema.downgrade(engine, "f6a1c3e8d2b7")
    # The triggers of before the tokens, which still log a write.
    assert set(_triggers(engine)) == triggers.NAMES
    for table in ("catalog_changes", "catalog_log"):
        columns = [c["name"] for c in sa.inspect(engine).get_columns(table)]
        assert "token" not in columns
    with engine.begin() as conn:
        conn.execute(tables.traits.insert(), {"name": "CUSTOM_DOWN"})
        assert conn.execute(sa.text("SELECT COUNT(*) FROM catalog_log")).scalar()
    schema.upgrade(engine)
    assert set(_triggers(engine)) == triggers.NAMES
    assert _differences(engine) == []


def test_the_revision_goes_down_and_up_again(engine):
    schema.upgrade(engine)
    schema.downgrade(engine, "e5b2c9d7f1a6")
    assert _triggers(engine) == {}
    columns = [c["name"] for c in sa.inspect(engine).get_columns("catalog_log")]
    assert "uuid" not in columns
    schema.upgrade(engine)
    assert set(_triggers(engine)) == triggers.NAMES
    assert _differences(engine) == []


def _logged_rows(engine):
    """The log numbers and items of an UPDATE of two traits in one
    statement: (numbers the shards' counts moved by, items)."""
    with engine.begin() as conn:
        conn.execute(
            tables.traits.insert(), [{"name": "CUSTOM_X"}, {"name": "CUSTOM_Y"}]
        )
    with engine.begin() as conn:
        before = conn.scalar(sa.text("SELECT SUM(changes) FROM catalog_changes"))
        items = conn.scalar(sa.text("SELECT COUNT(*) FROM catalog_log"))
        conn.execute(
            sa.text(
                "UPDATE traits SET updated_at = created_at WHERE name LIKE 'CUSTOM_%'"
            )
        )
    with engine.connect() as conn:
        after = conn.scalar(sa.text("SELECT SUM(changes) FROM catalog_changes"))
        logged = conn.scalar(sa.text("SELECT COUNT(*) FROM catalog_log")) - items
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM traits WHERE name LIKE 'CUSTOM_%'"))
    return after - before, logged


def test_the_statement_triggers_go_down_and_up_again(engine):
    """PostgreSQL's triggers per statement (b8e3f1a6c9d4) go back to
    those per row and come again; elsewhere they stay per row. Either
    way a statement of two rows takes two numbers of one item each."""
    per_row = engine.dialect.name != "postgresql"
    schema.upgrade(engine)
    head = _triggers(engine)
    assert all(("FOR EACH STATEMENT" in d) != per_row for d in head.values())
    assert _logged_rows(engine) == (2, 2)
    schema.downgrade(engine, "a7c2e9f4b1d3")
    below = _triggers(engine)
    assert set(below) == triggers.NAMES
    assert not any("FOR EACH STATEMENT" in d for d in below.values())
    assert (below == head) == per_row
    assert _logged_rows(engine) == (2, 2)
    schema.upgrade(engine)
    assert _triggers(engine) == head
    assert _differences(engine) == []


def test_db_sync_at_head_makes_the_triggers_missing(engine):
    schema.upgrade(engine)
    with engine.begin() as conn:
        triggers.drop(conn)
        assert not triggers.installed(conn)
    assert schema.upgrade(engine) == (CHAIN[-1], CHAIN[-1])
    with engine.connect() as conn:
        assert triggers.installed(conn)
