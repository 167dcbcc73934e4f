"""CPU per request, in process, of a claim (wrk_serve.py's: ``GET
/allocation_candidates?resources=VCPU:1&limit=1`` then ``PUT
/allocations/{new consumer}`` on the same provider) with the catalog's
follow-up reads as they were before issue 45's fifth round ("before":
the log read built and run as before, through ``conn.execute``, its 32
shard numbers and counts bound; the claimed provider's usage and the
new consumer's allocations read through ``conn.execute``) and as they
are ("after": all three on the driver's cursor, ``db_api.plain_rows``,
their integers written in).

The whole app is called directly (no HTTP) on a fresh database (MariaDB
by default: PLACEMENT_TEST_MYSQL_URL) with wrk_serve.py's two
providers; batches of 50 claims alternate the two ways in one process,
so a busy machine slows both alike: medians over the batches of the CPU
(thread time) per request, and the statements per request.

    .venv/bin/python tools/bench/claim_floor_ab.py [--db sqlite] [--batches 20]
"""

import argparse
import collections
import os
import statistics
import sys
import time
import types
import uuid

import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import profile_request  # noqa: E402
import wrk_serve  # noqa: E402

from placement import conf as placement_conf  # noqa: E402
from placement import deploy  # noqa: E402
from placement.cmd import api  # noqa: E402
from placement.db import tables  # noqa: E402
from placement.objects.catalog import consumers  # noqa: E402
from placement.objects.catalog import deltas  # noqa: E402
from placement.objects.catalog import history  # noqa: E402
from placement.objects.catalog import used  # noqa: E402
from tests import wsgi_client  # noqa: E402

BATCH = 50
LOG = tables.catalog_log


def _since_before():
    """The log read as built before: shard numbers and counts bound."""
    past = sa.or_(
        *(
            sa.and_(
                LOG.c.shard == shard,
                LOG.c.seq >= sa.bindparam("low_%d" % shard, type_=sa.BigInteger),
            )
            for shard in range(tables.CATALOG_SHARDS)
        )
    )
    items = (
        sa.select(
            LOG.c.shard, LOG.c.seq, LOG.c.kind, LOG.c.ref, LOG.c.uuid, LOG.c.token
        )
        .where(past)
        .limit(deltas.MAX_ITEMS + 1)
        .subquery()
    )
    counts = deltas._SINCE.selects[0]  # the same as now
    return sa.union_all(counts, sa.select(items))


_SINCE_BEFORE = _since_before()


def since_before(conn, catalog):
    """``deltas.since`` as it was: through ``conn.execute``."""
    then = catalog.seqs
    now, marks, items = {}, {}, []
    low = {"low_%d" % s: then.get(s, 0) for s in range(tables.CATALOG_SHARDS)}
    for row in conn.execute(_SINCE_BEFORE, low):
        if row[2] is None:
            now[row[0]], marks[row[0]] = row[1], row[5]
        else:
            items.append(row)
    ranges = deltas._ranges(then, now)
    if (
        ranges is None
        or len(items) > deltas.MAX_ITEMS
        or not history.same(then, now, (catalog.tokens, marks), items)
    ):
        return now, marks, None
    return now, marks, deltas._named(ranges, items) if ranges else {}


def _through_execute(conn, statement, params=None):
    return conn.execute(statement, params or {}).all()


# name: [(module, attribute, before, after)]
WAYS = [
    (deltas, "since", since_before, deltas.since),
    *(
        (
            module,
            "db_api",
            types.SimpleNamespace(plain_rows=_through_execute),
            module.db_api,
        )
        for module in (used, consumers)
    ),
]


def use(way):
    for module, attribute, before, after in WAYS:
        setattr(module, attribute, before if way == "before" else after)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "mysql"), default="mysql")
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    conf.set_override("auth_strategy", "noauth2", group="api")
    headers = dict(wrk_serve.HEADERS)
    with profile_request.fresh_database(args.db, conf) as (url, db):
        conf.set_override("connection", url, group="placement_database")
        app = deploy.build_app(conf, db=db, sync_schema=False)
        api.tune_gc()  # as placement-api does in every worker

        def call(path, method="GET", body=None):
            resp = wsgi_client.call(app, path, method, body, headers=headers)
            assert resp.status < 300, (method, path, resp.status, resp.body)
            return resp

        for uuid_ in (wrk_serve.PROVIDER, wrk_serve.CLAIMED):
            call("/resource_providers", "POST", {"name": uuid_, "uuid": uuid_})
        call(
            "/resource_providers/%s/inventories" % wrk_serve.CLAIMED,
            "PUT",
            {
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 10_000_000, "max_unit": 1}},
            },
        )
        body = {
            "allocations": {wrk_serve.CLAIMED: {"resources": {"VCPU": 1}}},
            "project_id": wrk_serve.PROJECT,
            "user_id": wrk_serve.PROJECT,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }
        counter = profile_request.StatementCounter(db.engine)
        cpu = collections.defaultdict(list)
        statements = collections.defaultdict(collections.Counter)

        def timed(label, *request):
            before, start = counter.count, time.thread_time()
            call(*request)
            cpu[label].append(time.thread_time() - start)
            statements[label][counter.count - before] += 1

        def claims(way):
            use(way)
            for _ in range(BATCH):
                timed(way + " GET", "/allocation_candidates?resources=VCPU:1&limit=1")
                timed(way + " PUT", "/allocations/%s" % uuid.uuid4(), "PUT", body)

        for way in ("before", "after"):  # warm up, not counted
            claims(way)
        cpu.clear()
        statements.clear()
        for _ in range(args.batches):
            for way in ("before", "after"):
                claims(way)
        use("after")
    for request in ("GET", "PUT"):
        medians = {}
        for way in ("before", "after"):
            label = way + " " + request
            medians[way] = statistics.median(cpu[label]) * 1000
            print(
                "%-10s CPU median %.3f ms  statements %s"
                % (label, medians[way], dict(statements[label]))
            )
        print("  after/before %.3f" % (medians["after"] / medians["before"]))
    claim = {
        way: sum(statistics.median(cpu[way + " " + r]) for r in ("GET", "PUT")) * 1000
        for way in ("before", "after")
    }
    print(
        "claim      before %.3f ms  after %.3f ms" % (claim["before"], claim["after"])
    )


if __name__ == "__main__":
    main()
