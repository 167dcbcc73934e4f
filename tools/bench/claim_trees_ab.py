"""CPU per request, in process, of a claim (wrk_serve.py's: ``GET
/allocation_candidates?resources=VCPU:1&limit=1`` then ``PUT
/allocations/{new consumer}`` on the same provider) by two code trees
(``--base``, e.g. a ``git archive`` of main, and ``--new``, this one by
default), each in a process of its own on a fresh database of the same
MariaDB, batches of 50 claims alternated between them (which goes
first swapped every round: a busy machine slows both alike). Medians
over the batches of the CPU (thread time) per request, and the
statements per request. ``--driver mysqldb``: through mysqlclient
(``mysql+mysqldb://``) rather than PyMySQL.

``--look``: the catalog's look alone, the sums of the shards' counts
and tokens (``changes.STAMP``) and with every shard's count and token
as text too (``changes.STAMP_SHARDS``), and the 32 rows of the shards'
counts a catch-up reads without that text (``changes.MARKS``),
alternated in one process, on the service's connections
(``db_api.create_engine``): CPU, wall and, given ``--server-pid``, the
MariaDB process's CPU (its /proc ticks) per statement, medians over
batches of 2,000.

    .venv/bin/python tools/bench/claim_trees_ab.py --base <tree> [--batches 20]
    .venv/bin/python tools/bench/claim_trees_ab.py --look --server-pid <mysqld>

MariaDB at PLACEMENT_TEST_MYSQL_URL. The child (``--child TREE``)
imports ``placement`` from TREE and runs a batch per line read.
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid

import tree_batches

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(os.path.dirname(HERE))
BATCH = 50
LOOKS = 2000  # looks per batch (--look)


def claim_fixture(call, names):
    """The in-process claim's providers, made through ``call(path, method,
    body)`` with ``names`` (the ``wrk_serve`` module: its uuids): the
    claimed one with room for millions of claims; returns a claim's PUT
    body (its consumer's uuid left to the caller)."""
    for uuid_ in (names.PROVIDER, names.CLAIMED):
        call("/resource_providers", "POST", {"name": uuid_, "uuid": uuid_})
    call(
        "/resource_providers/%s/inventories" % names.CLAIMED,
        "PUT",
        {
            "resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": 10_000_000, "max_unit": 1}},
        },
    )
    return {
        "allocations": {names.CLAIMED: {"resources": {"VCPU": 1}}},
        "project_id": names.PROJECT,
        "user_id": names.PROJECT,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }


def child(tree, driver):
    sys.path[:0] = [tree, os.path.join(tree, "tools", "bench")]
    import profile_request
    import wrk_serve

    from placement import deploy
    from placement.cmd import api
    from tests import fixtures
    from tests import wsgi_client

    conf = profile_request.noauth_conf()
    headers = dict(wrk_serve.HEADERS)
    with fixtures.database_url(driver) as url:
        with profile_request.at_head(url, conf) as db:
            conf.set_override("connection", url, group="placement_database")
            app = deploy.build_app(conf, db=db, sync_schema=False)
            api.tune_gc()  # as placement-api does in every worker

            def call(path, method="GET", body=None):
                resp = wsgi_client.call(app, path, method, body, headers=headers)
                assert resp.status < 300, (method, path, resp.status, resp.body)

            body = claim_fixture(call, wrk_serve)
            counter = profile_request.StatementCounter(db.engine)
            query = "/allocation_candidates?resources=VCPU:1&limit=1"
            print(json.dumps({"ready": True}), flush=True)
            for _ in sys.stdin:
                out = {"GET": [], "PUT": [], "GET statements": [], "PUT statements": []}
                for _ in range(BATCH):
                    for kind, request in (
                        ("GET", (query,)),
                        ("PUT", ("/allocations/%s" % uuid.uuid4(), "PUT", body)),
                    ):
                        before = counter.count
                        start = time.thread_time()
                        call(*request)
                        out[kind].append(time.thread_time() - start)
                        out[kind + " statements"].append(counter.count - before)
                print(json.dumps(out), flush=True)


def trees_ab(args):
    trees = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    batches, load = tree_batches.alternated(
        __file__, trees, ["--driver", args.driver], args.batches
    )
    cpu = {label: {"GET": [], "PUT": []} for label in trees}
    statements = {label: {"GET": set(), "PUT": set()} for label in trees}
    for label, outs in batches.items():
        for out in outs:
            for kind in ("GET", "PUT"):
                cpu[label][kind].append(statistics.median(out[kind]) * 1000)
                statements[label][kind].update(out[kind + " statements"])
    figures = {"driver": args.driver, "batches": args.batches, "load": load}
    for label in trees:
        claim = [g + p for g, p in zip(cpu[label]["GET"], cpu[label]["PUT"])]
        figures[label] = {
            "GET_ms": statistics.median(cpu[label]["GET"]),
            "PUT_ms": statistics.median(cpu[label]["PUT"]),
            "claim_ms": statistics.median(claim),
            "GET_statements": sorted(statements[label]["GET"]),
            "PUT_statements": sorted(statements[label]["PUT"]),
        }
        print(
            "%-6s GET %.3f ms  PUT %.3f ms  claim %.3f ms  statements GET %s PUT %s"
            % (
                label,
                figures[label]["GET_ms"],
                figures[label]["PUT_ms"],
                figures[label]["claim_ms"],
                figures[label]["GET_statements"],
                figures[label]["PUT_statements"],
            )
        )
    print("driver %s, load %s -> %s" % (args.driver, *load))
    return figures


def _ticks(pid):
    """User and system CPU ticks of process ``pid`` so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def look_ab(args):
    sys.path.insert(0, TREE)

    from placement import conf as placement_conf
    from placement.db import api as db_api
    from placement.objects.catalog import changes
    from tests import fixtures

    ways = {
        "sums": changes.STAMP,
        "shards": changes.STAMP_SHARDS,
        "marks": changes.MARKS,
    }
    figures = {way: {"cpu_us": [], "wall_us": [], "server_us": []} for way in ways}
    load = [os.getloadavg()]
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    with fixtures.database_url(args.driver) as url:
        engine = db_api.create_engine(url, conf)  # the service's connections
        with engine.begin() as conn:
            changes.CATALOG.create(conn)  # and its 32 shard rows
            # As a cloud's: every shard counted, with a token.
            conn.execute(
                changes.CATALOG.update().values(
                    changes=12_345_678 + changes.CATALOG.c.shard, token=1_234_567_890
                )
            )
        with engine.connect() as conn:
            for round_ in range(args.batches + 1):
                for way, statement in ways.items():
                    ticks = _ticks(args.server_pid) if args.server_pid else 0
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    for _ in range(LOOKS):
                        db_api.plain_rows(conn, statement)
                    cpu = time.thread_time() - start_cpu
                    wall = time.perf_counter() - start
                    if not round_:
                        continue
                    figures[way]["cpu_us"].append(cpu * 1e6 / LOOKS)
                    figures[way]["wall_us"].append(wall * 1e6 / LOOKS)
                    if args.server_pid:
                        ticks = _ticks(args.server_pid) - ticks
                        figures[way]["server_us"].append(ticks * tick_us / LOOKS)
        engine.dispose()
    load.append(os.getloadavg())
    out = {"driver": args.driver, "batches": args.batches, "load": load}
    for way, measured in figures.items():
        out[way] = {k: statistics.median(v) for k, v in measured.items() if v}
        print(
            "look %-6s %s"
            % (way, "  ".join("%s %.1f" % item for item in out[way].items()))
        )
    print("driver %s, load %s -> %s" % (args.driver, *load))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the base tree (e.g. a git archive of main)")
    parser.add_argument("--new", default=TREE, help="the new tree (default: this)")
    parser.add_argument("--look", action="store_true", help="the look alone")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--driver", choices=("mysql", "mysqldb"), default="mysql")
    parser.add_argument(
        "--server-pid", type=int, help="--look: the MariaDB's pid, for its CPU"
    )
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.driver)
    if not (args.look or args.base):
        parser.error("--base TREE or --look")
    figures = look_ab(args) if args.look else trees_ab(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
