"""``placement-manage db downgrade``: the way back to the upstream schema.

A database synced by this service and written through its API, then taken
down to the upstream head, holds exactly the rows written before in every
upstream table, has the schema a fresh upgrade to that head builds, and
syncs up again cleanly.
"""

import uuid

import pytest
import sqlalchemy as sa

from placement import deploy
from placement import startup
from placement.db import api as db_api
from placement.db import schema
from tests import fixtures
from tests import wsgi_client
from tests.functional.test_cmd import HEAD
from tests.functional.test_cmd import run
from tests.functional.test_migrations import _differences

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}
# This service's own tables, which the downgrade removes.
OURS = {"catalog_changes", "catalog_log", "catalog_currency"}


@pytest.fixture(params=fixtures.BACKENDS)
def synced(request):
    """The URL of a fresh database brought to HEAD by ``db sync``."""
    fixtures.require_backend(request.param)
    with fixtures.database_url(request.param) as url:
        assert run(["placement-manage", "db", "sync"], url).returncode == 0
        yield request.param, url


def _write_a_cloud(url):
    """Providers in a tree, inventories, custom classes and traits,
    aggregates, consumers of two types and their allocations, all through
    the API; the consumer that was deleted leaves no row."""
    conf = fixtures.configure()
    engine = db_api.create_engine(url, conf)
    db = db_api.Database(engine, conf)
    try:
        startup.prepare_schema(db, sync=False)
        app = deploy.build_app(conf, db=db, sync_schema=False)

        def call(path, method="PUT", body=None):
            resp = wsgi_client.call(app, path, method, body, **HEADERS)
            assert resp.status < 300, resp.body
            return resp.json() if resp.body else None

        call("/resource_classes/CUSTOM_FPGA")
        call("/traits/CUSTOM_GOLD")
        aggregate = str(uuid.uuid4())
        providers = []
        for n in range(3):
            root = str(uuid.uuid4())
            child = str(uuid.uuid4())
            call("/resource_providers", "POST", {"name": "cn%d" % n, "uuid": root})
            call(
                "/resource_providers",
                "POST",
                {"name": "cn%d-nic" % n, "uuid": child, "parent_provider_uuid": root},
            )
            generation = call(
                "/resource_providers/%s/inventories" % root,
                body={
                    "resource_provider_generation": 0,
                    "inventories": {
                        "VCPU": {"total": 16, "allocation_ratio": 4.0},
                        "MEMORY_MB": {"total": 32768, "reserved": 512},
                        "CUSTOM_FPGA": {"total": 2},
                    },
                },
            )["resource_provider_generation"]
            call(
                "/resource_providers/%s/inventories" % child,
                body={
                    "resource_provider_generation": 0,
                    "inventories": {"SRIOV_NET_VF": {"total": 8}},
                },
            )
            generation = call(
                "/resource_providers/%s/traits" % root,
                body={
                    "resource_provider_generation": generation,
                    "traits": ["CUSTOM_GOLD", "HW_CPU_X86_AVX2"],
                },
            )["resource_provider_generation"]
            call(
                "/resource_providers/%s/aggregates" % root,
                body={
                    "resource_provider_generation": generation,
                    "aggregates": [aggregate],
                },
            )
            providers.append((root, child))
        for n, (root, child) in enumerate(providers * 2):
            consumer = str(uuid.uuid4())
            call(
                "/allocations/%s" % consumer,
                body={
                    "allocations": {
                        root: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}},
                        child: {"resources": {"SRIOV_NET_VF": 1}},
                    },
                    "project_id": "project-%d" % (n % 2),
                    "user_id": "user-%d" % (n % 3),
                    "consumer_generation": None,
                    "consumer_type": "INSTANCE" if n % 2 else "MIGRATION",
                },
            )
        call("/allocations/%s" % consumer, "DELETE")
    finally:
        engine.dispose()


def _rows(url):
    """Every row of every upstream table, in a stable order."""
    engine = sa.create_engine(url)
    try:
        metadata = sa.MetaData()
        metadata.reflect(engine)
        with engine.connect() as conn:
            return {
                name: sorted(
                    conn.execute(sa.select(table)).all(),
                    key=lambda row: [str(v) for v in row],
                )
                for name, table in metadata.tables.items()
                if name not in OURS | {"alembic_version"}
            }
    finally:
        engine.dispose()


def _shape(url):
    """The schema as the database reports it: tables, columns, keys and
    indexes."""
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        shape = {}
        for table in sorted(inspector.get_table_names()):
            shape[table] = {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                    for c in inspector.get_columns(table)
                ],
                "primary_key": inspector.get_pk_constraint(table)[
                    "constrained_columns"
                ],
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in inspector.get_indexes(table)
                ),
                "unique": sorted(
                    (u["name"], tuple(u["column_names"]))
                    for u in inspector.get_unique_constraints(table)
                ),
                "foreign_keys": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"])
                    for f in inspector.get_foreign_keys(table)
                ),
            }
        return shape
    finally:
        engine.dispose()


def test_downgrade_to_upstream_keeps_every_row_and_syncs_again(synced):
    backend, url = synced
    _write_a_cloud(url)
    before = _rows(url)
    assert len(before["allocations"]) == 15
    assert len(before["consumers"]) == 5

    result = run(["placement-manage", "db", "downgrade", schema.REFERENCE_HEAD], url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Schema downgraded from %s to %s.\n" % (
        HEAD,
        schema.REFERENCE_HEAD,
    )
    version = run(["placement-manage", "db", "version"], url).stdout
    assert version == schema.REFERENCE_HEAD + "\n"
    assert _rows(url) == before
    with fixtures.database_url(backend) as fresh:
        engine = sa.create_engine(fresh)
        try:
            schema.upgrade(engine, schema.REFERENCE_HEAD)
        finally:
            engine.dispose()
        assert _shape(url) == _shape(fresh)
    assert not OURS & set(_shape(url))

    # Nothing further down: the upstream revisions have no way back.
    result = run(["placement-manage", "db", "downgrade", "422ece571366"], url)
    assert result.returncode == 1
    assert "cannot downgrade to 422ece571366" in result.stderr
    assert run(["placement-manage", "db", "version"], url).stdout == version
    assert _rows(url) == before

    result = run(["placement-manage", "db", "sync"], url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Schema upgraded from %s to %s.\n" % (
        schema.REFERENCE_HEAD,
        HEAD,
    )
    engine = sa.create_engine(url)
    try:
        assert _differences(engine) == []
    finally:
        engine.dispose()
    assert _rows(url) == before


def test_downgrade_refuses_what_it_cannot_do(synced):
    _, url = synced
    with fixtures.database_url("sqlite") as empty:
        result = run(["placement-manage", "db", "downgrade", HEAD], empty)
        assert result.returncode == 1
        assert result.stderr == "the database has no placement schema\n"
    result = run(["placement-manage", "db", "downgrade", "nonsense"], url)
    assert result.returncode == 1
    assert result.stderr.startswith("cannot downgrade to nonsense: ")
    result = run(["placement-manage", "db", "downgrade", HEAD], url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Schema already at %s.\n" % HEAD
    # From the upstream head a revision of ours is not a way down.
    run(["placement-manage", "db", "downgrade", schema.REFERENCE_HEAD], url)
    result = run(["placement-manage", "db", "downgrade", HEAD], url)
    assert result.returncode == 1, result.stdout
    assert "is at %s, not after %s" % (schema.REFERENCE_HEAD, HEAD) in result.stderr
