"""CPU and database round trips per request of the benchmark's API load.

Replays the request sequence with which the shared benchmark
(../shared/bench beside the repo) fills a server through the API,
``load_flat_providers`` (flat: POST /resource_providers, PUT inventories,
aggregates, traits) or ``scenario_nested`` (7 providers per tree: POST with
a parent, PUT inventories, PUT traits), against our WSGI app in-process on
a fresh SQLite or MySQL database, one request at a time. For each request
kind it prints the median CPU and wall time per request and the round
trips to the database: on MySQL every command pymysql sends (statements,
COMMIT, ROLLBACK, the pool's pings), on SQLite every statement plus
COMMIT/ROLLBACK.

    .venv/bin/python tools/bench/write_load.py --db mysql --shape flat --scale 1000
    .venv/bin/python tools/bench/write_load.py --shape nested --scale 200 --sql

``--sql`` prints the round trips of the last request of each kind;
``--profile`` a pyinstrument profile of the whole load (pyinstrument is a
dev tool: install it into .venv, it is not a runtime dependency).
"""

import argparse
import collections
import io
import os
import statistics
import sys
import time
import uuid

import orjson
import sqlalchemy as sa

from placement import deploy
from placement.cmd import api

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_request import FLAT_AGGREGATES  # noqa: E402
from profile_request import FLAT_TRAITS  # noqa: E402
from profile_request import fresh_database  # noqa: E402
from profile_request import noauth_conf  # noqa: E402

FLAT_INVENTORY = {
    "MEMORY_MB": {"total": 8192, "min_unit": 128, "max_unit": 8192},
    "DISK_GB": {"total": 8192, "min_unit": 5, "max_unit": 8192},
    "VCPU": {"total": 32, "min_unit": 1, "max_unit": 16},
}


class RoundTrips:
    """Counts (and keeps the text of) what is sent to the database."""

    def __init__(self, engine):
        self.sent = []
        if engine.dialect.name == "mysql":
            from pymysql import connections

            original = connections.Connection._execute_command

            def counted(conn, command, sql):
                self.sent.append(sql if command == 3 else "<command %d>" % command)
                return original(conn, command, sql)

            connections.Connection._execute_command = counted
        else:
            sa.event.listen(engine, "before_cursor_execute", self._statement)
            sa.event.listen(engine, "commit", lambda conn: self.sent.append("COMMIT"))
            sa.event.listen(
                engine, "rollback", lambda conn: self.sent.append("ROLLBACK")
            )

    def _statement(self, conn, cursor, statement, *args):
        self.sent.append(statement)


class Replay:
    def __init__(self, app, trips, version):
        self.app, self.trips, self.version = app, trips, version
        self.cpu = collections.defaultdict(list)
        self.wall = collections.defaultdict(list)
        self.count = collections.defaultdict(list)
        self.last_sql = {}

    def req(self, kind, method, path, body):
        raw = orjson.dumps(body)
        environ = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(raw),
            "wsgi.errors": sys.stderr,
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(raw)),
            "HTTP_X_AUTH_TOKEN": "admin",
            "HTTP_ACCEPT": "application/json",
            "HTTP_OPENSTACK_API_VERSION": "placement %s" % self.version,
        }
        status = []
        before = len(self.trips.sent)
        start, start_cpu = time.perf_counter(), time.process_time()
        b"".join(self.app(environ, lambda s, h, e=None: status.append(s)))
        self.cpu[kind].append(time.process_time() - start_cpu)
        self.wall[kind].append(time.perf_counter() - start)
        self.count[kind].append(len(self.trips.sent) - before)
        self.last_sql[kind] = self.trips.sent[before:]
        if not status[0].startswith("2"):
            sys.exit("%s %s -> %s" % (method, path, status[0]))

    def provider(self, kind, name, parent=None):
        rp = str(uuid.uuid4())
        body = {"uuid": rp, "name": "%s-%s" % (name, rp)}
        if parent:
            body["parent_provider_uuid"] = parent
        self.req(kind, "POST", "/resource_providers", body)
        return rp


def flat(replay, i):
    rp = replay.provider("POST rp", "flat")
    base = "/resource_providers/%s" % rp
    replay.req(
        "PUT inventories",
        "PUT",
        base + "/inventories",
        {"resource_provider_generation": 0, "inventories": FLAT_INVENTORY},
    )
    replay.req(
        "PUT aggregates",
        "PUT",
        base + "/aggregates",
        {"resource_provider_generation": 1, "aggregates": FLAT_AGGREGATES[: i % 3 + 1]},
    )
    replay.req(
        "PUT traits",
        "PUT",
        base + "/traits",
        {"resource_provider_generation": 2, "traits": FLAT_TRAITS[: i % 3 + 1]},
    )


def nested(replay, i):
    def provider(name, parent, inventories, traits=()):
        rp = replay.provider("POST child rp" if parent else "POST rp", name, parent)
        base = "/resource_providers/%s" % rp
        replay.req(
            "PUT inventories",
            "PUT",
            base + "/inventories",
            {"resource_provider_generation": 0, "inventories": inventories},
        )
        if traits:
            replay.req(
                "PUT traits",
                "PUT",
                base + "/traits",
                {"resource_provider_generation": 1, "traits": list(traits)},
            )
        return rp

    cn = provider(
        "cn1", None, {"DISK_GB": {"total": 20480}}, ["COMPUTE_VOLUME_MULTI_ATTACH"]
    )
    numa0 = provider(
        "numa 0",
        cn,
        {
            "VCPU": {"total": 4, "reserved": 2},
            "MEMORY_MB": {"total": 2048, "min_unit": 512, "step_size": 256},
        },
        ["HW_NUMA_ROOT"],
    )
    provider("fpga0-0", numa0, {"FPGA": {"total": 1}})
    provider("pgpu0-0", numa0, {"VGPU": {"total": 8}})
    numa1 = provider(
        "numa 1",
        cn,
        {
            "VCPU": {"total": 4},
            "MEMORY_MB": {"total": 2048, "min_unit": 256, "max_unit": 1024},
        },
        ["HW_NUMA_ROOT", "CUSTOM_FOO"],
    )
    provider("fpga1-0", numa1, {"FPGA": {"total": 1}})
    provider("fpga1-1", numa1, {"FPGA": {"total": 1}})


SHAPES = {"flat": flat, "nested": nested}


def other_worker(url, conf):
    """The follower of another worker of the host, idle (``cmd/follower.py``):
    its own Database and catalog, read whole now, as a worker's at start."""
    from placement.cmd import follower
    from placement.cmd import gate
    from placement.db import api as db_api
    from placement.objects.catalog import refresh

    db = db_api.Database(db_api.create_engine(url, conf), conf)
    app = deploy.build_app(conf, db=db, sync_schema=False)
    refresh.warm(db)
    refresh.follow(db, True)
    return follower.Follower(db, gate.Gate(app, 2), idle=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "mysql"), default="sqlite")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="flat")
    parser.add_argument("--scale", type=int, default=500, help="providers or trees")
    parser.add_argument(
        "--warm", type=int, default=3, help="units loaded before measuring"
    )
    parser.add_argument("--version", default="1.39")
    parser.add_argument("--sql", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="another worker's follower steps after each unit (its CPU apart)",
    )
    args = parser.parse_args()

    conf = noauth_conf()
    with fresh_database(args.db, conf) as (url, db):
        conf.set_override("connection", url, group="placement_database")
        app = deploy.build_app(conf, db=db, sync_schema=False)
        api.tune_gc()  # as placement-api does in every worker
        trips = RoundTrips(db.engine)
        replay = Replay(app, trips, args.version)
        if args.shape == "nested":
            replay.req("PUT trait", "PUT", "/traits/CUSTOM_FOO", None)
        shape = SHAPES[args.shape]
        for i in range(args.warm):
            shape(replay, i)
        replay = Replay(app, trips, args.version)
        watcher = other_worker(url, conf) if args.follow else None
        profiler = None
        if args.profile:
            import pyinstrument

            profiler = pyinstrument.Profiler(interval=0.0002)
            profiler.start()
        start_cpu = time.process_time()
        followed = []
        for i in range(args.warm, args.warm + args.scale):
            shape(replay, i)
            if watcher is not None:
                start = time.thread_time()
                watcher.step()
                followed.append(time.thread_time() - start)
        total_cpu = time.process_time() - start_cpu
        if profiler is not None:
            profiler.stop()
        print(
            "%s %s x %d: %.2f s CPU in all"
            % (args.db, args.shape, args.scale, total_cpu)
        )
        print("%-16s %6s %9s %9s  %s" % ("kind", "n", "cpu ms", "wall ms", "trips"))
        for kind in replay.cpu:
            print(
                "%-16s %6d %9.3f %9.3f  %s"
                % (
                    kind,
                    len(replay.cpu[kind]),
                    statistics.median(replay.cpu[kind]) * 1000,
                    statistics.median(replay.wall[kind]) * 1000,
                    dict(sorted(collections.Counter(replay.count[kind]).items())),
                ),
                flush=True,
            )
        if followed:
            half = len(followed) // 2
            print(
                "follower step    %6d %9.3f  (first half %.3f, second half %.3f)"
                % (
                    len(followed),
                    statistics.median(followed) * 1000,
                    statistics.median(followed[:half]) * 1000,
                    statistics.median(followed[half:]) * 1000,
                )
            )
        if args.sql:
            for kind, sent in replay.last_sql.items():
                print("\n%s:" % kind)
                for text in sent:
                    print("  " + " ".join(str(text).split())[:200])
        if profiler is not None:
            print(
                profiler.output_text(unicode=False, color=False, show_all=False),
                flush=True,
            )


if __name__ == "__main__":
    main()
