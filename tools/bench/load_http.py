"""The shared bench's registration loads over HTTP: where the machine's
CPU goes per request, for code trees alternated.

As ``../shared/bench``'s ``load_flat_providers`` (``--shape flat``: per
provider a POST of it, the PUT of its inventories, aggregates and
traits, the first three providers one at a time) and
``scenario_nested``'s load (``--shape nested``: trees of 7 providers,
each a POST with its parent, the PUT of its inventories and, for 3 of
them, of its traits), ``--clients`` (10, the bench's
``--load-concurrency``) units at a time, a new TCP connection per
request. The client is asyncio's streams (lighter than the bench's
aiohttp), in this process.

Each run starts ``placement-api --workers W --threads T`` (compare's
2 x 10) from one code tree (``--tree LABEL=DIR``: placement imported
from DIR, e.g. ``git archive`` of another commit, empty for this tree;
``--tree 'LABEL=DIR;ARGS'`` adds placement-api arguments) on a fresh
database of a MariaDB of its own (``--private-mysql DIR``) or
``--mysql-url``, and reads from /proc, just before and after the load,
per request: the CPU of every server thread (by role: ``master``, the
workers' event loops ``loop``, placement's request threads ``app``, the
catalog followers ``follower``, granian's and the rest ``other``; with
``--py-spy PATH`` the threads are named by a ``py-spy dump`` at the end,
else the loop is the main thread and the rest is ``other``), the
server's voluntary and involuntary context switches, the database's CPU
and switches (private MariaDB only), its statements (``Questions``),
this client's CPU and the whole machine's busy CPU (other sessions'
work included); and the load's wall time. The trees take turns, in
reverse order every other round; medians over rounds.

    .venv/bin/python tools/bench/load_http.py --private-mysql /dev/shm \\
        --shape flat --tree base=<git archive of main> --tree ours= --rounds 4
"""

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import claims_http  # noqa: E402
import procfs  # noqa: E402
from profile_request import FLAT_AGGREGATES  # noqa: E402
from profile_request import FLAT_TRAITS  # noqa: E402
from write_load import FLAT_INVENTORY  # noqa: E402

from tests import private_mariadb  # noqa: E402

HEADERS = (
    "x-auth-token: admin\r\naccept: application/json\r\n"
    "openstack-api-version: placement latest\r\n"
)


class Client:
    """Requests on a new connection each; counts them."""

    def __init__(self, port):
        self.port = port
        self.requests = 0

    async def req(self, method, path, body=None):
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        data = b"" if body is None else json.dumps(body).encode()
        head = "%s %s HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n%sconnection: close\r\n" % (
            method,
            path,
            self.port,
            HEADERS,
        )
        if body is not None:
            head += "content-type: application/json\r\ncontent-length: %d\r\n" % len(
                data
            )
        writer.write(head.encode() + b"\r\n" + data)
        answer = await reader.read()
        writer.close()
        self.requests += 1
        status = int(answer[9:12])
        if status not in (200, 201, 204):
            raise SystemExit("%s %s -> %s %s" % (method, path, status, answer[-300:]))
        payload = answer.partition(b"\r\n\r\n")[2]
        return json.loads(payload) if payload else None


def flat_unit(client, i):
    async def unit():
        rp = str(uuid.uuid4())
        base = "/resource_providers/%s" % rp
        await client.req("POST", "/resource_providers", {"uuid": rp, "name": rp})
        await client.req(
            "PUT",
            base + "/inventories",
            {"resource_provider_generation": 0, "inventories": FLAT_INVENTORY},
        )
        await client.req(
            "PUT",
            base + "/aggregates",
            {
                "resource_provider_generation": 1,
                "aggregates": FLAT_AGGREGATES[: i % 3 + 1],
            },
        )
        await client.req(
            "PUT",
            base + "/traits",
            {"resource_provider_generation": 2, "traits": FLAT_TRAITS[: i % 3 + 1]},
        )

    return unit


def nested_unit(client, i):
    async def provider(name, parent, inventories, traits=()):
        rp = str(uuid.uuid4())
        body = {"uuid": rp, "name": "%s-%s" % (name, rp)}
        if parent:
            body["parent_provider_uuid"] = parent
        await client.req("POST", "/resource_providers", body)
        base = "/resource_providers/%s" % rp
        await client.req(
            "PUT",
            base + "/inventories",
            {"resource_provider_generation": 0, "inventories": inventories},
        )
        if traits:
            await client.req(
                "PUT",
                base + "/traits",
                {"resource_provider_generation": 1, "traits": list(traits)},
            )
        return rp

    async def unit():
        cn = await provider(
            "cn1", None, {"DISK_GB": {"total": 20480}}, ["COMPUTE_VOLUME_MULTI_ATTACH"]
        )
        numa0 = await provider(
            "numa 0",
            cn,
            {
                "VCPU": {"total": 4, "reserved": 2},
                "MEMORY_MB": {"total": 2048, "min_unit": 512, "step_size": 256},
            },
            ["HW_NUMA_ROOT"],
        )
        await provider("fpga0-0", numa0, {"FPGA": {"total": 1}})
        await provider("pgpu0-0", numa0, {"VGPU": {"total": 8}})
        numa1 = await provider(
            "numa 1",
            cn,
            {
                "VCPU": {"total": 4},
                "MEMORY_MB": {"total": 2048, "min_unit": 256, "max_unit": 1024},
            },
            ["HW_NUMA_ROOT", "CUSTOM_FOO"],
        )
        await provider("fpga1-0", numa1, {"FPGA": {"total": 1}})
        await provider("fpga1-1", numa1, {"FPGA": {"total": 1}})

    return unit


async def run_units(units, clients):
    queue = collections.deque(units)

    async def worker():
        while queue:
            await queue.popleft()()

    await asyncio.gather(*(worker() for _ in range(clients)))


async def load(port, shape, scale, clients):
    """The load's requests and wall seconds (the bench's ``load_s``)."""
    client = Client(port)
    make = flat_unit if shape == "flat" else nested_unit
    start = time.perf_counter()
    if shape == "nested":
        await client.req("PUT", "/traits/CUSTOM_FOO")
        await run_units([make(client, i) for i in range(scale)], clients)
    else:
        # As the bench: the aggregates made once, before going concurrent.
        head = min(3, scale)
        await run_units([make(client, i) for i in range(head)], 1)
        await run_units([make(client, i) for i in range(head, scale)], clients)
    return client.requests, time.perf_counter() - start


def server_threads(pgid):
    """{(pid, tid): (CPU seconds, voluntary, involuntary switches)} of the
    process group's threads."""
    return procfs.threads(pid for pid, _ in procfs.group(pgid))


def thread_names(py_spy, pids):
    """{tid: Python thread name} of the processes ``pids``, by ``py-spy
    dump`` (its lines 'Thread TID (state): "NAME"')."""
    names = {}
    for pid in pids:
        done = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True
        )
        for match in re.finditer(
            r'^Thread (\d+) \([^)]*\): "([^"]*)"', done.stdout, re.M
        ):
            names[int(match[1])] = match[2]
    return names


def role(pgid, pid, tid, names):
    if pid == pgid:
        return "master"
    name = names.get(tid)
    if name is None:
        return "loop" if tid == pid else "other"
    if name == "catalog-follower":
        return "follower"
    if name.startswith("placement-"):
        return "app"
    if tid == pid:
        return "loop"
    return "other"


def process_cpu_switches(pid):
    """(CPU seconds, voluntary, involuntary switches) of every thread of
    ``pid`` so far."""
    cpu = procfs.threads_cpu([pid])
    vol, inv = procfs.switches([pid])
    return cpu, vol, inv


def one_run(args, base_url, tree, admin, db_pid):
    tree, _, extra = tree.partition(";")
    name = "load_http_%s" % uuid.uuid4().hex[:12]
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s CHARACTER SET utf8" % name)
    url = base_url.set(database=name, query={"charset": "utf8"})
    url = url.render_as_string(hide_password=False)
    try:
        with claims_http.serving(
            url, tree, args.workers, args.threads, None, extra.split()
        ) as (port, pgid):
            time.sleep(0.5)
            before, asked = server_threads(pgid), claims_http.questions(admin)
            db_before = process_cpu_switches(db_pid) if db_pid else None
            own_before = resource.getrusage(resource.RUSAGE_SELF)
            busy_before = procfs.machine_busy()
            requests, wall = asyncio.run(
                load(port, args.shape, args.scale, args.clients)
            )
            busy = procfs.machine_busy() - busy_before
            own = resource.getrusage(resource.RUSAGE_SELF)
            after, asked = server_threads(pgid), claims_http.questions(admin) - asked
            db_after = process_cpu_switches(db_pid) if db_pid else None
            names = {}
            if args.py_spy:
                names = thread_names(args.py_spy, {pid for pid, _ in after})
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE " + name)
    ms = 1000.0 / requests
    by_role = collections.Counter()
    vol = inv = 0
    for key, (cpu, v, i) in after.items():
        was = before.get(key, (0, 0, 0))
        by_role[role(pgid, key[0], key[1], names)] += cpu - was[0]
        vol += v - was[1]
        inv += i - was[2]
    found = {
        "requests": requests,
        "wall_s": wall,
        "server_cpu_ms": sum(by_role.values()) * ms,
        **{"cpu_ms " + r: v * ms for r, v in sorted(by_role.items())},
        "server_switches_vol": vol / requests,
        "server_switches_inv": inv / requests,
        "questions": asked / requests,
        "client_cpu_ms": (
            own.ru_utime + own.ru_stime - own_before.ru_utime - own_before.ru_stime
        )
        * ms,
        "machine_busy_ms": busy * ms,
    }
    if db_pid:
        found["database_cpu_ms"] = (db_after[0] - db_before[0]) * ms
        found["database_switches_vol"] = (db_after[1] - db_before[1]) / requests
        found["database_switches_inv"] = (db_after[2] - db_before[2]) / requests
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    claims_http.common_arguments(parser)
    parser.add_argument("--shape", choices=("flat", "nested"), default="flat")
    parser.add_argument("--scale", type=int, default=1000, help="providers or trees")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--py-spy", metavar="PATH", help="name threads by py-spy")
    parser.add_argument("--out", help="write the raw results here (JSON)")
    args = parser.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("ours", "")]
    with contextlib.ExitStack() as stack:
        base_url, db_pid, admin = claims_http.database(
            stack, args, private_mariadb.DEBIAN
        )
        rounds, medians = claims_http.alternated(
            trees,
            args.rounds,
            lambda tree: one_run(args, base_url, tree, admin, db_pid),
        )
    claims_http.report(
        args, trees, rounds, medians, "per request", ("private_mysql", "py_spy", "out")
    )


if __name__ == "__main__":
    main()
