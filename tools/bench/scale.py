"""A 100,000-host cloud on one machine: load it in bulk, serve it, measure.

1. Loads a fresh MariaDB database with bulk INSERTs (profile_request.py's
   Loader; not through the API): ``--hosts`` compute hosts with VCPU,
   MEMORY_MB and DISK_GB, one in three with the trait ``CUSTOM_SCALE_GOLD``,
   every host in one of ``--aggregates`` aggregates (host i in aggregate
   i mod 200: 500 hosts each at 100,000, spread over the whole cloud), and
   half the hosts carrying 1-8 instances of three flavors (their
   consumers, projects, users and allocations). With ``--children`` each
   host is a tree of four (the 1,000,000-provider layout at ``--hosts
   250000``): a root holding DISK_GB (the trait, the aggregate), two NUMA
   children holding VCPU and MEMORY_MB (HW_NUMA_ROOT) and a network device
   child holding SRIOV_NET_VF (CUSTOM_PHYSNET_A or _B); an instance takes
   its VCPU and MEMORY_MB from one NUMA node. A fifth shape then joins the
   four: two groups with ``same_subtree`` (TWO_GROUPS).
2. Starts ``placement-api`` (``--workers`` x ``--threads``) on it and
   measures over HTTP, from this process:
   - **ready**: seconds from starting the server to the first answered
     ``GET /allocation_candidates``;
   - **latency** of nova's ``limit=1000`` request on four shapes (flat, a
     required trait, a forbidden trait, member_of one aggregate): p50/p99
     from one client, then from ``--clients`` clients at once, each
     sending every shape in turn (each client a process of its own, its
     time to the answer's last byte);
   - **ready** also as the CPU the server's processes used until then;
   - **memory**: every server process's RSS, peak RSS and PSS (/proc) at
     the end, and the PSS of the whole process group;
   - **capacity** of one flavor (``GET /allocation_candidates/capacity``);
   - **console**: the operator console's cloud view, first page, as the
     console makes its API calls: one ``GET /roots`` where the server has
     it, else the calls it made before (the whole provider list, then per
     root of the first 50 by name its inventories and usages, traits and
     aggregates, 8 calls at a time); the browser's own drawing is not in
     the figure (tools/bench/console_load.py times that in Chromium);
     capacity and console also as the server's CPU per request;
   - **answers**: every candidate of the last answer of each shape is
     checked against the database: each provider has the class, its free
     capacity (``(total - reserved) * allocation_ratio - used``) holds the
     amount, the summary's capacity and usage are the database's, and the
     trait or aggregate filter holds.
3. Prints the figures against the issue's targets and writes them as JSON
   (``--out``); the database is dropped at the end unless ``--keep``.

    .venv/bin/python tools/bench/scale.py --hosts 10000
    .venv/bin/python tools/bench/scale.py --hosts 100000 \\
        --out tools/bench/results/scale-100000-<commit>.json

``--url`` skips the load and serves an existing database (one a run with
``--keep`` left; its URL is printed).
"""

import argparse
import collections
import concurrent.futures
import contextlib
import gc
import json
import multiprocessing
import os
import random
import sys
import time
import urllib.parse
import uuid

import pymysql
import requests
import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

import cloud_day  # noqa: E402  (percentile)
import day_slice  # noqa: E402
import procfs  # noqa: E402
import profile_request  # noqa: E402  (Loader, fresh databases)

from placement import conf as placement_conf  # noqa: E402
from placement.db import tables  # noqa: E402

TRAIT = "CUSTOM_SCALE_GOLD"
HOST = {
    "VCPU": {"total": 64, "allocation_ratio": 4.0, "max_unit": 64},
    "MEMORY_MB": {"total": 262144, "reserved": 4096},
    "DISK_GB": {"total": 2000, "reserved": 10},
}
FLAVORS = (
    {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40},
    {"VCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 80},
    {"VCPU": 16, "MEMORY_MB": 65536, "DISK_GB": 200},
)
FLAVOR = "resources=VCPU:4,MEMORY_MB:8192,DISK_GB:80"
LIMIT = 1000
# What a cloud should get with 8 workers, by layout: hosts (100,000;
# issue 37) or trees of four (--children, 1,000,000 providers at 250,000
# hosts; issue 44), as (verdict's name, the figure's path in
# ``figures``, bound).
TARGETS = {
    False: (
        ("ready", ("ready_s",), 10),
        ("p99 one client", ("one_client", "all", "p99_ms"), 100),
        ("p99 many clients", ("many_clients", "all", "p99_ms"), 100),
        ("group PSS", ("group_pss_mb",), 1024),
        ("capacity", ("capacity_s",), 0.1),
        ("console", ("console_s",), 0.3),
    ),
    # Issue 44's: every shape's p99, not all shapes' together.
    True: (
        ("ready", ("ready_s",), 30),
        *(
            ("p99 one client %s" % shape, ("one_client", shape, "p99_ms"), 150)
            for shape in ("flat", "trait", "forbidden", "member_of", "two_groups")
        ),
        ("group PSS", ("group_pss_mb",), 3072),
        ("capacity", ("capacity_s",), 0.3),
    ),
}
HEADERS = {
    "x-auth-token": "admin",
    "accept": "application/json",
    "openstack-api-version": "placement 1.39",
}
# --children: each host a root holding DISK_GB, two NUMA children holding
# VCPU and MEMORY_MB and a network device child holding SRIOV_NET_VF (4
# providers per host: 250,000 hosts are 1,000,000 providers).
NIC_TRAITS = ("CUSTOM_PHYSNET_A", "CUSTOM_PHYSNET_B")
TWO_GROUPS = (
    "/allocation_candidates?resources1=VCPU:2,MEMORY_MB:4096"
    "&resources2=DISK_GB:40&same_subtree=1,2&group_policy=none&limit=%d" % 1000
)
CONSOLE_PAGE = 50  # roots per page of the console's cloud view
CONSOLE_AT_ONCE = 8  # API calls the console makes at a time


def shapes(aggregate_uuid):
    """The four shapes of nova's limited request, by name."""
    base = "/allocation_candidates?%s&limit=%d" % (FLAVOR, LIMIT)
    return {
        "flat": base,
        "trait": base + "&required=" + TRAIT,
        "forbidden": base + "&required=!" + TRAIT,
        "member_of": base + "&member_of=" + aggregate_uuid,
    }


def aggregate_uuid(i):
    return str(uuid.UUID(int=0xA66 << 64 | i))


def load(db, hosts, aggregates, seed=1, children=False):
    """Bulk INSERTs of the cloud (see the module's docstring)."""
    loader = profile_request.Loader(db)
    rnd = random.Random(seed)
    instances = []  # ({class: host id}, flavor)
    for i in range(hosts):
        if children:
            placed = _tree(loader, i, aggregates)
        else:
            rp_id, _ = loader.provider(
                "compute-%06d" % i,
                HOST,
                traits=[TRAIT] if i % 3 == 0 else [],
                aggregates=[aggregate_uuid(i % aggregates)],
            )
            placed = dict.fromkeys(HOST, rp_id)
        if rnd.random() < 0.5:
            instances.extend(
                (placed, rnd.choice(FLAVORS)) for _ in range(rnd.randint(1, 8))
            )
        if i % 10000 == 9999:
            loader.flush()  # bounded memory at 1,000,000 providers
    loader.flush()
    class_ids = loader.class_ids
    with db.writer() as conn:
        conn.execute(tables.projects.insert(), [{"external_id": "scale-project"}])
        conn.execute(tables.users.insert(), [{"external_id": "scale-user"}])
        project = conn.scalar(sa.select(tables.projects.c.id))
        user = conn.scalar(sa.select(tables.users.c.id))
    for start in range(0, len(instances), 20000):
        consumers, allocations = [], []
        for placed, flavor in instances[start : start + 20000]:
            consumer = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
            consumers.append({"uuid": consumer, "project_id": project, "user_id": user})
            allocations.extend(
                {
                    "resource_provider_id": placed[rc],
                    "consumer_id": consumer,
                    "resource_class_id": class_ids[rc],
                    "used": amount,
                }
                for rc, amount in flavor.items()
            )
        # Before any server reads the database: read whole at its start.
        with profile_request.untriggered(db), db.writer() as conn:
            conn.execute(tables.consumers.insert(), consumers)
            for part in range(0, len(allocations), 5000):
                conn.execute(
                    tables.allocations.insert(), allocations[part : part + 5000]
                )
    return len(instances)


def _tree(loader, i, aggregates):
    """One host of the ``--children`` layout; {class: the
    provider an instance's class goes to} (one NUMA node per host)."""
    root = loader.provider(
        "compute-%06d" % i,
        {"DISK_GB": HOST["DISK_GB"]},
        traits=[TRAIT] if i % 3 == 0 else [],
        aggregates=[aggregate_uuid(i % aggregates)],
    )
    numa = [
        loader.provider(
            "compute-%06d-numa%d" % (i, n),
            {
                "VCPU": dict(HOST["VCPU"], total=32, max_unit=32),
                "MEMORY_MB": dict(HOST["MEMORY_MB"], total=131072, reserved=2048),
            },
            root,
            ["HW_NUMA_ROOT"],
        )
        for n in range(2)
    ]
    loader.provider(
        "compute-%06d-nic" % i,
        {"SRIOV_NET_VF": {"total": 16}},
        root,
        [NIC_TRAITS[i % len(NIC_TRAITS)]],
    )
    node = numa[i % 2][0]
    return {"DISK_GB": root[0], "VCPU": node, "MEMORY_MB": node}


def memory(pgid):
    """{pid: (RSS MB, peak RSS MB, 'master' or 'worker', PSS MB)} of the
    server: PSS from /proc/PID/smaps_rollup (pages shared by n processes
    count 1/n in each: their sum is the group's real footprint)."""
    out = {}
    for pid, _ in procfs.group(pgid):
        status = {}
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                key, _, value = line.partition(":")
                status[key] = value.split()
        with open("/proc/%d/smaps_rollup" % pid) as f:
            pss = next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        role = "master" if pid == pgid else "worker"
        out[pid] = (
            int(status["VmRSS"][0]) / 1024,
            int(status["VmHWM"][0]) / 1024,
            role,
            pss / 1024,
        )
    return out


def session():
    s = requests.Session()
    s.headers.update(HEADERS)
    return s


def ready(base, started, path):
    """Seconds from ``started`` to the first 200 answer of ``path``."""
    s = session()
    deadline = started + 600
    while time.perf_counter() < deadline:
        try:
            response = s.get(base + path, timeout=120)
            if response.status_code == 200:
                return time.perf_counter() - started, response.json()
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    raise SystemExit("placement-api did not answer within 600 s")


def timed(s, url):
    start = time.perf_counter()
    response = s.get(url, timeout=120)
    elapsed = time.perf_counter() - start
    if response.status_code != 200:
        raise SystemExit("%s: %s %s" % (url, response.status_code, response.text[:300]))
    return elapsed, response


def summary_ms(values):
    return {
        "n": len(values),
        "p50_ms": round(cloud_day.percentile(values, 50) * 1000, 1),
        "p99_ms": round(cloud_day.percentile(values, 99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


def group_cpu(pids):
    """CPU seconds the processes ``pids`` used so far."""
    ticks = 0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def latency(base, pgid, paths, samples, clients):
    """{shape: summary} of ``samples`` requests per shape from each of
    ``clients`` clients at once (and "all", with the server's CPU per
    request: steadier than latency on a busy machine), and the last
    answer of each shape.

    Each client is a process of its own, as nova's schedulers are: the
    threads of one process took turns on its GIL, and its full
    collections (75-105 ms of CPU each over this script's imports and the
    decoded answers, about one every ten answers) stopped every client at
    once; at 100,000 hosts, 4 clients' p99 was 195-214 ms from threads
    against 49-57 ms from processes, the server the same
    (tools/bench/README, issue 44, "The 4-client tail"). A client keeps
    its answers' bodies; they are decoded here, after the clock."""
    pids = [pid for pid, _ in procfs.group(pgid)]
    jobs = [(base, pids, paths, samples, n, clients == 1) for n in range(clients)]
    cpu = group_cpu(pids)
    with multiprocessing.get_context("fork").Pool(clients) as pool:
        results = pool.map(_client, jobs)
    times = collections.defaultdict(list)
    cpu_by_shape = collections.Counter()  # one client: server CPU per shape
    last = {}
    for client_times, client_cpu, client_last in results:
        for name, values in client_times.items():
            times[name].extend(values)
        cpu_by_shape.update(client_cpu)
        last.update(client_last)
    out = {name: summary_ms(values) for name, values in times.items()}
    for name, seconds in cpu_by_shape.items():
        out[name]["server_cpu_ms"] = round(seconds * 1000 / len(times[name]), 1)
    out["all"] = summary_ms([v for values in times.values() for v in values])
    out["all"]["server_cpu_ms"] = round(
        (group_cpu(pids) - cpu) * 1000 / out["all"]["n"], 1
    )
    return out, {name: json.loads(body) for name, body in last.items()}


def _client(job):
    """One client's ``samples`` rounds of every shape, in a shuffled
    order: ({shape: [seconds]}, {shape: server CPU seconds} (measured
    only when it is the one client), {shape: its last answer's body})."""
    base, pids, paths, samples, n, measure_cpu = job
    # What this process inherited stays out of its collections.
    gc.freeze()
    s = session()
    order = list(paths.items())
    random.Random(n).shuffle(order)
    times = collections.defaultdict(list)
    cpu_by_shape = collections.Counter()
    last = {}
    for _ in range(samples):
        for name, path in order:
            before = group_cpu(pids) if measure_cpu else 0
            elapsed, response = timed(s, base + path)
            if measure_cpu:
                cpu_by_shape[name] += group_cpu(pids) - before
            times[name].append(elapsed)
            last[name] = response.content
    return dict(times), dict(cpu_by_shape), last


def console_first_page(base):
    """Seconds for the console's cloud view's API calls, first page: one
    GET /roots where the server has it, else the calls the console made
    before it (below)."""
    s = session()
    start = time.perf_counter()
    response = s.get(base + "/roots?limit=%d" % CONSOLE_PAGE, timeout=120)
    if response.status_code == 200:
        return time.perf_counter() - start, response.json()["total"], 1
    return _console_per_provider(base)


def _console_per_provider(base):
    s = session()
    adapter = requests.adapters.HTTPAdapter(pool_maxsize=CONSOLE_AT_ONCE)
    s.mount("http://", adapter)
    start = time.perf_counter()
    _, response = timed(s, base + "/resource_providers")
    providers = response.json()["resource_providers"]
    roots = sorted(
        (p for p in providers if p["uuid"] == p["root_provider_uuid"]),
        key=lambda p: p["name"],
    )[:CONSOLE_PAGE]
    trees = collections.defaultdict(list)
    shown = {r["uuid"] for r in roots}
    for p in providers:
        if p["root_provider_uuid"] in shown:
            trees[p["root_provider_uuid"]].append(p["uuid"])
    calls = []
    for root in roots:
        for member in trees[root["uuid"]]:
            calls.append("/resource_providers/%s/inventories" % member)
            calls.append("/resource_providers/%s/usages" % member)
        calls.append("/resource_providers/%s/traits" % root["uuid"])
        calls.append("/resource_providers/%s/aggregates" % root["uuid"])
    with concurrent.futures.ThreadPoolExecutor(CONSOLE_AT_ONCE) as pool:
        list(pool.map(lambda path: timed(s, base + path), calls))
    return time.perf_counter() - start, len(providers), len(calls) + 1


def check_answers(mysql_url, answers, aggregate, filters=True):
    """Problems found checking every candidate of ``answers`` ({shape:
    candidates document}) against the database; [] when none. Without
    ``filters`` (the --children layout: traits and aggregates are on the
    roots, not on every provider of a candidate) only amounts are."""
    parsed = urllib.parse.urlparse(mysql_url)
    conn = pymysql.connect(
        host=parsed.hostname,
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        database=parsed.path.lstrip("/"),
    )
    wanted = dict(pair.split(":") for pair in FLAVOR.split("=", 1)[1].split(","))
    uuids = {
        rp
        for document in answers.values()
        for request in document["allocation_requests"]
        for rp in request["allocations"]
    }
    # Summaries name every provider of a candidate's trees (nested: the
    # siblings too).
    uuids.update(rp for d in answers.values() for rp in d["provider_summaries"])
    problems, checked = [], 0
    with conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE sampled (uuid VARCHAR(36) PRIMARY KEY)")
        cur.executemany("INSERT INTO sampled VALUES (%s)", [(u,) for u in uuids])
        cur.execute(
            "SELECT rp.uuid, rc.name, i.total, i.reserved, i.allocation_ratio,"
            " COALESCE((SELECT SUM(a.used) FROM allocations a"
            "  WHERE a.resource_provider_id = rp.id"
            "  AND a.resource_class_id = i.resource_class_id), 0)"
            " FROM sampled s JOIN resource_providers rp ON rp.uuid = s.uuid"
            " JOIN inventories i ON i.resource_provider_id = rp.id"
            " JOIN resource_classes rc ON rc.id = i.resource_class_id"
        )
        stock = {(u, rc): (t, r, ratio, int(used)) for u, rc, t, r, ratio, used in cur}
        cur.execute(
            "SELECT rp.uuid FROM sampled s JOIN resource_providers rp"
            " ON rp.uuid = s.uuid JOIN resource_provider_traits t"
            " ON t.resource_provider_id = rp.id JOIN traits tr ON tr.id = t.trait_id"
            " WHERE tr.name = %s",
            (TRAIT,),
        )
        gold = {u for (u,) in cur}
        cur.execute(
            "SELECT rp.uuid FROM sampled s JOIN resource_providers rp"
            " ON rp.uuid = s.uuid JOIN resource_provider_aggregates m"
            " ON m.resource_provider_id = rp.id JOIN placement_aggregates pa"
            " ON pa.id = m.aggregate_id WHERE pa.uuid = %s",
            (aggregate,),
        )
        members = {u for (u,) in cur}
    conn.close()
    rules = {
        "trait": lambda u: u in gold,
        "forbidden": lambda u: u not in gold,
        "member_of": lambda u: u in members,
    }
    for shape, document in answers.items():
        for request in document["allocation_requests"]:
            for rp, held in request["allocations"].items():
                checked += 1
                if filters and shape in rules and not rules[shape](rp):
                    problems.append("%s: %s fails the filter" % (shape, rp))
                for rc, amount in held["resources"].items():
                    total, reserved, ratio, used = stock.get((rp, rc), (0, 0, 0, 0))
                    free = int((total - reserved) * ratio) - used
                    if amount != int(wanted[rc]) or free < amount:
                        problems.append(
                            "%s: %s %s wants %d, free %d"
                            % (shape, rp, rc, amount, free)
                        )
        for rp, summary in document["provider_summaries"].items():
            for rc, claimed in summary["resources"].items():
                total, reserved, ratio, used = stock.get((rp, rc), (0, 0, 0, 0))
                if claimed != {
                    "capacity": int((total - reserved) * ratio),
                    "used": used,
                }:
                    problems.append("%s: summary of %s %s differs" % (shape, rp, rc))
    return problems, checked


@contextlib.contextmanager
def kept_database(conf, server):
    """(url, Database) of a new MySQL database at head on ``server``
    (host:port) that is left in place at the end (drop it by hand)."""
    name = "placement_scale_%s" % uuid.uuid4().hex[:12]
    host, _, port = server.partition(":")
    conn = pymysql.connect(host=host, port=int(port or 3306), user="root")
    with conn.cursor() as cur:
        cur.execute(
            "CREATE DATABASE %s CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" % name
        )
    conn.close()
    url = "mysql+pymysql://root@%s/%s?charset=utf8mb4" % (server, name)
    with profile_request.at_head(url, conf) as db:
        yield url, db


def run(args, url):
    paths = shapes(aggregate_uuid(7))
    if args.children:
        paths["two_groups"] = TWO_GROUPS
    figures = {}
    started = time.perf_counter()
    # The server is up once its GET / answers; ready is from its start.
    with profile_request.server(url, args.workers, args.threads, 2) as (base, pgid):
        figures["ready_s"], first = ready(base, started, paths["flat"])
        # CPU the server's processes used until then: steadier than wall
        # time on a shared machine.
        figures["ready_server_cpu_s"] = round(
            group_cpu([pid for pid, _ in procfs.group(pgid)]), 2
        )
        figures["first_answer_candidates"] = len(first["allocation_requests"])
        print(
            "ready: first GET /allocation_candidates after %.1f s" % figures["ready_s"]
        )
        one, _ = latency(base, pgid, paths, args.samples, 1)
        figures["one_client"] = one
        for name, s in one.items():
            print(
                "1 client  %-10s p50 %7.1f ms p99 %7.1f ms server CPU %5.1f ms"
                % (name, s["p50_ms"], s["p99_ms"], s["server_cpu_ms"])
            )
        many, last = latency(base, pgid, paths, args.samples // 2 or 1, args.clients)
        figures["clients"] = args.clients
        figures["many_clients"] = many
        for name, s in many.items():
            print(
                "%d clients %-10s p50 %7.1f ms p99 %7.1f ms"
                % (args.clients, name, s["p50_ms"], s["p99_ms"])
            )
        figures["candidates_per_shape"] = {
            name: len(doc["allocation_requests"]) for name, doc in last.items()
        }
        s = session()
        capacity, capacity_cpu = [], []
        pids = [pid for pid, _ in procfs.group(pgid)]
        for _ in range(3):
            before = group_cpu(pids)
            elapsed, response = timed(
                s, base + "/allocation_candidates/capacity?" + FLAVOR
            )
            capacity.append(elapsed)
            capacity_cpu.append(round(group_cpu(pids) - before, 3))
        figures["capacity_server_cpu_s"] = capacity_cpu
        figures["capacity_s"] = round(sorted(capacity)[1], 3)
        figures["capacity_all_s"] = [round(c, 3) for c in capacity]
        figures["capacity"] = response.json()["capacity"]
        print(
            "capacity of one flavor: %.2f s (%d instances)"
            % (figures["capacity_s"], figures["capacity"])
        )
        console, console_cpu = [], []
        for _ in range(3):
            before = group_cpu(pids)
            console.append(console_first_page(base))
            console_cpu.append(round(group_cpu(pids) - before, 3))
        figures["console_server_cpu_s"] = console_cpu
        figures["console_s"] = round(sorted(c[0] for c in console)[1], 3)
        figures["console_all_s"] = [round(c[0], 3) for c in console]
        figures["console_calls"] = console[0][2]
        print(
            "console cloud view, first page: %.2f s (%d API calls)"
            % (figures["console_s"], console[0][2])
        )
        rss = memory(pgid)
        figures["rss_mb"] = {
            str(pid): {
                "rss": round(r, 1),
                "peak": round(p, 1),
                "role": role,
                "pss": round(pss, 1),
            }
            for pid, (r, p, role, pss) in rss.items()
        }
        workers = [p for r, p, role, _ in rss.values() if role == "worker"]
        figures["worker_peak_rss_mb"] = round(max(workers), 1)
        figures["group_pss_mb"] = round(sum(v[3] for v in rss.values()), 1)
        print("worker peak RSS: %s MB" % ", ".join("%.0f" % p for p in sorted(workers)))
        print("process group PSS: %.0f MB" % figures["group_pss_mb"])
    checked_shapes = {k: v for k, v in last.items() if k != "two_groups"}
    problems, checked = check_answers(
        url, checked_shapes, aggregate_uuid(7), filters=not args.children
    )
    figures["answers_checked"] = checked
    figures["answer_problems"] = problems[:20]
    print(
        "answers: %d allocations checked against the database, %d problems"
        % (checked, len(problems))
    )
    for problem in problems[:20]:
        print("  " + problem)
    return figures


def verdict(figures):
    """{target's name: met} for the figures' layout."""
    met = {}
    for name, path, bound in TARGETS[figures["children"]]:
        value = figures
        for key in path:
            value = value[key]
        met[name] = value < bound
    met["answers"] = not figures["answer_problems"]
    return met


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100000)
    parser.add_argument("--aggregates", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--children",
        action="store_true",
        help="the 1,000,000-provider layout: each host a tree of 4 "
        "providers (_tree); --hosts 250000 makes 1,000,000 providers",
    )
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--samples", type=int, default=100, help="requests per shape, one client"
    )
    parser.add_argument(
        "--url", help="serve this loaded database instead of loading one"
    )
    parser.add_argument("--keep", action="store_true", help="keep the loaded database")
    parser.add_argument(
        "--server",
        default="127.0.0.1:3306",
        help="with --keep: the MariaDB server (host:port) to load into, e.g."
        " a private one (tests.private_mariadb) whose CPU is the slice's alone",
    )
    parser.add_argument(
        "--load-only", action="store_true", help="with --keep: load, serve nothing"
    )
    parser.add_argument("--out", help="write the figures here as JSON")
    day_slice.add_arguments(parser)
    args = parser.parse_args()
    figures = {
        "hosts": args.hosts,
        "aggregates": args.aggregates,
        "workers": args.workers,
        "threads": args.threads,
        "children": args.children,
    }
    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            conf = placement_conf.command_conf()
            placement_conf.parse_args(conf, [], default_config_files=[])
            database = (
                kept_database(conf, args.server)
                if args.keep
                else profile_request.fresh_database("mysql", conf)
            )
            url, db = stack.enter_context(database)
            start = time.perf_counter()
            figures["instances"] = load(
                db, args.hosts, args.aggregates, children=args.children
            )
            figures["load_s"] = round(time.perf_counter() - start, 1)
            db.engine.dispose()
            print(
                "loaded %d hosts, %d instances in %.1f s"
                % (args.hosts, figures["instances"], figures["load_s"])
            )
            if args.keep:
                print("kept: --url '%s'" % url)
        if args.load_only:
            return
        if args.day:
            figures["day"] = day_slice.day(
                url, args, shapes(aggregate_uuid(7)), summary_ms
            )
            figures["met"] = {}
        else:
            figures.update(run(args, url))
    if not args.day:
        figures["met"] = verdict(figures)
    for name, met in figures["met"].items():
        print("%-16s %s" % (name, "met" if met else "NOT MET"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
