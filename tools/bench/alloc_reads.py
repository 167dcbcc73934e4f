"""In-process time of the reads answered from memory: the two allocation
reads the compute fleet and the schedulers send (``GET
/resource_providers/{uuid}/allocations`` and ``GET
/allocations/{consumer}``), the capacity of scale.py's flavor (``GET
/allocation_candidates/capacity``) and a project's usages (``GET
/usages``, with and without the user, and by consumer type at 1.38), on
a loaded database (``scale.py --keep --load-only``), through the WSGI
app called directly (no HTTP), with the provider catalog on (answers
from memory where the triggers log every writer's allocations:
doc/architecture.md "Allocations in memory") or off (``--sql``). Prints
per read the median wall and CPU time of its calls over ``--paths``
paths, and the statements per request; ``--reads`` picks the reads,
``--profile`` adds a cProfile of them (CPU time); ``--path`` adds any
GET path (``--reads paths`` for those alone). Runs on an older tree
too (it imports only what profile_request does), for a before-and-after
on one machine:

    .venv/bin/python tools/bench/alloc_reads.py --url 'mysql+pymysql://root@127.0.0.1:3306/placement_scale_...?charset=utf8mb4'
    .venv/bin/python tools/bench/alloc_reads.py --url URL --reads capacity --profile
"""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

import sqlalchemy as sa

from placement import deploy
from placement.cmd import api as cmd_api
from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import refresh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_request  # noqa: E402


def _paths(db, hosts):
    """A host's allocations and one consumer's, for ``hosts`` hosts with
    allocations spread over the cloud."""
    alloc, rp = tables.allocations, tables.resource_providers
    with db.reader() as conn:
        rows = conn.execute(
            sa.select(alloc.c.consumer_id, rp.c.uuid)
            .join(rp, rp.c.id == alloc.c.resource_provider_id)
            .where(alloc.c.id % 97 == 0)
            .limit(hosts)
        ).all()
    return {
        "provider": [
            ("/resource_providers/%s/allocations" % rp_uuid, None)
            for _, rp_uuid in rows
        ],
        "consumer": [("/allocations/%s" % consumer, None) for consumer, _ in rows],
    }


# scale.py's flavor (kept here: this file runs on older trees too).
CAPACITY = "/allocation_candidates/capacity?resources=VCPU:4,MEMORY_MB:8192,DISK_GB:80"


def _usage_paths(db):
    """A project's usages (the first project's, with its first user): in
    total, for the user, and by consumer type (1.38)."""
    with db.reader() as conn:
        project = conn.scalar(
            sa.select(tables.projects.c.external_id).order_by(tables.projects.c.id)
        )
        user = conn.scalar(
            sa.select(tables.users.c.external_id).order_by(tables.users.c.id)
        )
    base = "/usages?project_id=%s" % project
    return [
        (base, None),
        (base + "&user_id=%s" % user, None),
        (base + "&consumer_type=all", "1.38"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--sql", action="store_true", help="the catalog off")
    parser.add_argument("--repeat", type=int, default=20, help="calls per path")
    parser.add_argument("--paths", type=int, default=20, help="paths per read")
    parser.add_argument("--version", default="1.39")
    parser.add_argument(
        "--reads",
        default="provider,consumer,capacity,usages",
        help="which reads, comma-separated",
    )
    parser.add_argument(
        "--path",
        action="append",
        default=[],
        help="also this GET path (a read named 'paths'; e.g. scale.py's shapes)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile them")
    args = parser.parse_args()
    conf = profile_request.noauth_conf()
    conf.set_override("provider_catalog", not args.sql, group="placement")
    engine = db_api.create_engine(args.url, conf)
    db = db_api.Database(engine, conf)
    app = deploy.build_app(conf, db=db, sync_schema=False)
    started = time.perf_counter()
    refresh.warm(db)
    print("catalog read in %.1f s" % (time.perf_counter() - started))
    tune_gc = getattr(cmd_api, "tune_gc", None)
    if tune_gc is not None:
        tune_gc()  # the collector as placement-api's workers run it
    counter = profile_request.StatementCounter(engine)
    reads = _paths(db, args.paths)
    reads["capacity"] = [(CAPACITY, None)]
    reads["usages"] = _usage_paths(db)
    reads["paths"] = [(path, None) for path in args.path]
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    for name in args.reads.split(","):
        paths = reads[name]
        wall, cpu, statements = [], [], set()
        for path, version in paths:
            profile_request.call(app, path, version or args.version)  # warm
            for _ in range(args.repeat):
                before = counter.count
                if profiler is not None:
                    profiler.enable()
                start, start_cpu = time.perf_counter(), time.process_time()
                status, _ = profile_request.call(app, path, version or args.version)
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
                if profiler is not None:
                    profiler.disable()
                statements.add(counter.count - before)
                assert status.startswith("200"), (path, status)
        print(
            "%s (%d paths x %d): median %.3f ms (cpu %.3f ms), "
            "min %.3f ms, statements %s"
            % (
                name,
                len(paths),
                args.repeat,
                statistics.median(wall) * 1000,
                statistics.median(cpu) * 1000,
                min(wall) * 1000,
                sorted(statements),
            )
        )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
