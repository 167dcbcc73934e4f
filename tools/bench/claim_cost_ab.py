"""CPU per request, in process, of a claim (wrk_serve.py's: ``GET
/allocation_candidates?resources=VCPU:1&limit=1`` then ``PUT
/allocations/{new consumer}`` on the same provider) as main had it
("before") and with issue 45's claim-cost changes ("after"), batches of
50 claims alternated in one process (a busy machine slows both alike):
medians over the batches of the CPU (thread time) per request, and the
statements and round trips (queries sent to MariaDB) per request.

The changes (``--ways``, all by default):

- ``described``: column descriptions parsed once per distinct bytes
  (``placement.db.described``) or, before, for every result;
- ``state``: the write's consumers-and-state read on the driver's cursor
  (``db_api.plain_rows``) or, before, through ``conn.execute``;
- ``swap``: the generation swap on the driver's cursor, its integers
  written in (``db_api.plain_count``) or, before, through
  ``conn.execute``, bound;
- ``reads``: the candidate GET's statements in autocommit
  (``Database.several_reads``) or, before, in a read transaction
  (``reader``: a COMMIT more);
- ``inserts``: the write's consumer and allocation INSERTs on the
  driver's cursor (``db_api.plain_insert``) or, before, through
  ``conn.execute`` (held for the COMMIT by ``db_api.at_commit``).

MariaDB (PLACEMENT_TEST_MYSQL_URL), wrk_serve.py's two providers:

    .venv/bin/python tools/bench/claim_cost_ab.py [--batches 20] [--out r.json]
"""

import argparse
import collections
import json
import os
import statistics
import sys
import time
import uuid

import sqlalchemy as sa
from pymysql import connections

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import claim_trees_ab  # noqa: E402
import profile_request  # noqa: E402
import wrk_serve  # noqa: E402

from placement import deploy  # noqa: E402
from placement.cmd import api  # noqa: E402
from placement.db import api as db_api  # noqa: E402
from placement.db import described  # noqa: E402
from placement.db import tables  # noqa: E402
from placement.db import transaction  # noqa: E402
from placement.objects import allocation  # noqa: E402
from placement.objects import common  # noqa: E402
from tests import wsgi_client  # noqa: E402

BATCH = 50


def _state_before(conn, uuids, named, class_ids):
    """``allocation._existing_with_state`` as it was: ``conn.execute``."""
    found, held, providers = {}, {}, {}
    generations, capacity = {}, {}
    consumers = list(set(uuids))
    rows = conn.execute(
        allocation._EXISTING_WITH_STATE,
        {
            "uuids": consumers,
            "consumers": consumers,
            "named": list(set(named)),
            "classes": list(set(class_ids)),
        },
    ).mappings()
    for row in rows:
        kind = row["kind"]
        if kind == 0:
            found[row["uuid"]] = row
        elif kind == 1:
            held.setdefault(row["uuid"], set()).add(row["id"])
        else:
            providers[row["uuid"]] = row["id"]
            allocation._add_state(row, generations, capacity)
    return found, held, providers, (generations, capacity)


RP = tables.resource_providers
_SWAP_BEFORE = (
    RP.update()
    .where(
        RP.c.id.in_(sa.bindparam("ids", expanding=True)),
        sa.tuple_(RP.c.id, RP.c.generation).in_(sa.bindparam("seen", expanding=True)),
    )
    .values(generation=RP.c.generation + 1, updated_at=RP.c.updated_at)
)


def _swap_before(conn, seen):
    """``common.swap_count`` as it was (a few providers): ``conn.execute``."""
    params = {"ids": list(seen), "seen": list(seen.items())}
    return conn.execute(_SWAP_BEFORE, params).rowcount


def _insert_before(conn, statement, rows, at_commit=False):
    """``db_api.plain_insert`` as it was: ``conn.execute``."""
    if at_commit:
        db_api.at_commit(conn, statement, rows)
    else:
        conn.execute(statement, rows)


# name: (object, attribute, before, after)
WAYS = {
    "described": (
        described.Connection,
        "_read_packet",
        connections.Connection._read_packet,
        described.Connection._read_packet,
    ),
    "state": (
        allocation,
        "_existing_with_state",
        _state_before,
        allocation._existing_with_state,
    ),
    "swap": (common, "swap_count", _swap_before, common.swap_count),
    "reads": (
        transaction.Database,
        "several_reads",
        transaction.Database.reader,
        transaction.Database.several_reads,
    ),
    "inserts": (db_api, "plain_insert", _insert_before, db_api.plain_insert),
}


def use(way, names):
    for name in names:
        target, attribute, before, after = WAYS[name]
        setattr(target, attribute, before if way == "before" else after)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    names = args.ways.split(",")
    conf = profile_request.noauth_conf()
    headers = dict(wrk_serve.HEADERS)
    sent = collections.Counter()
    execute_command = connections.Connection._execute_command

    def counted(self, command, sql):
        sent["queries"] += 1
        return execute_command(self, command, sql)

    connections.Connection._execute_command = counted
    load = [os.getloadavg()]
    with profile_request.fresh_database("mysql", conf) as (url, db):
        conf.set_override("connection", url, group="placement_database")
        app = deploy.build_app(conf, db=db, sync_schema=False)
        api.tune_gc()  # as placement-api does in every worker

        def call(path, method="GET", body=None):
            resp = wsgi_client.call(app, path, method, body, headers=headers)
            assert resp.status < 300, (method, path, resp.status, resp.body)
            return resp

        body = claim_trees_ab.claim_fixture(call, wrk_serve)
        counter = profile_request.StatementCounter(db.engine)
        cpu = collections.defaultdict(list)
        statements = collections.defaultdict(collections.Counter)
        trips = collections.defaultdict(collections.Counter)

        def timed(label, *request):
            before, queries = counter.count, sent["queries"]
            start = time.thread_time()
            call(*request)
            cpu[label].append(time.thread_time() - start)
            statements[label][counter.count - before] += 1
            trips[label][sent["queries"] - queries] += 1

        def claims(way):
            use(way, names)
            for _ in range(BATCH):
                timed(way + " GET", "/allocation_candidates?resources=VCPU:1&limit=1")
                timed(way + " PUT", "/allocations/%s" % uuid.uuid4(), "PUT", body)

        for way in ("before", "after"):  # warm up, not counted
            claims(way)
        cpu.clear()
        statements.clear()
        trips.clear()
        for _ in range(args.batches):
            for way in ("before", "after"):
                claims(way)
        use("after", names)
    load.append(os.getloadavg())
    figures = {"ways": names, "batches": args.batches, "load": load}
    for request in ("GET", "PUT"):
        for way in ("before", "after"):
            label = way + " " + request
            figures[label] = {
                "cpu_ms": statistics.median(cpu[label]) * 1000,
                "statements": dict(statements[label]),
                "round_trips": dict(trips[label]),
            }
            print(
                "%-10s CPU median %.3f ms  statements %s  round trips %s"
                % (
                    label,
                    figures[label]["cpu_ms"],
                    dict(statements[label]),
                    dict(trips[label]),
                )
            )
    for way in ("before", "after"):
        figures[way + " claim_ms"] = sum(
            figures[way + " " + r]["cpu_ms"] for r in ("GET", "PUT")
        )
    print(
        "claim      before %.3f ms  after %.3f ms  (load %s -> %s)"
        % (figures["before claim_ms"], figures["after claim_ms"], *load)
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
