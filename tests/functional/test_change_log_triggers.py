"""The change log fed by the database triggers (placement/db/triggers.py):
a change by SQL by hand to every catalog table is logged as what it
changed and seen in the next answer without waiting for any comparison;
with the triggers dropped, the fallback (the periodic comparison) sees it
within its bound; a claim only moves the catalog's counts; a MariaDB user
without the TRIGGER privilege gets the schema without them, and every
place that reports the mode says so."""

import logging
import time
import uuid

import prometheus_client
import pytest
import sqlalchemy as sa
from oslo_middleware.healthcheck import opts as healthcheck_opts

from placement import deploy
from placement.api import healthcheck
from placement.db import api as db_api
from placement.db import tables
from placement.db import triggers
from placement.objects.catalog import changes
from placement.objects.catalog import refresh
from placement.objects.catalog import verify
from tests import fixtures
from tests import wsgi_client
from tests.functional import test_cmd

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}
LOG = tables.catalog_log


def _call(app, path, method="GET", body=None, status=200):
    resp = wsgi_client.call(app, path, method, body, **HEADERS)
    assert resp.status == status, resp.body
    return resp.json() if resp.body else None


def _updates(how):
    return (
        prometheus_client.REGISTRY.get_sample_value(
            "placement_catalog_updates_total", {"how": how}
        )
        or 0
    )


class Cloud:
    """One app on a fresh database, a host with VCPU and a consumer on it."""

    def __init__(self, app, db):
        self.app, self.db = app, db
        self.host = _call(app, "/resource_providers", "POST", {"name": "host"})["uuid"]
        _call(
            app,
            "/resource_providers/%s/inventories" % self.host,
            "PUT",
            {
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024}},
            },
        )
        self.consumer = str(uuid.uuid4())
        self.claim(self.consumer, VCPU=1)
        with db.engine.connect() as conn:
            self.rp = conn.scalar(
                sa.text("SELECT id FROM resource_providers WHERE uuid = :u"),
                {"u": self.host},
            )

    def claim(self, consumer, **resources):
        _call(
            self.app,
            "/allocations/%s" % consumer,
            "PUT",
            {
                "allocations": {self.host: {"resources": resources}},
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
            status=204,
        )

    def candidates(self, query="resources=VCPU:1"):
        found = _call(self.app, "/allocation_candidates?" + query)
        return set(found["provider_summaries"])

    def by_hand(self, *statements, **params):
        """Run ``statements`` in one transaction; the log items they
        wrote, {(kind, ref or uuid)}."""
        with self.db.engine.connect() as conn:
            before = changes.counts(conn)
        with self.db.engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement), {"rp": self.rp, **params})
        with self.db.engine.connect() as conn:
            after = changes.counts(conn)
            ranges = [
                sa.and_(LOG.c.shard == s, LOG.c.seq > before.get(s, 0), LOG.c.seq <= n)
                for s, n in after.items()
                if n > before.get(s, 0)
            ]
            if not ranges:
                return set()
            rows = conn.execute(
                sa.select(LOG.c.kind, LOG.c.ref, LOG.c.uuid).where(sa.or_(*ranges))
            ).all()
        return {
            (kind, uuid_ if kind == changes.CONSUMER else ref)
            for kind, ref, uuid_ in rows
        }


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        cloud = Cloud(app, db)
        # The first search reads the catalog, the second compares it with
        # the database: the next safety-net comparison is minutes away.
        assert cloud.candidates() == cloud.candidates() == {cloud.host}
        assert refresh.logged_by_triggers(db)
        assert not refresh._CACHES[db].stale()
        yield cloud


def _no_comparison(db):
    """What shows that no comparison read the catalog again."""
    return _updates("full"), _updates("foreign")


AGG = "4d2a0a5e-0c5f-4d8a-9d3b-2f1d6a0b7c11"


def test_every_catalog_table_written_by_hand_is_logged_and_seen(cloud):
    P, C = changes.PROVIDER, changes.CONSUMER
    rp = cloud.rp
    seen = _no_comparison(cloud.db)
    assert cloud.candidates("resources=VCPU:1&required=HW_CPU_X86_AVX2") == set()

    # A trait (resource_provider_traits), then an aggregate (its row and
    # the provider's membership), each in the next answer.
    logged = cloud.by_hand(
        "INSERT INTO resource_provider_traits (resource_provider_id, trait_id)"
        " SELECT :rp, id FROM traits WHERE name = 'HW_CPU_X86_AVX2'"
    )
    assert logged == {(P, rp)}
    assert cloud.candidates("resources=VCPU:1&required=HW_CPU_X86_AVX2") == {cloud.host}
    logged = cloud.by_hand(
        "INSERT INTO placement_aggregates (uuid) VALUES (:agg)",
        "INSERT INTO resource_provider_aggregates"
        " (resource_provider_id, aggregate_id)"
        " SELECT :rp, id FROM placement_aggregates WHERE uuid = :agg",
        agg=AGG,
    )
    assert {kind for kind, _ in logged} == {changes.AGGREGATE, P}
    assert cloud.candidates("resources=VCPU:1&member_of=%s" % AGG) == {cloud.host}

    # A custom class (resource_classes), a new trait (traits), an
    # inventory of it (inventories).
    logged = cloud.by_hand(
        "INSERT INTO resource_classes (id, name) VALUES (10001, 'CUSTOM_BY_HAND')",
        "INSERT INTO traits (name) VALUES ('CUSTOM_BY_HAND')",
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total,"
        " reserved, min_unit, max_unit, step_size, allocation_ratio)"
        " VALUES (:rp, 10001, 4, 0, 1, 4, 1, 1.0)",
    )
    kinds = {kind for kind, _ in logged}
    assert kinds == {changes.RESOURCE_CLASS, changes.TRAIT, P}
    assert (changes.RESOURCE_CLASS, 10001) in logged and (P, rp) in logged
    assert cloud.candidates("resources=CUSTOM_BY_HAND:1") == {cloud.host}

    # The provider's row: a rename is PROVIDER, a generation alone is
    # GENERATION.
    assert cloud.by_hand(
        "UPDATE resource_providers SET name = 'renamed' WHERE id = :rp"
    ) == {(P, rp)}
    listed = _call(cloud.app, "/resource_providers")["resource_providers"]
    assert [p["name"] for p in listed] == ["renamed"]
    assert cloud.by_hand(
        "UPDATE resource_providers SET generation = generation + 1 WHERE id = :rp"
    ) == {(changes.GENERATION, rp)}

    # An allocation and its consumer (allocations, consumers): USAGE of
    # the provider and CONSUMER of the uuid; the usage shows.
    consumer = str(uuid.uuid4())
    logged = cloud.by_hand(
        "INSERT INTO consumers (uuid, project_id, user_id, generation)"
        " SELECT :c, project_id, user_id, 0 FROM consumers LIMIT 1",
        "INSERT INTO allocations (resource_provider_id, consumer_id,"
        " resource_class_id, used) VALUES (:rp, :c, 0, 7)",
        c=consumer,
    )
    assert logged == {(C, consumer), (changes.USAGE, rp)}
    usages = _call(cloud.app, "/resource_providers/%s/usages" % cloud.host)
    assert usages["usages"]["VCPU"] == 8
    assert cloud.candidates() == set()
    assert _call(cloud.app, "/allocations/%s" % consumer)["allocations"]
    logged = cloud.by_hand(
        "DELETE FROM allocations WHERE consumer_id = :c",
        "DELETE FROM consumers WHERE uuid = :c",
        c=consumer,
    )
    assert logged == {(C, consumer), (changes.USAGE, rp)}
    assert cloud.candidates() == {cloud.host}

    # None of it waited for, or needed, a comparison.
    assert _no_comparison(cloud.db) == seen


def test_a_claim_only_moves_the_catalogs_counts(cloud):
    """A claim (PUT /allocations) fires the triggers of allocations,
    consumers and the provider's generation: the catalog follows the log
    without rebuilding anything, and what is derived from it stays."""
    assert cloud.candidates() == {cloud.host}
    _call(cloud.app, "/resource_providers")
    cache = refresh._CACHES[cloud.db]
    before = cache.catalog
    derived = dict(before.derived_by_tree)
    assert derived and before.columns is not None
    updates = {how: _updates(how) for how in ("full", "deltas", "foreign", "counts")}

    consumer = str(uuid.uuid4())
    cloud.claim(consumer, VCPU=2)
    assert cloud.candidates() == {cloud.host}
    _call(cloud.app, "/resource_providers")

    after = cache.catalog
    assert after.stamp > before.stamp
    assert after.structure is before.structure
    assert after.columns is before.columns
    assert after.derived_by_tree is before.derived_by_tree
    assert after.derived_by_tree.keys() >= derived.keys()
    assert after.fingerprint(cloud.db.dialect) == before.fingerprint(cloud.db.dialect)
    assert _updates("full") == updates["full"]
    assert _updates("deltas") == updates["deltas"]
    assert _updates("foreign") == updates["foreign"]
    assert _updates("counts") > updates["counts"]
    # The claim is seen by the reads that follow it.
    usages = _call(cloud.app, "/resource_providers/%s/usages" % cloud.host)
    assert usages["usages"]["VCPU"] == 3


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_with_the_triggers_dropped_the_fallback_sees_sql_by_hand(backend):
    fixtures.require_backend(backend)
    with fixtures.database(backend) as db:
        with db.engine.begin() as conn:
            triggers.drop(conn)
        app = deploy.build_app(fixtures.configure(), db=db, sync_schema=False)
        cloud = Cloud(app, db)
        assert not refresh.logged_by_triggers(db)
        assert "fallback" in refresh.mode(db)
        assert cloud.candidates("resources=VCPU:1&required=HW_CPU_X86_AVX2") == set()
        # Not logged: seen by the comparison, within today's bound.
        assert (
            cloud.by_hand(
                "INSERT INTO resource_provider_traits"
                " (resource_provider_id, trait_id)"
                " SELECT :rp, id FROM traits WHERE name = 'HW_CPU_X86_AVX2'"
            )
            == set()
        )
        time.sleep(verify.VERIFY_EVERY_S + 0.05)
        assert cloud.candidates("resources=VCPU:1&required=HW_CPU_X86_AVX2") == {
            cloud.host
        }
        # A refused claim has the next search compare first, as today.
        cache = refresh._CACHES[db]
        cache.doubt()
        assert cache.stale()


def test_with_the_triggers_a_refused_claim_doubts_nothing(cloud):
    cache = refresh._CACHES[cloud.db]
    cache.doubt()
    assert not cache.stale()


def test_the_lease_holder_prunes_the_log():
    with fixtures.database("sqlite") as db:
        cache = refresh._cache(db)
        with db.engine.begin() as conn:
            conn.execute(
                tables.catalog_changes.update()
                .where(tables.catalog_changes.c.shard == 3)
                .values(changes=changes.LOG_KEPT + 5)
            )
            conn.execute(
                LOG.insert(),
                [
                    {"shard": 3, "seq": seq, "item": 0, "kind": 6, "ref": 1}
                    for seq in range(1, changes.LOG_KEPT + 6)
                ],
            )
        assert cache.prune(db)
        assert not cache.prune(db)  # not again within PRUNE_EVERY_S
        with db.engine.connect() as conn:
            kept = conn.scalars(sa.select(LOG.c.seq).where(LOG.c.shard == 3)).all()
        assert sorted(kept) == list(range(6, changes.LOG_KEPT + 6))


# -- a MariaDB user without the TRIGGER privilege ---------------------------


def test_a_user_without_the_trigger_privilege_gets_the_fallback(caplog):
    fixtures.require_backend("mysql")
    with fixtures.database_url("mysql") as url:
        name = sa.make_url(url).database
        user = "notrig_%s" % uuid.uuid4().hex[:8]
        admin = sa.create_engine(fixtures.MYSQL_URL)
        with admin.begin() as conn:
            conn.execute(sa.text("CREATE USER '%s'@'%%'" % user))
            conn.execute(
                sa.text(
                    "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX,"
                    " ALTER, REFERENCES, LOCK TABLES ON %s.* TO '%s'@'%%'"
                    % (name, user)
                )
            )
        try:
            limited = sa.make_url(url).set(username=user)
            limited_url = limited.render_as_string(hide_password=False)
            synced = test_cmd.run(["placement-manage", "db", "sync"], limited_url)
            assert synced.returncode == 0, synced.stderr
            assert "triggers could not be created" in synced.stderr
            engine = sa.create_engine(url)
            with engine.connect() as conn:
                assert not triggers.installed(conn)
                assert "uuid" in {
                    c["name"] for c in sa.inspect(conn).get_columns("catalog_log")
                }
            engine.dispose()

            checked = test_cmd.run(
                ["placement-status", "upgrade", "check"], limited_url
            )
            assert checked.returncode == 1, checked.stdout
            assert "Check: Change Log Triggers" in checked.stdout
            assert "change-log triggers are missing" in checked.stdout

            conf = fixtures.configure()
            conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group="healthcheck")
            db = db_api.Database(db_api.create_engine(limited_url, conf), conf)
            try:
                with caplog.at_level(logging.INFO, "placement"):
                    deploy.warm_catalog(db)
                assert "change log: fallback" in caplog.text
                with fixtures.overrides(**{"healthcheck.detailed": True}):
                    app = deploy.build_app(conf, db=db, sync_schema=False)
                    resp = wsgi_client.call(app, healthcheck.HEALTHCHECK_PATH)
                assert resp.status == 200, resp.body
                reason = resp.json()["reasons"][0]
                assert reason["reason"] == "database reachable"
                assert reason["details"].startswith("change log: fallback")
            finally:
                db.engine.dispose()
        finally:
            with admin.begin() as conn:
                conn.execute(sa.text("DROP USER '%s'@'%%'" % user))
            admin.dispose()
