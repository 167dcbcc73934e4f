"""CPU per request, in process, through each MySQL driver: PyMySQL
(``mysql+pymysql://``, pure Python) and mysqlclient (``mysql+mysqldb://``,
MySQL's C client library).

Two apps on the same fresh MariaDB database (one provider with an
inventory and one consumer's allocation), one per driver, called directly
(no HTTP); batches of requests alternate the drivers in one process, so a
busy machine slows both alike: median and min of the batches (a first
round not counted) and the ratio of the medians; the bodies compared. A
claim is its candidate GET and the PUT of a new consumer's allocations
(CPU per claim counts both). The floor of each: ``SELECT 1`` on the
driver's own connection.

    .venv/bin/python tools/bench/driver_ab.py [--batches 15] [--out FILE]
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid

import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import profile_request  # noqa: E402

from placement import deploy  # noqa: E402
from placement.db import api as db_api  # noqa: E402
from placement.db import engine as db_engine  # noqa: E402
from tests import fixtures  # noqa: E402
from tests import helpers  # noqa: E402

RP = "c0ffee00-0000-4000-8000-000000000001"
CONSUMER = "c0ffee00-0000-4000-8000-0000000000c1"
PROJECT = "c0ffee00-0000-4000-8000-0000000000a1"
HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
DRIVERS = ("pymysql", "mysqldb")
READS = {
    "GET /resource_providers/{uuid}": "/resource_providers/" + RP,
    "GET /resource_providers/{uuid}/allocations": (
        "/resource_providers/%s/allocations" % RP
    ),
    "GET /resource_providers/{uuid}/usages": "/resource_providers/%s/usages" % RP,
}
CLAIM = "claim (candidates GET + PUT)"
# The floor: a statement on the driver's own connection (autocommit), no
# SQLAlchemy nor app.
FLOOR = "SELECT 1 (the driver's cursor)"
# Requests per batch: reads, claims.
BATCH = {"read": 200, "claim": 20}


def _seed(client):
    for method, path, body in (
        ("POST", "/resource_providers", {"name": "bench", "uuid": RP}),
        (
            "PUT",
            "/resource_providers/%s/inventories" % RP,
            {
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 1_000_000}},
            },
        ),
        ("PUT", "/allocations/" + CONSUMER, _claim_body()),
    ):
        resp = client.request(method, path, json=body)
        assert resp.is_success, resp.text


def _claim_body():
    return {
        "allocations": {RP: {"resources": {"VCPU": 1}}},
        "project_id": PROJECT,
        "user_id": PROJECT,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }


def _claim(client):
    resp = client.get("/allocation_candidates?resources=VCPU:1&limit=1")
    assert resp.status_code == 200, resp.text
    resp = client.put("/allocations/%s" % uuid.uuid4(), json=_claim_body())
    assert resp.status_code == 204, resp.text


def _select_1(dbapi_conn):
    cursor = dbapi_conn.cursor()
    cursor.execute("SELECT 1")
    cursor.fetchall()
    cursor.close()


def _batch(client, label, app, dbapi_conn):
    """CPU ms per request (per claim) of one batch, and the last body."""
    body = None
    start = time.process_time()
    if label == FLOOR:
        for _ in range(BATCH["read"]):
            _select_1(dbapi_conn)
        count = BATCH["read"]
    elif label == CLAIM:
        for _ in range(BATCH["claim"]):
            _claim(client)
        count = BATCH["claim"]
    else:
        for _ in range(BATCH["read"]):
            status, body = profile_request.call(app, READS[label], "1.39")
            assert status.startswith("200"), status
        count = BATCH["read"]
    return (time.process_time() - start) / count * 1e3, body


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    conf = fixtures.configure()  # noauth2
    with profile_request.fresh_database("mysql", conf) as (url, seeded):
        seeded.engine.dispose()
        apps, dbs, raw = {}, [], {}
        for driver in DRIVERS:
            through = sa.engine.make_url(url).set(drivername="mysql+" + driver)
            db = db_api.Database(db_api.create_engine(through, conf), conf)
            dbs.append(db)
            apps[driver] = deploy.build_app(conf, db=db, sync_schema=False)
            raw[driver] = db_engine.autocommit(db.engine).raw_connection()
        clients = {d: helpers.wsgi_client(a, HEADERS) for d, a in apps.items()}
        _seed(clients["pymysql"])
        found = {label: {d: [] for d in DRIVERS} for label in [FLOOR, *READS, CLAIM]}
        for label, ms in found.items():
            bodies = {}
            for batch in range(args.batches + 1):
                # Each driver first in turn.
                order = DRIVERS if batch % 2 else DRIVERS[::-1]
                for driver in order:
                    cpu, bodies[driver] = _batch(
                        clients[driver], label, apps[driver], raw[driver]
                    )
                    if batch:
                        ms[driver].append(cpu)
            assert len(set(bodies.values())) == 1, bodies
            medians = {d: statistics.median(ms[d]) for d in DRIVERS}
            print(
                "%-46s %s"
                % (
                    label,
                    "  ".join(
                        "%s %.3f ms (min %.3f)" % (d, medians[d], min(ms[d]))
                        for d in DRIVERS
                    ),
                )
                + "  ratio %.2f" % (medians["mysqldb"] / medians["pymysql"]),
                flush=True,
            )
        for driver in DRIVERS:
            raw[driver].close()
        for db in dbs:
            db.engine.dispose()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "batch": BATCH,
                    "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
                    "ms": found,
                    "medians": {
                        label: {d: statistics.median(v) for d, v in ms.items()}
                        for label, ms in found.items()
                    },
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
