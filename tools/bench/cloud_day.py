"""A day in a cloud, compressed: hosts register and re-report, a scheduler
asks for candidates and claims, instances are deleted and moved.

Runs each server command in turn (the ../shared/bench convention: run with
``bash -c`` in its own process group, given ``PORT``,
``OS_PLACEMENT_DATABASE__CONNECTION`` for a fresh MySQL database and
``OS_API__AUTH_STRATEGY=noauth2``; ready when ``GET /`` answers 200) and
drives it through HTTP:

1. ``--hosts`` compute hosts register as a hypervisor agent does: a root
   provider with DISK_GB and CPU traits, two NUMA children with VCPU and
   MEMORY_MB (trait HW_NUMA_ROOT), and one host in ``--aggregate-every``
   joins an aggregate. Not timed into the figures.
2. For ``--duration`` seconds, all at once:
   - agents re-report (``--reports-per-s``): read the host's tree and the
     root's inventories; ``--changing-per-s`` of them also change
     something (a NUMA node's VCPU total or the root's traits, with the
     generation just read);
   - ``--schedulers`` loops: ``GET /allocation_candidates`` with
     ``limit=--limit`` for a NUMA-node-sized instance, then claim one of
     the answers at random (``PUT /allocations/{new}``, a 409 starts over,
     up to three attempts);
   - ``--deletes-per-s`` instances are deleted and ``--moves-per-s``
     moved (``POST /allocations``: the instance takes a new candidate,
     a migration consumer holds the old one, then is dropped).
3. Final consistency: every provider's usage equals the sum of the
   allocations it holds (``/resource_providers/{u}/allocations``) and is
   within capacity.

Figures per server: a_c p50/p99, claims/s, write p99, 409s, 5xx, catalog
hit rate (ours: ``placement_catalog_requests_total`` from ``/metrics``; the
reference has no catalog) and the consistency check. From the repository:

    .venv/bin/python tools/bench/cloud_day.py --hosts 1000 --duration 120 \\
        --server ours='exec .venv/bin/placement-api --db-sync --port $PORT \\
            --workers 2 --threads 10' \\
        --server reference='cd ../shared/bench && exec ./upstream-server' \\
        --out cloud-day.json

(the reference must start in its own directory: from ours, ``placement``
would import this tree).
"""

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import pymysql
import requests

HEADERS = {
    "x-auth-token": "admin",
    "accept": "application/json",
    "content-type": "application/json",
    "openstack-api-version": "placement 1.39",
}
MYSQL = dict(host="127.0.0.1", port=3306, user="root")
HOST_TRAITS = ("HW_CPU_X86_AVX2", "HW_CPU_X86_SSE42", "COMPUTE_VOLUME_MULTI_ATTACH")
NUMA_VCPU, NUMA_MEMORY, DISK = 32, 65536, 2000
HOST_INVENTORY = {"DISK_GB": {"total": DISK, "reserved": 10}}
NUMA_INVENTORY = {
    "VCPU": {"total": NUMA_VCPU, "allocation_ratio": 4.0},
    "MEMORY_MB": {"total": NUMA_MEMORY, "reserved": 512},
}
NUMA_TRAITS = ("HW_NUMA_ROOT",)
AGGREGATE_EVERY = 5
INSTANCE = {"VCPU": 2, "MEMORY_MB": 2048}
INSTANCE_DISK = 20


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latency = collections.defaultdict(list)
        self.statuses = collections.Counter()
        self.errors = []

    def call(self, session, method, url, kind, **kw):
        started = time.monotonic()
        try:
            response = session.request(method, url, timeout=120, **kw)
        except requests.RequestException as e:
            with self.lock:
                self.statuses[kind, "error"] += 1
                self.errors.append((kind, str(e)[:200]))
            return None
        elapsed = time.monotonic() - started
        with self.lock:
            self.latency[kind].append(elapsed)
            self.statuses[kind, response.status_code] += 1
            if response.status_code >= 500:
                self.errors.append((kind, response.status_code, response.text[:200]))
        return response


class Cloud:
    """What the clients know: hosts (root and NUMA uuids) and instances."""

    def __init__(self, base):
        self.base = base
        self.hosts = []  # (root uuid, [numa uuids])
        self.lock = threading.Lock()
        self.instances = {}  # consumer uuid -> allocations body


def _session():
    session = requests.Session()
    session.headers.update(HEADERS)
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=4)
    session.mount("http://", adapter)
    return session


def aggregates_of(n, aggregate_every=AGGREGATE_EVERY):
    """The aggregates host ``n`` joins: one of ten, for one host in
    ``aggregate_every``."""
    if aggregate_every and n % aggregate_every == 0:
        return ["%08d-0000-4000-8000-000000000000" % (n % 10)]
    return []


def register(cloud, stats, n, aggregate_every):
    base = cloud.base
    s = _session()
    root = str(uuid.uuid4())
    ok = True

    def check(response):
        nonlocal ok
        if response is None or response.status_code >= 300:
            ok = False
        return response

    check(
        stats.call(
            s,
            "POST",
            base + "/resource_providers",
            "register",
            json={"uuid": root, "name": "compute-%05d" % n},
        )
    )
    check(
        stats.call(
            s,
            "PUT",
            base + "/resource_providers/%s/inventories" % root,
            "register",
            json={
                "resource_provider_generation": 0,
                "inventories": HOST_INVENTORY,
            },
        )
    )
    check(
        stats.call(
            s,
            "PUT",
            base + "/resource_providers/%s/traits" % root,
            "register",
            json={"resource_provider_generation": 1, "traits": list(HOST_TRAITS)},
        )
    )
    numas = []
    for i in range(2):
        numa = str(uuid.uuid4())
        check(
            stats.call(
                s,
                "POST",
                base + "/resource_providers",
                "register",
                json={
                    "uuid": numa,
                    "name": "compute-%05d-numa%d" % (n, i),
                    "parent_provider_uuid": root,
                },
            )
        )
        check(
            stats.call(
                s,
                "PUT",
                base + "/resource_providers/%s/inventories" % numa,
                "register",
                json={
                    "resource_provider_generation": 0,
                    "inventories": NUMA_INVENTORY,
                },
            )
        )
        check(
            stats.call(
                s,
                "PUT",
                base + "/resource_providers/%s/traits" % numa,
                "register",
                json={"resource_provider_generation": 1, "traits": list(NUMA_TRAITS)},
            )
        )
        numas.append(numa)
    aggregates = aggregates_of(n, aggregate_every)
    if aggregates:
        check(
            stats.call(
                s,
                "PUT",
                base + "/resource_providers/%s/aggregates" % root,
                "register",
                json={
                    "resource_provider_generation": 2,
                    "aggregates": aggregates,
                },
            )
        )
    s.close()
    if ok:
        with cloud.lock:
            cloud.hosts.append((root, numas))
    return ok


def report(cloud, stats, session, rnd, changing):
    """One periodic report of a random host; ``changing`` also writes."""
    base = cloud.base
    root, numas = rnd.choice(cloud.hosts)
    tree = stats.call(
        session, "GET", base + "/resource_providers?in_tree=%s" % root, "report_read"
    )
    inv = stats.call(
        session,
        "GET",
        base + "/resource_providers/%s/inventories" % root,
        "report_read",
    )
    if not changing or tree is None or inv is None or tree.status_code != 200:
        return
    if rnd.random() < 0.5:
        _read_and_change(
            stats,
            session,
            base + "/resource_providers/%s/inventories" % rnd.choice(numas),
            "inventories",
            _hot_plug,
        )
    else:
        _read_and_change(
            stats,
            session,
            base + "/resource_providers/%s/traits" % root,
            "traits",
            _toggle_disabled,
        )


def _hot_plug(inventories):
    # The NUMA node's VCPU total moves by one, back and forth.
    total = inventories["VCPU"]["total"]
    inventories["VCPU"]["total"] = total + (1 if total <= NUMA_VCPU else -1)
    return inventories


def _toggle_disabled(traits):
    return sorted(set(traits) ^ {"COMPUTE_STATUS_DISABLED"})


def _read_and_change(stats, session, url, key, change):
    """GET ``url``, then PUT ``change(body[key])`` back with the generation
    just read, as an agent does."""
    current = stats.call(session, "GET", url, "report_read")
    if current is None or current.status_code != 200:
        return
    body = current.json()
    stats.call(
        session,
        "PUT",
        url,
        "report_write",
        json={
            "resource_provider_generation": body["resource_provider_generation"],
            key: change(body[key]),
        },
    )


AC_QUERY = (
    "/allocation_candidates?resources=DISK_GB:%d&resources1=VCPU:%d,MEMORY_MB:%d"
    "&required=HW_CPU_X86_AVX2&required1=HW_NUMA_ROOT&limit=%%d"
    % (INSTANCE_DISK, INSTANCE["VCPU"], INSTANCE["MEMORY_MB"])
)


def claim(cloud, stats, session, rnd, limit):
    """Schedule one instance: candidates, then claim one; True if placed."""
    base = cloud.base
    for _ in range(3):
        answer = stats.call(session, "GET", base + AC_QUERY % limit, "a_c")
        if answer is None or answer.status_code != 200:
            return False
        requests_ = answer.json()["allocation_requests"]
        if not requests_:
            return False
        chosen = rnd.choice(requests_)["allocations"]
        consumer = str(uuid.uuid4())
        body = {
            "allocations": chosen,
            "project_id": "p",
            "user_id": "u",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }
        put = stats.call(
            session, "PUT", base + "/allocations/" + consumer, "claim", json=body
        )
        if put is not None and put.status_code == 204:
            with cloud.lock:
                cloud.instances[consumer] = chosen
            return True
    return False


def delete(cloud, stats, session, rnd):
    with cloud.lock:
        if not cloud.instances:
            return
        consumer = rnd.choice(list(cloud.instances))
        cloud.instances.pop(consumer)
    stats.call(session, "DELETE", cloud.base + "/allocations/" + consumer, "delete")


def move(cloud, stats, session, rnd):
    """Cold-migrate an instance: a migration consumer keeps the source
    allocation while the instance holds the destination's, then the
    migration's is dropped (confirm)."""
    base = cloud.base
    with cloud.lock:
        if not cloud.instances:
            return
        consumer = rnd.choice(list(cloud.instances))
        old = cloud.instances.pop(consumer)
    answer = stats.call(session, "GET", base + AC_QUERY % 10, "a_c_move")
    if answer is None or answer.status_code != 200:
        return
    options = [
        r["allocations"]
        for r in answer.json()["allocation_requests"]
        if not set(r["allocations"]) & set(old)
    ]
    current = stats.call(session, "GET", base + "/allocations/" + consumer, "move")
    if not options or current is None or current.status_code != 200:
        with cloud.lock:
            cloud.instances[consumer] = old
        return
    new = rnd.choice(options)
    migration = str(uuid.uuid4())
    moved = stats.call(
        session,
        "POST",
        base + "/allocations",
        "move",
        json={
            migration: {
                "allocations": old,
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": None,
                "consumer_type": "MIGRATION",
            },
            consumer: {
                "allocations": new,
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": current.json()["consumer_generation"],
                "consumer_type": "INSTANCE",
            },
        },
    )
    ok = moved is not None and moved.status_code == 204
    with cloud.lock:
        cloud.instances[consumer] = new if ok else old
    if ok:
        stats.call(session, "DELETE", base + "/allocations/" + migration, "move")


def paced(stop, per_s, fn):
    """Call fn(session, rnd) ``per_s`` times a second from a few threads
    (one per two calls a second, 2 to 16) until ``stop`` is set; calls a
    slow server makes late are not made up."""
    if per_s <= 0:
        return []
    workers = min(16, max(2, int(per_s / 2)))

    def loop(seed):
        rnd = random.Random(seed)
        session = _session()
        interval = workers / per_s
        due = time.monotonic() + rnd.random() * interval
        while not stop.is_set():
            now = time.monotonic()
            if now < due:
                stop.wait(due - now)
                continue
            fn(session, rnd)
            due = max(due + interval, time.monotonic() - interval)
        session.close()

    threads = [
        threading.Thread(target=loop, args=(random.random(),), daemon=True)
        for _ in range(workers)
    ]
    for t in threads:
        t.start()
    return threads


def consistency(cloud):
    """(providers checked, [problems]) after the run."""
    base = cloud.base
    problems = []
    providers = [rp for root, numas in cloud.hosts for rp in (root, *numas)]

    def check(rp):
        s = _session()
        try:
            inv = s.get(base + "/resource_providers/%s/inventories" % rp).json()
            usages = s.get(base + "/resource_providers/%s/usages" % rp).json()
            allocs = s.get(base + "/resource_providers/%s/allocations" % rp).json()
        finally:
            s.close()
        summed = collections.Counter()
        for entry in allocs["allocations"].values():
            summed.update(entry["resources"])
        found = []
        for rc, used in usages["usages"].items():
            if used != summed.get(rc, 0):
                found.append(
                    (rp, rc, "usage %d != allocations %d" % (used, summed[rc]))
                )
            i = inv["inventories"].get(rc)
            if i and used > (i["total"] - i["reserved"]) * i["allocation_ratio"]:
                found.append((rp, rc, "usage %d over capacity" % used))
        return found

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for found in pool.map(check, providers):
            problems += found
    return len(providers), problems


def catalog_counts(base):
    """(hits, reads) of the provider catalog from ``/metrics`` if the server
    exposes them; None otherwise."""
    try:
        text = requests.get(base + "/metrics", headers=HEADERS, timeout=30).text
    except requests.RequestException:
        return None
    counts = {}
    for line in text.splitlines():
        if line.startswith("placement_catalog_requests_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = counts.get(outcome, 0) + float(line.rsplit(" ", 1)[1])
    if not counts:
        return None
    return counts


class Server:
    """A running server: its base URL, process (the ``bash -c`` that execs
    the command) and database name."""

    def __init__(self, base, proc, database):
        self.base, self.proc, self.database = base, proc, database


@contextlib.contextmanager
def server(command, label, log_dir):
    """Yield a Server running ``command`` on a fresh MySQL database."""
    name = "cloudday_%s_%s" % (label, uuid.uuid4().hex[:8])
    conn = pymysql.connect(**MYSQL)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE %s CHARACTER SET utf8mb4" % name)
    conn.close()
    port = _free_port()
    env = dict(
        os.environ,
        PORT=str(port),
        OS_PLACEMENT_DATABASE__CONNECTION=(
            "mysql+pymysql://root@127.0.0.1:%d/%s?charset=utf8" % (MYSQL["port"], name)
        ),
        OS_API__AUTH_STRATEGY="noauth2",
    )
    log = open(os.path.join(log_dir, "%s.log" % name), "wb")
    proc = subprocess.Popen(
        ["bash", "-c", command],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = "http://127.0.0.1:%d" % port
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError("server %s exited, see %s" % (label, log.name))
            try:
                if requests.get(base + "/", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server %s did not start" % label)
            time.sleep(0.5)
        yield Server(base, proc, name)
    finally:
        stop(proc)
        log.close()
        drop_database(name)


def stop(proc):
    """Stop a server started in its own process group: TERM, then KILL
    after 15 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def drop_database(name):
    conn = pymysql.connect(**MYSQL)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS %s" % name)
    conn.close()


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def register_all(cloud, stats, args):
    """Register ``--hosts`` hosts; {"register_s", "hosts_registered"}."""
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.load_concurrency) as pool:
        registered = sum(
            pool.map(
                lambda n: register(cloud, stats, n, args.aggregate_every),
                range(args.hosts),
            )
        )
    return {
        "register_s": round(time.monotonic() - started, 1),
        "hosts_registered": registered,
    }


def start_day(cloud, stats, args, stop):
    """Start the day's traffic until ``stop`` is set: agents re-reporting,
    schedulers claiming, deletes and moves; (threads, Counter of claims
    placed (True) and not (False))."""
    threads = []
    unchanged = max(args.reports_per_s - args.changing_per_s, 0)
    threads += paced(stop, unchanged, lambda s, r: report(cloud, stats, s, r, False))
    threads += paced(
        stop, args.changing_per_s, lambda s, r: report(cloud, stats, s, r, True)
    )
    threads += paced(stop, args.deletes_per_s, lambda s, r: delete(cloud, stats, s, r))
    threads += paced(stop, args.moves_per_s, lambda s, r: move(cloud, stats, s, r))
    claims = collections.Counter()

    def scheduler(seed):
        rnd = random.Random(seed)
        session = _session()
        while not stop.is_set():
            claims[claim(cloud, stats, session, rnd, args.limit)] += 1
        session.close()

    for n in range(args.schedulers):
        t = threading.Thread(target=scheduler, args=(n,), daemon=True)
        t.start()
        threads.append(t)
    return threads, claims


def run(label, command, args):
    stats = Stats()
    result = {"label": label, "command": command}
    with server(command, label, args.log_dir) as running:
        base = running.base
        cloud = Cloud(base)
        result.update(register_all(cloud, stats, args))
        # Nothing counted yet is zero: no candidate request was made.
        before = catalog_counts(base) or {}
        stats = Stats()  # the day's figures only
        stop = threading.Event()
        threads, claims = start_day(cloud, stats, args, stop)
        day_started = time.monotonic()
        time.sleep(args.duration)
        stop.set()
        for t in threads:
            t.join(180)
        day = time.monotonic() - day_started
        after = catalog_counts(base)
        checked, problems = consistency(cloud)

    writes = [
        x
        for kind in ("claim", "delete", "move", "report_write")
        for x in stats.latency[kind]
    ]
    by_status = collections.Counter()
    for (_kind, status), n in stats.statuses.items():
        by_status[str(status)] += n
    result.update(
        {
            "day_s": round(day, 1),
            "a_c_requests": len(stats.latency["a_c"]),
            "a_c_p50_ms": _ms(percentile(stats.latency["a_c"], 50)),
            "a_c_p99_ms": _ms(percentile(stats.latency["a_c"], 99)),
            "claims": claims[True],
            "claims_per_s": round(claims[True] / day, 1),
            "unplaced": claims[False],
            "writes": len(writes),
            "write_p99_ms": _ms(percentile(writes, 99)),
            "changing_reports": stats.statuses["report_write", 200],
            "reports_per_s": round(
                sum(n for (k, _), n in stats.statuses.items() if k == "report_read")
                / day,
                1,
            ),
            "status_409": by_status["409"],
            "status_5xx": sum(n for s, n in by_status.items() if s.startswith("5")),
            "errors": stats.errors[:5],
            "statuses": {
                "%s %s" % k: n for k, n in sorted(stats.statuses.items(), key=str)
            },
            "providers_checked": checked,
            "consistency": "ok" if not problems else problems[:10],
            "instances_at_end": len(cloud.instances),
        }
    )
    if after is not None:
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        total = sum(delta.values())
        result["catalog"] = delta
        result["catalog_hit_rate"] = (
            round(delta.get("hit", 0) / total, 3) if total else None
        )
    return result


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000, 1)


def add_day_arguments(parser, duration):
    """The options that shape the cloud and its day (see the docstring)."""
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--aggregate-every", type=int, default=AGGREGATE_EVERY)
    parser.add_argument("--duration", type=float, default=duration)
    parser.add_argument("--reports-per-s", type=float, default=50)
    parser.add_argument("--changing-per-s", type=float, default=20)
    parser.add_argument("--schedulers", type=int, default=4)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--deletes-per-s", type=float, default=2)
    parser.add_argument("--moves-per-s", type=float, default=1)
    parser.add_argument("--load-concurrency", type=int, default=10)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--out")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--server",
        action="append",
        required=True,
        help="label=command (repeat for each server, run in turn)",
    )
    parser.add_argument(
        "--mysql-port",
        type=int,
        default=MYSQL["port"],
        help="MariaDB on 127.0.0.1 to make the databases in, e.g. a private "
        "one (python -m tests.private_mariadb start DIR)",
    )
    add_day_arguments(parser, duration=120)
    args = parser.parse_args()
    MYSQL["port"] = args.mysql_port
    if args.log_dir is None:
        args.log_dir = tempfile.mkdtemp(prefix="cloud-day-logs-")
    results = {"args": vars(args), "runs": []}
    for spec in args.server:
        label, _, command = spec.partition("=")
        result = run(label, command, args)
        results["runs"].append(result)
        print(json.dumps(result, indent=1), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
