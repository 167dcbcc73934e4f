"""Benchmark GET /allocation_candidates over a loaded deployment.

Loads, through the HTTP API, N flat compute nodes (VCPU, MEMORY_MB,
DISK_GB) and N nested trees of 7 providers (host with DISK_GB; 2 NUMA
children with VCPU/MEMORY_MB; each NUMA with 2 NICs of SRIOV_NET_VF and a
physnet trait), then times a set of candidate queries. Not part of the
test suite.

    .venv/bin/python tools/bench/allocation_candidates.py            # own server
    .venv/bin/python tools/bench/allocation_candidates.py --url http://127.0.0.1:8778

Without --url a server is started on 127.0.0.1 (random port) over a fresh
SQLite database in a temporary directory, and stopped at the end.
"""
import argparse
import statistics
import tempfile
import threading
import socketserver
import time
import uuid
from wsgiref import simple_server

import httpx

HEADERS = {"x-auth-token": "admin", "accept": "application/json",
           "openstack-api-version": "placement latest"}

QUERIES = [
    ("flat+nested, limit 50", "resources=VCPU:1,MEMORY_MB:512,DISK_GB:10"
     "&limit=50"),
    ("flat+nested, no limit", "resources=VCPU:1,MEMORY_MB:512,DISK_GB:10"),
    ("nested granular isolate, limit 50",
     "resources=DISK_GB:10&resources_CPU=VCPU:1,MEMORY_MB:512"
     "&resources_NET=SRIOV_NET_VF:1&required_NET=CUSTOM_PHYSNET_RED"
     "&same_subtree=_CPU,_NET&group_policy=isolate&limit=50"),
    ("4 VF groups, none, limit 10",
     "resources1=SRIOV_NET_VF:1&resources2=SRIOV_NET_VF:1"
     "&resources3=SRIOV_NET_VF:1&resources4=SRIOV_NET_VF:1"
     "&group_policy=none&limit=10"),
    ("nothing fits", "resources=VCPU:1000"),
]


class ThreadedServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


def start_server(state_dir):
    from placement import conf as placement_conf
    from placement import deploy
    from placement.db import schema
    from placement.db import tables
    conf = placement_conf.CONF
    placement_conf.parse_args([], default_config_files=[])
    conf.set_override("auth_strategy", "noauth2", group="api")
    conf.set_override("connection", "sqlite:///%s/bench.sqlite" % state_dir,
                      group="placement_database")
    # Loading speed is not what is measured: skip fsync.
    conf.set_override("sqlite_synchronous", False, group="placement_database")
    db = deploy.make_database(conf)
    tables.metadata.create_all(db.engine)
    schema.sync_standard_names(db)
    app = deploy.build_app(conf, db=db, sync_schema=False)
    server = simple_server.make_server("127.0.0.1", 0, app,
                                       server_class=ThreadedServer,
                                       handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "http://127.0.0.1:%d" % server.server_port


def check(resp):
    if resp.status_code >= 400:
        raise SystemExit("%s %s: %s" % (resp.request.method, resp.request.url,
                                        resp.text))
    return resp


def provider(client, name, inventories, parent=None, traits=()):
    rp = str(uuid.uuid4())
    body = {"name": name, "uuid": rp}
    if parent:
        body["parent_provider_uuid"] = parent
    check(client.post("/resource_providers", json=body))
    check(client.put("/resource_providers/%s/inventories" % rp, json={
        "resource_provider_generation": 0,
        "inventories": {rc: {"total": n} for rc, n in inventories.items()}}))
    if traits:
        check(client.put("/resource_providers/%s/traits" % rp, json={
            "resource_provider_generation": 1, "traits": list(traits)}))
    return rp


def load(client, count):
    check(client.put("/traits/CUSTOM_PHYSNET_RED"))
    for i in range(count):
        provider(client, "flat-%d" % i,
                 {"VCPU": 16, "MEMORY_MB": 32768, "DISK_GB": 1000})
    for i in range(count):
        host = provider(client, "host-%d" % i, {"DISK_GB": 1000})
        for n in range(2):
            numa = provider(client, "host-%d-numa%d" % (i, n),
                            {"VCPU": 8, "MEMORY_MB": 16384}, host,
                            ["HW_NUMA_ROOT"])
            for v in range(2):
                provider(client, "host-%d-numa%d-nic%d" % (i, n, v),
                         {"SRIOV_NET_VF": 8}, numa, ["CUSTOM_PHYSNET_RED"])


def time_queries(client, repeat):
    for label, query in QUERIES:
        times, count = [], None
        for _ in range(repeat):
            start = time.perf_counter()
            resp = check(client.get("/allocation_candidates?" + query))
            times.append(time.perf_counter() - start)
            count = len(resp.json()["allocation_requests"])
        print("%-36s %7d candidates  median %8.1f ms  max %8.1f ms"
              % (label, count, statistics.median(times) * 1000,
                 max(times) * 1000))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an already running server (noauth2)")
    parser.add_argument("--providers", type=int, default=1000,
                        help="flat providers and nested trees (each)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server = None
        url = args.url
        if url is None:
            server, url = start_server(state)
        try:
            with httpx.Client(base_url=url, headers=HEADERS,
                              timeout=600) as client:
                start = time.perf_counter()
                load(client, args.providers)
                print("loaded %d flat + %d nested trees (%d providers) in "
                      "%.0f s" % (args.providers, args.providers,
                                  8 * args.providers,
                                  time.perf_counter() - start))
                time_queries(client, args.repeat)
        finally:
            if server is not None:
                server.shutdown()


if __name__ == "__main__":
    main()
