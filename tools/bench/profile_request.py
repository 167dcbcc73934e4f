"""Time, count and profile one request against a bulk-loaded database.

Loads one of the shared benchmark's data shapes (../shared/bench beside the repo) with
bulk INSERTs (seconds, even for 10,000 nested trees), builds our WSGI app
in-process and calls it directly: no HTTP, no client, so the figures are
our request path alone. For each query it prints the median/min time, the
SQL statements per request (counted by a SQLAlchemy event listener), the
response size and candidate count; ``--profile`` adds a pyinstrument
profile of one request (pyinstrument is a dev tool: install it into .venv,
it is not a runtime dependency).

    .venv/bin/python tools/bench/profile_request.py --shape nested --scale 1000
    .venv/bin/python tools/bench/profile_request.py --db mysql --shape wide \\
        --query 'resources=VCPU:1&resources1=VGPU:1&group_policy=isolate'
    .venv/bin/python tools/bench/profile_request.py --shape nested \\
        --scale 10000 --path '/resource_providers?in_tree={root}'

``{root}`` in a path is replaced by the uuid of the first root provider.

``--serve N`` also starts ``placement-api`` (``--workers``/``--threads``) on
the loaded database and sends each path N times from ``--concurrency``
client threads over HTTP: requests/s, latency and the server's CPU time per
request (its process group, from /proc), like the shared benchmark's
throughput phase but without loading through the API.
"""

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
import wsgiref.util

import sqlalchemy as sa

from placement import conf as placement_conf
from placement import deploy
from placement.cmd import api
from placement.db import api as db_api
from placement.db import schema
from placement.db import tables
from placement.db import triggers
from placement.objects import standard_names
from placement.objects.catalog import changes

sys.path.insert(0, __file__.rsplit("/", 3)[0])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cloud_day  # noqa: E402  (the cloud shape is its hosts and request)
import procfs  # noqa: E402

from tests import fixtures  # noqa: E402  (fresh SQLite/MySQL databases)

FLAT_AGGREGATES = [
    "14a5c8a3-5a99-4e8f-88be-00d85fcb1c17",
    "66d98e7c-3c25-485d-a0dc-1cea651884de",
    "a59dbb28-fd98-4c6e-9ec5-ae5f3d04b0aa",
]
FLAT_TRAITS = ["HW_CPU_X86_AVX2", "HW_CPU_X86_SSE2", "STORAGE_DISK_SSD"]

QUERIES = {
    "flat": [
        "resources=VCPU:1,DISK_GB:10,MEMORY_MB:256"
        "&member_of=14a5c8a3-5a99-4e8f-88be-00d85fcb1c17"
        "&required=HW_CPU_X86_AVX2",
        "resources=VCPU:8&limit=5",
    ],
    "nested": [
        "resources=DISK_GB:10&required=COMPUTE_VOLUME_MULTI_ATTACH"
        "&resources_COMPUTE=VCPU:1,MEMORY_MB:256"
        "&required_COMPUTE=CUSTOM_FOO&resources_FPGA=FPGA:1"
        "&group_policy=none&same_subtree=_COMPUTE,_FPGA"
    ],
    "wide": [
        "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10%s"
        "&group_policy=isolate%s"
        % ("".join("&resources%d=VGPU:1" % g for g in range(1, n + 1)), limit)
        for n in (1, 2, 3, 4, 5)
        for limit in ("", "&limit=10")
    ],
    "rp-list": [],
    # cloud_day.py's scheduler request.
    "cloud": [cloud_day.AC_QUERY.split("?", 1)[1] % 1000],
    # More single-unit groups than any tree has units: pruned before any
    # walk, however many combinations the trees would otherwise offer.
    "symmetric": [
        "%s&group_policy=none%s"
        % ("&".join("resources%d=SRIOV_NET_VF:1" % g for g in range(1, n + 1)), limit)
        for n, limit in ((4, "&limit=10"), (11, ""))
    ],
}
PATHS = {"rp-list": ["/resource_providers"]}


class Loader:
    """Bulk INSERTs of providers with inventories, traits and aggregates."""

    def __init__(self, db):
        self.db = db
        self.next_id = 1
        self.providers, self.inventories = [], []
        self.traits, self.aggregates = [], []
        with db.reader() as conn:
            self.class_ids = dict(
                conn.execute(
                    sa.select(
                        tables.resource_classes.c.name, tables.resource_classes.c.id
                    )
                ).all()
            )
            self.trait_ids = dict(
                conn.execute(sa.select(tables.traits.c.name, tables.traits.c.id)).all()
            )
        self.agg_ids = {}

    def trait(self, name):
        if name not in self.trait_ids:
            with self.db.writer() as conn:
                # Rows written directly: every catalog reads them whole.
                changes.record(conn, changes.EVERYTHING)
                conn.execute(tables.traits.insert(), {"name": name})
                self.trait_ids[name] = conn.scalar(
                    sa.select(tables.traits.c.id).where(tables.traits.c.name == name)
                )
        return self.trait_ids[name]

    def aggregate(self, agg_uuid):
        if agg_uuid not in self.agg_ids:
            with self.db.writer() as conn:
                # Rows written directly: every catalog reads them whole.
                changes.record(conn, changes.EVERYTHING)
                conn.execute(tables.placement_aggregates.insert(), {"uuid": agg_uuid})
                self.agg_ids[agg_uuid] = conn.scalar(
                    sa.select(tables.placement_aggregates.c.id).where(
                        tables.placement_aggregates.c.uuid == agg_uuid
                    )
                )
        return self.agg_ids[agg_uuid]

    def provider(self, name, inventories, parent=None, traits=(), aggregates=()):
        rp_id = self.next_id
        self.next_id += 1
        root = parent[1] if parent else rp_id
        self.providers.append(
            {
                "id": rp_id,
                "uuid": str(uuid.uuid4()),
                "name": name,
                "generation": 1,
                "root_provider_id": root,
                "parent_provider_id": parent[0] if parent else None,
            }
        )
        for rc, inv in inventories.items():
            self.inventories.append(
                {
                    "resource_provider_id": rp_id,
                    "resource_class_id": self.class_ids[rc],
                    "total": inv["total"],
                    "reserved": inv.get("reserved", 0),
                    "min_unit": inv.get("min_unit", 1),
                    "max_unit": inv.get("max_unit", inv["total"]),
                    "step_size": inv.get("step_size", 1),
                    "allocation_ratio": inv.get("allocation_ratio", 1.0),
                }
            )
        self.traits.extend(
            {"resource_provider_id": rp_id, "trait_id": self.trait(t)} for t in traits
        )
        self.aggregates.extend(
            {"resource_provider_id": rp_id, "aggregate_id": self.aggregate(a)}
            for a in aggregates
        )
        return rp_id, root

    def flush(self):
        with untriggered(self.db), self.db.writer() as conn:
            # Rows written directly: every catalog reads them whole.
            changes.record(conn, changes.EVERYTHING)
            for table, rows in (
                (tables.resource_providers, self.providers),
                (tables.inventories, self.inventories),
                (tables.resource_provider_traits, self.traits),
                (tables.resource_provider_aggregates, self.aggregates),
            ):
                for start in range(0, len(rows), 5000):
                    conn.execute(table.insert(), rows[start : start + 5000])
        first = self.providers[0]["uuid"] if self.providers else None
        self.providers, self.inventories = [], []
        self.traits, self.aggregates = [], []
        return first


@contextlib.contextmanager
def untriggered(db):
    """Bulk rows written without the change-log triggers (dropped, then
    made again): one log row per row loaded would slow the load several
    times over and fill the log, where one EVERYTHING (``Loader.flush``),
    or a load before any server reads the database, says it all."""
    with db.engine.begin() as conn:
        had = triggers.installed(conn)
        triggers.drop(conn)
    try:
        yield
    finally:
        if had:
            with db.engine.begin() as conn:
                triggers.create(conn)


def load_flat(loader, n):
    for i in range(n):
        loader.provider(
            "flat-%d" % i,
            {
                "VCPU": {"total": 32, "max_unit": 16},
                "MEMORY_MB": {"total": 8192, "min_unit": 128},
                "DISK_GB": {"total": 8192, "min_unit": 5},
            },
            traits=FLAT_TRAITS[: i % 3 + 1],
            aggregates=FLAT_AGGREGATES[: i % 3 + 1],
        )


def load_nested(loader, n):
    for i in range(n):
        cn = loader.provider(
            "cn-%d" % i,
            {"DISK_GB": {"total": 20480}},
            traits=["COMPUTE_VOLUME_MULTI_ATTACH"],
        )
        numa0 = loader.provider(
            "numa0-%d" % i,
            {
                "VCPU": {"total": 4, "reserved": 2},
                "MEMORY_MB": {"total": 2048, "min_unit": 512, "step_size": 256},
            },
            cn,
            ["HW_NUMA_ROOT"],
        )
        loader.provider("fpga0-%d" % i, {"FPGA": {"total": 1}}, numa0)
        loader.provider("pgpu0-%d" % i, {"VGPU": {"total": 8}}, numa0)
        numa1 = loader.provider(
            "numa1-%d" % i,
            {
                "VCPU": {"total": 4},
                "MEMORY_MB": {"total": 2048, "min_unit": 256, "max_unit": 1024},
            },
            cn,
            ["HW_NUMA_ROOT", "CUSTOM_FOO"],
        )
        loader.provider("fpga1-0-%d" % i, {"FPGA": {"total": 1}}, numa1)
        loader.provider("fpga1-1-%d" % i, {"FPGA": {"total": 1}}, numa1)


def load_wide(loader, n, children=8, vgpus=4):
    for i in range(n):
        root = loader.provider(
            "wide-%d" % i,
            {
                "VCPU": {"total": 64},
                "MEMORY_MB": {"total": 262144},
                "DISK_GB": {"total": 4096},
            },
        )
        for j in range(children):
            loader.provider("wide-%d-pgpu%d" % (i, j), {"VGPU": {"total": vgpus}}, root)


def load_symmetric(loader, n, children=10):
    for i in range(n):
        root = loader.provider("sym-%d" % i, {})
        for j in range(children):
            loader.provider(
                "sym-%d-vf%d" % (i, j), {"SRIOV_NET_VF": {"total": 1}}, root
            )


def load_cloud(loader, n):
    """cloud_day.py's hosts: a root with disk and CPU traits, two NUMA nodes."""
    for i in range(n):
        root = loader.provider(
            "compute-%05d" % i,
            cloud_day.HOST_INVENTORY,
            traits=list(cloud_day.HOST_TRAITS),
            aggregates=cloud_day.aggregates_of(i),
        )
        for numa in range(2):
            loader.provider(
                "compute-%05d-numa%d" % (i, numa),
                cloud_day.NUMA_INVENTORY,
                root,
                list(cloud_day.NUMA_TRAITS),
            )


def load_rp_list(loader, n):
    for i in range(n):
        root = loader.provider("list-%d" % i, {})
        for numa in range(2):
            node = loader.provider("list-%d-numa%d" % (i, numa), {}, root)
            for dev in range(2):
                loader.provider("list-%d-numa%d-dev%d" % (i, numa, dev), {}, node)


LOADERS = {
    "flat": load_flat,
    "nested": load_nested,
    "wide": load_wide,
    "rp-list": load_rp_list,
    "cloud": load_cloud,
    "symmetric": load_symmetric,
}


class StatementCounter:
    def __init__(self, engine):
        self.count = 0
        sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *args):
        self.count += 1


def call(app, path, version):
    path, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "HTTP_X_AUTH_TOKEN": "admin",
        "HTTP_ACCEPT": "application/json",
        "HTTP_OPENSTACK_API_VERSION": "placement %s" % version,
    }
    wsgiref.util.setup_testing_defaults(environ)
    status = []
    body = b"".join(app(environ, lambda s, h, e=None: status.append(s)))
    return status[0], body


def measure(app, counter, path, version, repeat, profile):
    times, cpu, statements = [], [], []
    for _ in range(repeat):
        before = counter.count
        start, start_cpu = time.perf_counter(), time.process_time()
        status, body = call(app, path, version)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        statements.append(counter.count - before)
    cands = ""
    if status.startswith("200") and path.startswith("/allocation_cand"):
        found = json.loads(body)
        if "allocation_requests" in found:
            cands = " candidates=%d" % len(found["allocation_requests"])
        elif "capacity" in found:
            cands = " capacity=%d roots=%d exact=%s" % (
                found["capacity"],
                len(found["roots"]),
                found["exact"],
            )
    print(
        "%s\n  %s median=%.3fms min=%.3fms cpu=%.3fms cpu_min=%.3fms "
        "statements=%s bytes=%d%s"
        % (
            path,
            status,
            statistics.median(times) * 1000,
            min(times) * 1000,
            statistics.median(cpu) * 1000,
            min(cpu) * 1000,
            sorted(set(statements)),
            len(body),
            cands,
        ),
        flush=True,
    )
    if profile:
        import pyinstrument

        profiler = pyinstrument.Profiler(interval=0.0005)
        with profiler:
            call(app, path, version)
        print(
            profiler.output_text(unicode=False, color=False, show_all=False), flush=True
        )
    return statistics.median(times)


def _peak_rss_mb(pgid):
    """Peak resident memory (VmHWM) of each process of the group."""
    out = []
    for pid, _ in procfs.group(pgid):
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out.append(int(line.split()[1]) // 1024)
    return sorted(out)


@contextlib.contextmanager
def server(url, workers, threads, active, http_server=None):
    """Run placement-api (``--server http_server`` when given) on the
    database ``url``: yields its base URL and process group."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(
        os.environ,
        OS_PLACEMENT_DATABASE__CONNECTION=url,
        OS_API__AUTH_STRATEGY="noauth2",
    )
    proc = subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "placement-api"),
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--active",
            str(active),
            *(("--server", http_server) if http_server else ()),
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = "http://127.0.0.1:%d" % port
    try:
        # Up to about 5 minutes: 100,000 hosts' catalog on a loaded machine.
        for _ in range(3000):
            try:
                urllib.request.urlopen(base + "/", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        yield base, proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def throughput(base, pgid, path, version, total, concurrency, keepalive=False):
    headers = {
        "x-auth-token": "admin",
        "accept": "application/json",
        "openstack-api-version": "placement %s" % version,
    }
    request = urllib.request.Request(base + path, headers=headers)
    local = threading.local()

    def one(_):
        start = time.perf_counter()
        if keepalive:
            # One connection per client thread, kept alive (as nova's
            # keystoneauth session does).
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(
                    urllib.parse.urlsplit(base).netloc, timeout=600
                )
            conn.request("GET", path, headers=headers)
            conn.getresponse().read()
        else:
            with urllib.request.urlopen(request, timeout=600) as resp:
                resp.read()
        return time.perf_counter() - start

    one(0)
    cpu, start = procfs.group_cpu(pgid), time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        latencies = sorted(pool.map(one, range(total)))
    wall = time.perf_counter() - start
    print(
        "  HTTP%s c=%d: %.1f req/s p50=%.4fs p95=%.4fs server CPU %.2f ms/req"
        % (
            " keep-alive" if keepalive else "",
            concurrency,
            total / wall,
            latencies[len(latencies) // 2],
            latencies[int(len(latencies) * 0.95)],
            (procfs.group_cpu(pgid) - cpu) * 1000 / total,
        ),
        flush=True,
    )


@contextlib.contextmanager
def fresh_database(backend, conf):
    with fixtures.database_url(backend) as url:
        with at_head(url, conf) as db:
            yield url, db


def noauth_conf(cli_opts=()):
    """A parsed configuration for an app built in process: no files read,
    the defaults, no authentication (noauth2); ``cli_opts`` registered
    first (a command's own options)."""
    conf = placement_conf.command_conf()
    conf.register_cli_opts(cli_opts)
    placement_conf.parse_args(conf, [], default_config_files=[])
    conf.set_override("auth_strategy", "noauth2", group="api")
    return conf


@contextlib.contextmanager
def at_head(url, conf):
    """The Database of the empty database ``url`` (for ``conf``), its
    schema upgraded to head and the standard names in it."""
    engine = db_api.create_engine(url, conf)
    schema.upgrade(engine)
    db = db_api.Database(engine, conf)
    standard_names.sync_standard_names(db)
    try:
        yield db
    finally:
        engine.dispose()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "mysql"), default="sqlite")
    parser.add_argument("--shape", choices=sorted(LOADERS), default="nested")
    parser.add_argument(
        "--scale",
        type=int,
        default=1000,
        help="providers (flat), trees (nested, wide, rp-list, symmetric)",
    )
    parser.add_argument(
        "--query",
        action="append",
        help="allocation candidate query (default: the shape's benchmark queries)",
    )
    parser.add_argument("--path", action="append", help="any GET path")
    parser.add_argument("--version", default="1.39")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="exit 1 when some path's median time is over SECONDS",
    )
    parser.add_argument(
        "--serve", type=int, metavar="N", help="also N requests per path over HTTP"
    )
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument(
        "--keepalive",
        action="store_true",
        help="each client thread keeps its HTTP connection (as nova does)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--active", type=int, default=2, help="placement-api --active")
    args = parser.parse_args()

    conf = noauth_conf()
    with fresh_database(args.db, conf) as (url, db):
        conf.set_override("connection", url, group="placement_database")
        loader = Loader(db)
        start = time.perf_counter()
        LOADERS[args.shape](loader, args.scale)
        root = loader.flush()
        print(
            "loaded %s x %d in %.1fs"
            % (args.shape, args.scale, time.perf_counter() - start)
        )
        app = deploy.build_app(conf, db=db, sync_schema=False)
        api.tune_gc()  # as placement-api does in every worker
        counter = StatementCounter(db.engine)
        paths = (args.path or []) + [
            "/allocation_candidates?" + q for q in (args.query or QUERIES[args.shape])
        ]
        if not args.path and not args.query:
            paths = PATHS.get(args.shape, []) + paths
        paths = [path.replace("{root}", root) for path in paths]
        over = []
        for path in paths:
            median = measure(
                app, counter, path, args.version, args.repeat, args.profile
            )
            if args.budget is not None and median > args.budget:
                over.append(path)
        if args.serve:
            db.engine.dispose()
            with server(url, args.workers, args.threads, args.active) as (base, pgid):
                for path in paths:
                    print(path)
                    throughput(
                        base,
                        pgid,
                        path,
                        args.version,
                        args.serve,
                        args.concurrency,
                        args.keepalive,
                    )
                print("server peak RSS per process (MB): %s" % _peak_rss_mb(pgid))
        print(
            "peak RSS %.0f MB"
            % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        )
    if over:
        sys.exit("over the %gs budget: %s" % (args.budget, ", ".join(over)))


if __name__ == "__main__":
    main()
