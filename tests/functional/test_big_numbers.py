"""Big and odd numbers in inventories, on every backend: a ratio up to the
schema's 3.4e38 leaves the read routes answering (the catalog's
fingerprint bounds its ratio term, and a failed comparison reads the
catalog again), capacities past 64 bits are answered alike by candidates
and capacity, an inventory write answers the ratio every backend then
reads back, and an integer past 64 bits in a body is quoted as sent."""

import uuid

import pytest
import sqlalchemy as sa

from placement.db import tables
from placement.objects.catalog import fingerprint
from placement.objects.catalog import verify
from tests import fixtures
from tests import wsgi_client

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}
READS = (
    "/resource_providers",
    "/allocation_candidates?resources=VCPU:1",
    "/allocation_candidates/explain?resources=VCPU:1",
    "/allocation_candidates/capacity?resources=VCPU:1",
)
MAX_INT = 2147483647


class Cloud:
    def __init__(self, app, db):
        self.app, self.db = app, db

    def call(self, path, method="GET", body=None, status=200):
        resp = wsgi_client.call(self.app, path, method, body, **HEADERS)
        assert resp.status == status, (path, resp.status, resp.body[:2000])
        return resp.json() if resp.body else None

    def provider(self, name=None):
        rp = str(uuid.uuid4())
        self.call(
            "/resource_providers",
            "POST",
            {"name": name or rp, "uuid": rp},
            status=200,
        )
        return rp

    def generation(self, rp):
        return self.call("/resource_providers/%s" % rp)["generation"]

    def put_inventories(self, rp, inventories, status=200):
        return self.call(
            "/resource_providers/%s/inventories" % rp,
            "PUT",
            {
                "resource_provider_generation": self.generation(rp),
                "inventories": inventories,
            },
            status=status,
        )

    def inventories(self, rp):
        return self.call("/resource_providers/%s/inventories" % rp)["inventories"]

    def sql(self, statement):
        """A write by another writer: no change recorded."""
        with self.db.engine.begin() as conn:
            conn.execute(statement)


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request, monkeypatch):
    fixtures.require_backend(request.param)
    # Every request compares the catalog with the database first.
    monkeypatch.setattr(verify, "VERIFY_EVERY_S", 0.0)
    with fixtures.app(request.param) as (app, db):
        yield Cloud(app, db)


@pytest.mark.parametrize("ratio", [3.4e38, 2.1e9, 1e-300, 0.1234567])
def test_any_ratio_leaves_the_reads_up_and_is_told_apart(cloud, ratio):
    rp = cloud.provider()
    cloud.put_inventories(rp, {"VCPU": {"total": 8, "allocation_ratio": ratio}})
    for path in READS:
        cloud.call(path)
    # Another writer's change of the ratio shows: the fingerprint still
    # tells ratios apart.
    cloud.sql(sa.update(tables.inventories).values(allocation_ratio=2.0))
    found = cloud.call("/allocation_candidates?resources=VCPU:1")
    assert found["provider_summaries"][rp]["resources"]["VCPU"]["capacity"] == 16
    for path in READS:
        cloud.call(path)
    cloud.sql(sa.update(tables.inventories).values(allocation_ratio=ratio))
    capacity = cloud.call("/allocation_candidates/capacity?resources=VCPU:1")
    assert capacity["capacity"] == int(
        8 * cloud.inventories(rp)["VCPU"]["allocation_ratio"]
    )


@pytest.mark.parametrize(
    "ratio", [3.4e38, -3.4e38, 2.1e9, 2.7e8, 0.0125, 1e-38, 1.4e-45, 0.85]
)
def test_the_database_and_a_catalog_hash_a_stored_ratio_alike(cloud, ratio):
    """Any ratio the column holds (written by this service, or by SQL:
    negative ones too, with total == reserved), in the fingerprint
    statement and in a catalog's own: equal, and no offset."""
    rp = cloud.provider()
    cloud.put_inventories(rp, {"VCPU": {"total": 8, "reserved": 8}})
    cloud.sql(sa.update(tables.inventories).values(allocation_ratio=ratio))
    with cloud.db.reader() as conn:
        found = fingerprint.of_database(conn)
        rows = conn.execute(sa.select(tables.inventories)).mappings().all()
    term = fingerprint.ratio_of(cloud.db.dialect)
    hashed = [
        fingerprint.row_hash(
            r["resource_provider_id"],
            r["resource_class_id"],
            r["total"],
            r["reserved"],
            r["min_unit"],
            r["max_unit"],
            r["step_size"],
            term(r["allocation_ratio"]),
        )
        for r in rows
    ]
    inventories = 2 * fingerprint.INVENTORIES
    assert found[inventories : inventories + 2] == [len(rows), sum(hashed)]


def test_a_failed_comparison_reads_the_catalog_again(cloud, monkeypatch):
    rp = cloud.provider()
    cloud.put_inventories(rp, {"VCPU": {"total": 8}})
    cloud.call("/resource_providers")
    cloud.sql(sa.update(tables.inventories).values(allocation_ratio=2.0))

    def refused(*args, **kwargs):
        raise sa.exc.OperationalError("SELECT", {}, Exception("refused"))

    monkeypatch.setattr(fingerprint, "of_database", refused)
    found = cloud.call("/allocation_candidates?resources=VCPU:1")
    # Read again: the other writer's change is in the answer.
    assert found["provider_summaries"][rp]["resources"]["VCPU"]["capacity"] == 16
    for path in READS:
        cloud.call(path)


@pytest.mark.parametrize(
    "ratio, providers",
    [
        (3.4e38, 1),  # one limit past 2**127
        (5e9, 1),  # one limit past 2**63
        (3e9, 2),  # each below 2**63, their sum past it
    ],
)
def test_a_capacity_past_64_bits_is_answered_alike(cloud, ratio, providers):
    aggregate = str(uuid.uuid4())
    rps = [cloud.provider() for _ in range(providers)]
    for rp in rps:
        cloud.put_inventories(
            rp, {"VCPU": {"total": MAX_INT, "allocation_ratio": ratio}}
        )
        cloud.call(
            "/resource_providers/%s/aggregates" % rp,
            "PUT",
            {
                "aggregates": [aggregate],
                "resource_provider_generation": cloud.generation(rp),
            },
        )
    stored = cloud.inventories(rps[0])["VCPU"]["allocation_ratio"]
    each = int(MAX_INT * stored)
    assert each >= 2**62
    found = cloud.call("/allocation_candidates?resources=VCPU:1")
    assert {
        rp: s["resources"]["VCPU"]["capacity"]
        for rp, s in found["provider_summaries"].items()
    } == dict.fromkeys(rps, each)
    capacity = cloud.call("/allocation_candidates/capacity?resources=VCPU:1")
    assert capacity["capacity"] == each * providers
    assert [r["count"] for r in capacity["roots"]] == [each] * providers
    assert capacity["aggregates"] == {aggregate: each * providers}
    assert capacity["exact"] is True
    cloud.call("/allocation_candidates/explain?resources=VCPU:1")


# The ratio sent, and the one every backend stores and reads back (MySQL's
# FLOAT: a float32 in 6 digits).
RATIOS = [
    (1e-300, 0.0),
    (0.1234567, 0.123457),
    (-0.0, 0.0),
    (3.4e38, 3.4e38),
    (16777217.0, 16777200.0),
    (99999.95, 100000.0),
    (1.5, 1.5),
    (1, 1.0),
]


@pytest.mark.parametrize("sent, stored", RATIOS)
def test_an_inventory_write_is_stored_alike_and_echoed(cloud, sent, stored):
    """Every backend stores (and reads back) the ratio as MySQL's FLOAT
    holds it; the write answers the values sent, defaults filled in, as
    the contract says (not a re-read: "total": 100.0 answers 100.0)."""
    rp = cloud.provider()
    record = {"total": 100.0, "reserved": -0.0, "allocation_ratio": sent}
    answers = [
        cloud.call(
            "/resource_providers/%s/inventories" % rp,
            "POST",
            dict(record, resource_class="DISK_GB"),
            status=201,
        ),
        cloud.put_inventories(rp, {"VCPU": record, "DISK_GB": record})["inventories"][
            "VCPU"
        ],
        cloud.call(
            "/resource_providers/%s/inventories/VCPU" % rp,
            "PUT",
            dict(record, resource_provider_generation=cloud.generation(rp)),
        ),
    ]
    read = cloud.inventories(rp)["VCPU"]
    for answer in answers:
        assert repr(answer["allocation_ratio"]) == repr(sent)
        assert {k: answer[k] for k in read} == dict(
            read,
            allocation_ratio=answer["allocation_ratio"],
            total=100.0,
            reserved=-0.0,
        )
    assert repr(read["allocation_ratio"]) == repr(stored)
    assert (read["total"], read["reserved"]) == (100, 0)
    with cloud.db.reader() as conn:
        column = conn.scalars(sa.select(tables.inventories.c.allocation_ratio)).all()
    assert [repr(float(c)) for c in column] == [repr(stored)] * 2


def test_an_integer_past_64_bits_is_quoted_as_sent(cloud):
    rp = cloud.provider()
    for number in ("18446744073709551616", "-9223372036854775809"):
        resp = wsgi_client.call(
            cloud.app,
            "/resource_providers/%s/inventories" % rp,
            "POST",
            b'{"resource_class": "VCPU", "total": %s}' % number.encode(),
            content_type="application/json",
            **HEADERS,
        )
        assert resp.status == 400
        detail = resp.json()["errors"][0]["detail"]
        assert number in detail, detail
