"""The shared bench's claims scenario, light: server CPU per claim over
HTTP, split by the server's threads, for code trees alternated.

As ``../shared/bench``'s ``claims`` (``tools/bench/compare --scenario
claims``): ``--providers`` (100) providers of 64 VCPU, ``--clients`` (8)
concurrent clients make ``--claims`` (1000) claims of 8 VCPU (demand 125%
of capacity): ``GET /allocation_candidates?resources=VCPU:8&limit=5``,
one candidate at random, ``PUT /allocations/{new uuid}`` at 1.38, a 409
starts over (at most 5 retries); a new TCP connection per request. The
client is asyncio's streams (no aiohttp), in this process.

Each run starts ``placement-api --workers W --threads T`` (compare's
2 x 10 by default) from one code tree (``--tree LABEL=DIR``: placement
imported from DIR, e.g. ``git archive`` of main, empty for this tree;
``--tree 'LABEL=DIR;ARGS'`` adds placement-api arguments) on a fresh
database of the MariaDB ``--mysql-url`` (or a private one,
``--private-mysql DIR``), loads the providers, and reads every server
thread's CPU from /proc just before and after the claims: CPU per claim
(claims started, as the bench counts) of the ``master``, of the workers'
main threads (``worker:main``: granian's event loop, and the requests
run in it) and of their other threads (``worker:other``: the app's
threads, granian's own, the catalog follower), the database's CPU
(private MariaDB only) and its statements (``Questions``) per claim, this
process's CPU (the client), and the context switches per claim of the
server's threads, of the database's (private MariaDB only) and of the
whole machine (``/proc/stat``: other processes' too).
The trees take turns, in reverse order every other round; medians over
rounds.

    .venv/bin/python tools/bench/claims_http.py --private-mysql /dev/shm \\
        --tree base=<git archive of main> --tree ours= --rounds 5
"""

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid

import pymysql
import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import figures_file  # noqa: E402
import procfs  # noqa: E402

from tests import private_mariadb  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
HEADERS = (
    "x-auth-token: admin\r\naccept: application/json\r\n"
    "openstack-api-version: placement 1.38\r\n"
)
QUERY = "/allocation_candidates?resources=VCPU:%d&limit=5"


async def call(port, method, path, body=None):
    """(status, body) of one request on a new connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = b"" if body is None else json.dumps(body).encode()
    head = "%s %s HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n%sconnection: close\r\n" % (
        method,
        path,
        port,
        HEADERS,
    )
    if body is not None:
        head += "content-type: application/json\r\ncontent-length: %d\r\n" % len(data)
    writer.write(head.encode() + b"\r\n" + data)
    answer = await reader.read()
    writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head[9:12]), payload


async def load(port, providers, vcpu):
    for _ in range(providers):
        rp = str(uuid.uuid4())
        status, _ = await call(
            port, "POST", "/resource_providers", {"uuid": rp, "name": "claims-" + rp}
        )
        assert status in (200, 201), status
        status, _ = await call(
            port,
            "PUT",
            "/resource_providers/%s/inventories" % rp,
            {
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": vcpu}},
            },
        )
        assert status == 200, status


async def claims(port, total, clients, size, retries=5):
    """Outcomes of ``total`` claims by ``clients`` concurrent clients."""
    outcome = collections.Counter()
    started = 0

    async def claim():
        consumer, project = str(uuid.uuid4()), str(uuid.uuid4())
        for _ in range(1 + retries):
            status, raw = await call(port, "GET", QUERY % size)
            outcome["get"] += 1
            if status != 200:
                outcome["error_get_%d" % status] += 1
                return
            found = json.loads(raw)["allocation_requests"]
            if not found:
                outcome["no_candidates"] += 1
                return
            body = {
                "allocations": random.choice(found)["allocations"],
                "consumer_generation": None,
                "project_id": project,
                "user_id": project,
                "consumer_type": "BENCH",
            }
            status, raw = await call(port, "PUT", "/allocations/" + consumer, body)
            outcome["put"] += 1
            if status == 204:
                outcome["ok"] += 1
                return
            if status != 409:
                outcome["error_put_%d" % status] += 1
                return
            outcome["conflict"] += 1
        outcome["gave_up"] += 1

    async def client():
        nonlocal started
        while started < total:
            started += 1
            await claim()

    await asyncio.gather(*(client() for _ in range(clients)))
    return outcome


def threads(pgid):
    """{(pid, tid): (role, CPU seconds)} of the process group's threads:
    ``master``, ``worker:main`` or ``worker:other``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            process = "master" if int(entry) == pgid else "worker"
            for tid in os.listdir("/proc/%s/task" % entry):
                with open("/proc/%s/task/%s/stat" % (entry, tid)) as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                kind = "main" if tid == entry else "other"
                found[(entry, tid)] = (
                    process if process == "master" else "worker:" + kind,
                    (int(rest[11]) + int(rest[12])) / TICK,
                )
        except OSError:
            continue
    return found


def process_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@contextlib.contextmanager
def serving(url, tree, workers, threads_, active, extra=()):
    """placement-api from ``tree`` (this one when empty) on ``url``, with
    ``extra`` arguments: its port and process group."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(
        os.environ,
        PYTHONPATH=tree or here,
        OS_PLACEMENT_DATABASE__CONNECTION=url,
        OS_API__AUTH_STRATEGY="noauth2",
    )
    argv = [
        os.path.join(os.path.dirname(sys.executable), "placement-api"),
        "--db-sync",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--threads",
        str(threads_),
    ]
    if active is not None:
        argv += ["--active", str(active)]
    argv += extra
    proc = subprocess.Popen(
        argv,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None:
                    sys.exit("placement-api from %r exited" % tree)
                time.sleep(0.1)
        yield port, proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def machine_switches():
    """Context switches so far on the whole machine (/proc/stat)."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("ctxt "):
                return int(line.split()[1])
    return 0


def questions(admin):
    with admin.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])


def one_run(args, base_url, tree, admin, db_pid):
    tree, _, extra = tree.partition(";")
    name = "claims_http_%s" % uuid.uuid4().hex[:12]
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE " + name)
    url = base_url.set(database=name, query={"charset": "utf8"})
    url = url.render_as_string(hide_password=False)
    try:
        with serving(
            url, tree, args.workers, args.threads, args.active, extra.split()
        ) as (
            port,
            pgid,
        ):
            asyncio.run(load(port, args.providers, args.vcpu))
            time.sleep(0.5)
            before, asked = threads(pgid), questions(admin)
            db_cpu = process_cpu(db_pid) if db_pid else 0
            pids = sorted({int(pid) for pid, _ in before})
            watched = {"server": pids, "database": [db_pid] if db_pid else []}
            switched = {k: procfs.switches(v) for k, v in watched.items()}
            client, machine = os.times(), machine_switches()
            start = time.perf_counter()
            outcome = asyncio.run(claims(port, args.claims, args.clients, args.size))
            wall = time.perf_counter() - start
            client = [b - a for a, b in zip(client, os.times())]
            machine = machine_switches() - machine
            switched = {
                k: [b - a for a, b in zip(switched[k], procfs.switches(v))]
                for k, v in watched.items()
            }
            after, asked = threads(pgid), questions(admin) - asked
            db_cpu = process_cpu(db_pid) - db_cpu if db_pid else None
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE " + name)
    by_role = collections.Counter()
    for key, (role, cpu) in after.items():
        by_role[role] += cpu - before.get(key, (role, 0))[1]
    per_claim = {role: cpu * 1000 / args.claims for role, cpu in by_role.items()}
    found = {
        "server_cpu_ms": sum(per_claim.values()),
        "claims_per_s": outcome["ok"] / wall,
        "questions": asked / args.claims,
        "client_cpu_ms": (client[0] + client[1]) * 1000 / args.claims,
        "switches machine": machine / args.claims,
        "switches server vol.": switched["server"][0] / args.claims,
        "switches server invol.": switched["server"][1] / args.claims,
        **{"cpu_ms " + role: v for role, v in sorted(per_claim.items())},
        **{k: outcome[k] for k in ("ok", "get", "put", "conflict", "no_candidates")},
    }
    if db_cpu is not None:
        found["database_cpu_ms"] = db_cpu * 1000 / args.claims
        found["switches database vol."] = switched["database"][0] / args.claims
        found["switches database invol."] = switched["database"][1] / args.claims
    errors = {k: v for k, v in outcome.items() if k.startswith("error")}
    if errors:
        sys.exit("errors: %s" % errors)
    return found


def database(stack, args, options):
    """(base URL, mariadbd's pid or None, admin connection) of the MariaDB
    the runs use: a private one (``args.private_mysql``, started with
    ``options``, stopped and removed by ``stack``) or ``args.mysql_url``."""
    db_pid = None
    if args.private_mysql:
        mysql = private_mariadb.PrivateMariaDB(base=args.private_mysql, options=options)
        mysql.start()
        stack.callback(mysql.close)
        base_url, db_pid = sa.engine.make_url(mysql.url()), mysql.proc.pid
    else:
        base_url = sa.engine.make_url(args.mysql_url)
    base_url = base_url.set(drivername="mysql+pymysql")
    admin = pymysql.connect(
        host=base_url.host,
        port=base_url.port,
        user=base_url.username,
        password=base_url.password or "",
        autocommit=True,
    )
    return base_url, db_pid, admin


def alternated(trees, count, run):
    """The rounds of ``run(tree)`` for every (label, tree) of ``trees``, in
    reverse order every other round (each printed), and the medians of
    their figures per label."""
    rounds = []
    for number in range(count):
        found = {}
        for label, tree in trees[:: -1 if number % 2 else 1]:
            found[label] = run(tree)
            shown = {k: round(v, 3) for k, v in found[label].items()}
            print(
                "round %d %s: %s" % (number + 1, label, json.dumps(shown)), flush=True
            )
        rounds.append(found)
    medians = {
        label: {
            key: statistics.median(r[label].get(key, 0) for r in rounds)
            for key in sorted(set().union(*(r[label] for r in rounds)))
        }
        for label, _ in trees
    }
    return rounds, medians


def report(args, trees, rounds, medians, unit, paths=("private_mysql", "out")):
    """The medians printed, and every round written to ``args.out``
    (JSON; the arguments ``paths`` only as whether they were given: no
    machine paths)."""
    print("medians over %d rounds (%s):" % (args.rounds, unit))
    print("  %-32s %s" % ("", "  ".join("%10s" % label for label, _ in trees)))
    for key in medians[trees[0][0]]:
        print(
            "  %-32s %s"
            % (key, "  ".join("%10.3f" % medians[label][key] for label, _ in trees))
        )
    figures_file.write(
        args.out,
        {
            "args": {
                k: (bool(v) if k in paths else v)
                for k, v in vars(args).items()
                if k != "tree"
            },
            "trees": [label for label, _ in trees],
            "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
            "rounds": rounds,
            "medians": medians,
        },
    )


def common_arguments(parser):
    """The code trees' and the database's arguments (``--tree``,
    ``--mysql-url``, ``--private-mysql``)."""
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        help="LABEL=DIR[;ARGS]: placement from DIR (empty: this tree), with "
        "placement-api's ARGS (e.g. 'w1=;--workers 1')",
    )
    parser.add_argument("--mysql-url", help="a MariaDB's URL (root)")
    parser.add_argument("--private-mysql", metavar="DIR", help="start a MariaDB here")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--providers", type=int, default=100)
    parser.add_argument("--vcpu", type=int, default=64)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--active", type=int, help="placement-api --active")
    parser.add_argument("--out", help="write the raw results here (JSON)")
    args = parser.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("ours", "")]
    with contextlib.ExitStack() as stack:
        base_url, db_pid, admin = database(
            stack, args, private_mariadb.DEBIAN + private_mariadb.SMALL
        )
        rounds, medians = alternated(
            trees,
            args.rounds,
            lambda tree: one_run(args, base_url, tree, admin, db_pid),
        )
    report(args, trees, rounds, medians, "per claim started")


if __name__ == "__main__":
    main()
