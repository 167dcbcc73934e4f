"""The wide scenario's requests one by one, each worker's first apart.

Starts ``placement-api`` (2 workers x 10 threads, as the shared bench;
``claims_http.serving``) from a tree on a fresh MariaDB database, loads
the shared bench's wide shape through the API (200 roots with
VCPU/MEMORY_MB/DISK_GB, 8 children of 4 VGPU each, 10 clients at once),
leaves the server idle for a while
(the other server's turn in the bench), then sends each wide query N
times, each on a new connection (no keep-alive, like the bench), and
prints the server's CPU per request: the sum over its processes'
threads (``/proc/<pid>/task/<tid>/schedstat``, nanoseconds: what ticks
cannot tell apart at 10 ms). The bench times the median of 3 requests
that the kernel spreads over the 2 workers: its figure is mostly a
worker's first request.

    .venv/bin/python tools/bench/wide_first.py --tree <base> --tree . \\
        --mysql-url mysql+pymysql://root@127.0.0.1:3306 --passes 3

``--in-process N`` measures the same in process instead, for
``callgrind.py``: the wide shape bulk-loaded (profile_request.py's
loader) into a fresh database (``--db``), our WSGI app built on it, the
catalog read and every tree's summaries made as an idle worker's
follower does after the load (``--no-idle-warm``: not), then N requests
of each of ``--groups`` (g1's first, then g2's, ...) called directly;
each one's CPU (thread time) is printed, ``--profile first|warm`` adds a
cProfile in thread time of a group's first request or of its next ones:

    .venv/bin/python tools/bench/callgrind.py --small 0 --large 1 \\
        --tree base=<base> --tree ours=. -- \\
        .venv/bin/python tools/bench/wide_first.py --in-process {n} --groups 1
"""

import argparse
import concurrent.futures
import cProfile
import http.client
import json
import os
import pstats
import time
import urllib.parse
import urllib.request
import uuid

import claims_http  # the server, as it starts it
import procfs
import pymysql

HEADERS = {
    "x-auth-token": "admin",
    "openstack-api-version": "placement latest",
    "content-type": "application/json",
}
ROOT_INVENTORY = {
    "VCPU": {"total": 64},
    "MEMORY_MB": {"total": 262144},
    "DISK_GB": {"total": 4096},
}


def query(groups):
    return (
        "/allocation_candidates?resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10&"
        + "&".join("resources%d=VGPU:1" % g for g in range(1, groups + 1))
        + "&group_policy=isolate"
    )


def call(port, method, path, body=None):
    """(status, seconds) of one request on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    start = time.perf_counter()
    data = None if body is None else json.dumps(body)
    conn.request(method, path, body=data, headers=HEADERS)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status, time.perf_counter() - start


def load(port, hosts, children):
    def host(i):
        root = str(uuid.uuid4())
        ok = [call(port, "POST", "/resource_providers", {"uuid": root, "name": root})]
        ok.append(
            call(
                port,
                "PUT",
                "/resource_providers/%s/inventories" % root,
                {"resource_provider_generation": 0, "inventories": ROOT_INVENTORY},
            )
        )
        for _ in range(children):
            child = str(uuid.uuid4())
            body = {"uuid": child, "name": child, "parent_provider_uuid": root}
            ok.append(call(port, "POST", "/resource_providers", body))
            ok.append(
                call(
                    port,
                    "PUT",
                    "/resource_providers/%s/inventories" % child,
                    {
                        "resource_provider_generation": 0,
                        "inventories": {"VGPU": {"total": 4}},
                    },
                )
            )
        assert all(status == 200 for status, _ in ok), ok

    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        list(pool.map(host, range(hosts)))


def one_pass(tree, server, args):
    name = "wide_first_%s" % uuid.uuid4().hex[:8]
    admin = pymysql.connect(
        host=server.hostname, port=server.port or 3306, user=server.username
    )
    admin.cursor().execute("CREATE DATABASE %s CHARACTER SET utf8" % name)
    url = "%s/%s?charset=utf8" % (args.mysql_url, name)
    try:
        with claims_http.serving(url, tree, 2, 10, None) as (port, pgid):
            load(port, args.hosts, args.children)
            time.sleep(args.idle)
            for groups in args.groups:
                cpu, wall = [], []
                for _ in range(args.requests):
                    pids = [pid for pid, _ in procfs.group(pgid)]
                    before = procfs.threads_cpu(pids)
                    status, seconds = call(port, "GET", query(groups))
                    assert status == 200, status
                    cpu.append((procfs.threads_cpu(pids) - before) * 1000)
                    wall.append(seconds * 1000)
                print(
                    "  g%d server CPU per request (ms): %s"
                    % (groups, " ".join("%.1f" % ms for ms in cpu)),
                    flush=True,
                )
                # The bench's figure: the median of the first 3.
                print(
                    "  g%d wall per request (ms): %s; median of the first 3 %.1f"
                    % (
                        groups,
                        " ".join("%.1f" % ms for ms in wall),
                        sorted(wall[:3])[len(wall[:3]) // 2],
                    ),
                    flush=True,
                )
    finally:
        admin.cursor().execute("DROP DATABASE %s" % name)
        admin.close()


def in_process(args):
    """The wide queries in process (``--in-process``)."""
    import profile_request  # placement's, of PYTHONPATH's tree

    from placement import deploy
    from placement.cmd import api
    from placement.cmd import follower
    from placement.cmd import gate
    from placement.objects.allocation_candidates import catalog_index
    from placement.objects.catalog import refresh

    conf = profile_request.noauth_conf()
    with profile_request.fresh_database(args.db, conf) as (url, db):
        conf.set_override("connection", url, group="placement_database")
        loader = profile_request.Loader(db)
        profile_request.load_wide(loader, args.hosts, args.children)
        loader.flush()
        app = deploy.build_app(conf, db=db, sync_schema=False)
        api.tune_gc()  # as placement-api does in every worker
        refresh.warm(db)  # as a worker does before it takes requests
        if not args.no_idle_warm:
            # The follower of a worker idle after the load: its looks
            # until every tree is summarised, and one more.
            watcher = follower.Follower(db, gate.Gate(app, 2), idle=0)
            for _ in range(args.hosts // catalog_index.WARM_TREES + 2):
                watcher.step()
        for groups in args.groups:
            path = query(groups)
            cpu = []
            profiler = cProfile.Profile(time.thread_time) if args.profile else None
            for number in range(args.in_process):
                profiled = args.profile == ("first" if number == 0 else "warm")
                start = time.thread_time()
                if profiled:
                    profiler.enable()
                status, body = profile_request.call(app, path, "latest")
                if profiled:
                    profiler.disable()
                cpu.append((time.thread_time() - start) * 1000)
                assert status.startswith("200"), (status, body[:500])
            if profiler is not None and profiler.getstats():
                stats = pstats.Stats(profiler).strip_dirs()
                stats.sort_stats("cumulative").print_stats(args.profile_lines)
                stats.sort_stats("tottime").print_stats(args.profile_lines)
            print(
                "  g%d CPU per request in process (ms): %s"
                % (groups, " ".join("%.1f" % ms for ms in cpu)),
                flush=True,
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append")
    parser.add_argument("--mysql-url", default="mysql+pymysql://root@127.0.0.1:3306")
    parser.add_argument("--passes", type=int, default=1, help="trees alternated")
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds")
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--groups", default="1,2")
    parser.add_argument("--in-process", type=int, metavar="N")
    parser.add_argument("--db", choices=("sqlite", "mysql"), default="sqlite")
    parser.add_argument("--no-idle-warm", action="store_true")
    parser.add_argument("--profile", choices=("first", "warm"))
    parser.add_argument("--profile-lines", type=int, default=50)
    args = parser.parse_args()
    args.groups = [int(g) for g in args.groups.split(",")]
    if args.in_process is not None:
        in_process(args)
        return
    if not args.tree:
        parser.error("--tree is needed (or --in-process)")
    server = urllib.parse.urlsplit(args.mysql_url)
    for number in range(1, args.passes + 1):
        for tree in args.tree:
            print("%s, pass %d" % (tree, number), flush=True)
            one_pass(os.path.abspath(tree), server, args)


if __name__ == "__main__":
    main()
