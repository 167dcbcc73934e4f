"""A compute fleet's steady traffic: the highest rate of nova-compute
periodic reports a server sustains with p99 < 100 ms.

Each of ``--hosts`` simulated compute hosts repeats what nova's report
client sends from its periodic task (nova 34.0.0): every period its
provider's allocations (``_remove_deleted_instances_allocations``); every
fifth period (``[compute] resource_provider_association_refresh``) its
inventories, aggregates, traits and the sharing providers of its
aggregates (``GET /resource_providers?member_of=in:...&required=
MISC_SHARES_VIA_AGGREGATE``); and for 1% of hosts per period a PUT of its
inventories (a changed ``reserved``) with the generation just read. One
host's requests of a period are one *report*, sent in order on one
kept-alive connection.

Per server (run in turn, the ../shared/bench convention: ``bash -c``
in its own process group, given ``PORT``, ``OS_PLACEMENT_DATABASE__
CONNECTION`` and ``OS_API__AUTH_STRATEGY=noauth2``), a fresh MySQL
database gets both schemas (the reference's ``db sync`` when
``--reference-manage`` is given, then ours) and ``--hosts`` hosts with
``--instances`` instances each, bulk-loaded before the server starts.
The reports are then sent open loop: at ``--start`` reports/s for
``--step-seconds``, the rate multiplied by ``--factor`` each step, the
hosts' periods spread evenly. A request's latency counts from when its
report was due (or, after the first, when the previous answer came), so
a client or server falling behind shows. The highest rate whose p99 is
under ``--p99-ms`` with no error, in one of ``--tries`` steps at that
rate, is the figure. From the repository:

    .venv/bin/python tools/bench/heartbeat.py --hosts 10000 \\
        --server ours='exec .venv/bin/placement-api --port $PORT \\
            --workers 2 --threads 10' \\
        --server reference='cd /tmp && PYTHONPATH= exec \\
            '"$PWD"'/.venv-reference/bin/gunicorn -b 127.0.0.1:$PORT -w 2 \\
            --threads 10 placement.wsgi.api:application' \\
        --reference-manage .venv-reference/bin/placement-manage \\
        --out tools/bench/results/heartbeat.json

(the reference starts outside this tree: from here, ``placement`` would
import ours).
"""

import argparse
import heapq
import http.client
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pymysql
import sqlalchemy as sa

sys.path.insert(0, __file__.rsplit("/", 3)[0])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cloud_day  # noqa: E402  (percentile, free ports, MySQL, stop)
import profile_request  # noqa: E402  (bulk loader, schema at head)

from placement import conf as placement_conf  # noqa: E402
from placement.db import tables  # noqa: E402
from placement.objects.catalog import changes  # noqa: E402

HEADERS = {
    "x-auth-token": "admin",
    "accept": "application/json",
    "openstack-api-version": "placement 1.39",
}
PUT_HEADERS = dict(HEADERS, **{"content-type": "application/json"})
AGGREGATES = 10
HOST_INVENTORY = {
    "VCPU": {"total": 64, "allocation_ratio": 4.0},
    "MEMORY_MB": {"total": 262144, "reserved": 512},
    "DISK_GB": {"total": 2000},
}
HOST_TRAITS = ("HW_CPU_X86_AVX2", "HW_CPU_X86_SSE42", "COMPUTE_STATUS_DISABLED")
INSTANCE = {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20}
REFRESH_EVERY = 5  # periods between refreshes of the provider's associations
PUT_ONE_IN = 100  # hosts per period, one of which PUTs its inventories
SHARING = "MISC_SHARES_VIA_AGGREGATE"


def aggregate_of(n):
    return "%08d-0000-4000-8000-0000000000be" % (n % AGGREGATES)


def load(url, hosts, instances):
    """``hosts`` compute hosts (one provider each, in one aggregate of
    AGGREGATES) with ``instances`` instances each; returns their uuids."""
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    with profile_request.at_head(url, conf) as db:
        loader = profile_request.Loader(db)
        uuids = []
        for n in range(hosts):
            loader.provider(
                "compute-%06d" % n,
                HOST_INVENTORY,
                traits=HOST_TRAITS[: n % 3 + 1],
                aggregates=[aggregate_of(n)],
            )
            uuids.append(loader.providers[-1]["uuid"])
        loader.flush()
        with db.writer() as conn:
            changes.record(conn, changes.EVERYTHING)
            project = conn.execute(
                tables.projects.insert(), {"external_id": "heartbeat"}
            ).inserted_primary_key[0]
            user = conn.execute(
                tables.users.insert(), {"external_id": "heartbeat"}
            ).inserted_primary_key[0]
            ids = dict(
                conn.execute(
                    sa.select(
                        tables.resource_providers.c.uuid, tables.resource_providers.c.id
                    )
                ).all()
            )
            consumers, allocations = [], []
            for rp in uuids:
                for _ in range(instances):
                    consumer = str(uuid.uuid4())
                    consumers.append(
                        {"uuid": consumer, "project_id": project, "user_id": user}
                    )
                    allocations.extend(
                        {
                            "resource_provider_id": ids[rp],
                            "consumer_id": consumer,
                            "resource_class_id": loader.class_ids[rc],
                            "used": used,
                        }
                        for rc, used in INSTANCE.items()
                    )
            for table, rows in (
                (tables.consumers, consumers),
                (tables.allocations, allocations),
            ):
                for start in range(0, len(rows), 5000):
                    conn.execute(table.insert(), rows[start : start + 5000])
    return uuids


class Host:
    """One compute host's report client: its provider and the requests of
    each of its periods."""

    def __init__(self, n, rp):
        self.n = n
        self.url = "/resource_providers/%s" % rp
        self.sharing = "/resource_providers?member_of=in:%s&required=%s" % (
            aggregate_of(n),
            SHARING,
        )
        self.period = 0
        self.reserved = 0

    def report(self, send):
        """One period's requests through ``send(method, path, body)``,
        which returns (status, parsed body)."""
        period, self.period = self.period, self.period + 1
        send("GET", self.url + "/allocations", None)
        if (period + self.n) % REFRESH_EVERY == 0:
            _, found = send("GET", self.url + "/inventories", None)
            send("GET", self.url + "/aggregates", None)
            send("GET", self.url + "/traits", None)
            send("GET", self.sharing, None)
            turn = self.n // REFRESH_EVERY + period // REFRESH_EVERY
            if turn % (PUT_ONE_IN // REFRESH_EVERY) == 0:
                # One host in 100 per period: its inventories changed.
                self.reserved = 1 - self.reserved
                inventories = dict(found["inventories"])
                inventories["DISK_GB"] = dict(
                    inventories["DISK_GB"], reserved=self.reserved
                )
                send(
                    "PUT",
                    self.url + "/inventories",
                    {
                        "resource_provider_generation": found[
                            "resource_provider_generation"
                        ],
                        "inventories": inventories,
                    },
                )


class Client(threading.Thread):
    """Sends the reports it is handed on one kept-alive connection."""

    def __init__(self, netloc, work, results):
        super().__init__(daemon=True)
        self.netloc = netloc
        self.work = work
        self.results = results
        self.conn = None

    def send(self, method, path, body, since):
        data = None if body is None else json.dumps(body)
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.netloc, timeout=60)
            try:
                self.conn.request(method, path, data, PUT_HEADERS if data else HEADERS)
                resp = self.conn.getresponse()
                payload = resp.read()
                break
            except (OSError, http.client.HTTPException):
                # A kept-alive connection the server closed: once more.
                self.conn.close()
                self.conn = None
                if attempt:
                    self.results.append(
                        (method + " " + path, "error", time.monotonic() - since)
                    )
                    return None, None
        done = time.monotonic()
        kind = "sharing" if "?" in path else path.rsplit("/", 1)[-1]
        self.results.append((method + " " + kind, resp.status, done - since))
        return resp.status, (json.loads(payload) if resp.status == 200 else None)

    def run(self):
        while True:
            item = self.work.get()
            if item is None:
                return
            host, due = item
            Report(self, due).send_all(host)


class Report:
    """One report on a client: each request's latency counts from when the
    report was due, then from the previous answer."""

    def __init__(self, client, due):
        self.client = client
        self.since = due

    def send(self, method, path, body):
        found = self.client.send(method, path, body, self.since)
        self.since = time.monotonic()
        return found

    def send_all(self, host):
        host.report(self.send)


def step(hosts, netloc, rate, seconds, clients):
    """Reports at ``rate`` per second for ``seconds``: (latencies,
    statuses, reports sent, late starts)."""
    work = queue.Queue()
    results = []
    threads = [Client(netloc, work, results) for _ in range(clients)]
    for thread in threads:
        thread.start()
    period = len(hosts) / rate
    start = time.monotonic() + 0.2
    due = [(start + period * i / len(hosts), i) for i in range(len(hosts))]
    heapq.heapify(due)
    end = start + seconds
    sent = 0
    while due and due[0][0] < end:
        at, i = heapq.heappop(due)
        wait = at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        work.put((hosts[i], at))
        sent += 1
        heapq.heappush(due, (at + period, i))
    for _ in threads:
        work.put(None)
    for thread in threads:
        thread.join()
    return results, sent, time.monotonic() - start


def summary(rate, results, sent, wall, cpu):
    latencies = [r[2] for r in results]
    errors = sum(1 for r in results if r[1] == "error" or int(r[1]) >= 400)
    by_kind = {}
    for kind, _, latency in results:
        by_kind.setdefault(kind, []).append(latency)
    return {
        "offered_reports_per_s": rate,
        "reports": sent,
        "achieved_reports_per_s": round(sent / wall, 1),
        "requests": len(results),
        "errors": errors,
        "p50_ms": round(cloud_day.percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(cloud_day.percentile(latencies, 99) * 1000, 1),
        "server_cpu_ms_per_request": round(cpu * 1000 / max(len(results), 1), 2),
        "p99_ms_by_kind": {
            k: round(cloud_day.percentile(v, 99) * 1000, 1)
            for k, v in sorted(by_kind.items())
        },
    }


def _group_cpu(pgid):
    return profile_request._group_cpu(pgid)


def run(label, command, args, log_dir):
    name = "heartbeat_%s_%s" % (label, uuid.uuid4().hex[:8])
    conn = pymysql.connect(**cloud_day.MYSQL)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE %s CHARACTER SET utf8mb4" % name)
    conn.close()
    url = "mysql+pymysql://root@127.0.0.1:3306/%s?charset=utf8" % name
    env = dict(
        os.environ,
        OS_PLACEMENT_DATABASE__CONNECTION=url,
        OS_API__AUTH_STRATEGY="noauth2",
    )
    proc = None
    try:
        if args.reference_manage:
            # Both schemas, as when both serve one database.
            subprocess.run(
                [os.path.abspath(args.reference_manage), "db", "sync"],
                env=dict(env, PYTHONPATH=""),
                cwd=tempfile.gettempdir(),
                check=True,
                capture_output=True,
            )
        started = time.monotonic()
        uuids = load(url, args.hosts, args.instances)
        print(
            "%s: loaded %d hosts in %.1f s"
            % (label, args.hosts, time.monotonic() - started),
            flush=True,
        )
        port = cloud_day._free_port()
        log = open(os.path.join(log_dir, "%s.log" % name), "wb")
        proc = subprocess.Popen(
            ["bash", "-c", command],
            env=dict(env, PORT=str(port)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        netloc = "127.0.0.1:%d" % port
        _wait_up(netloc, proc, label)
        hosts = [Host(n, rp) for n, rp in enumerate(uuids)]
        # Warm-up: every host's first refresh period once.
        step(hosts, netloc, args.start, min(len(hosts) / args.start, 10), args.clients)
        steps, best, rate = [], None, args.start
        while _held_once(label, proc, hosts, netloc, rate, args, steps):
            best = rate
            rate = round(rate * args.factor, 1)
        return {
            "label": label,
            "command": command,
            "sustained_reports_per_s": best,
            "steps": steps,
        }
    finally:
        if proc is not None:
            cloud_day.stop(proc)
        cloud_day.drop_database(name)


def _held_once(label, proc, hosts, netloc, rate, args, steps):
    """Whether one of ``--tries`` steps at ``rate`` holds (p99 under the
    bar, no error, the offered rate achieved): on a shared machine one
    burst of other work can spoil a step."""
    for _ in range(args.tries):
        cpu = _group_cpu(proc.pid)
        results, sent, wall = step(hosts, netloc, rate, args.step_seconds, args.clients)
        figures = summary(rate, results, sent, wall, _group_cpu(proc.pid) - cpu)
        print("%s: %s" % (label, json.dumps(figures)), flush=True)
        steps.append(figures)
        if (
            figures["p99_ms"] < args.p99_ms
            and not figures["errors"]
            and figures["achieved_reports_per_s"] >= rate * 0.95
        ):
            return True
    return False


def _wait_up(netloc, proc, label):
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server %s exited" % label)
        try:
            conn = http.client.HTTPConnection(netloc, timeout=5)
            conn.request("GET", "/")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server %s did not start" % label)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--server", action="append", required=True, metavar="LABEL=COMMAND"
    )
    parser.add_argument("--reference-manage", help="the reference's placement-manage")
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--instances", type=int, default=4, help="per host")
    parser.add_argument("--start", type=float, default=4.0, help="reports/s")
    parser.add_argument("--factor", type=float, default=1.4)
    parser.add_argument("--step-seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=32, help="client threads")
    parser.add_argument("--p99-ms", type=float, default=100.0)
    parser.add_argument(
        "--tries", type=int, default=2, help="steps at a rate before it fails"
    )
    parser.add_argument("--out")
    args = parser.parse_args()
    out = {"hosts": args.hosts, "instances": args.instances, "servers": []}
    with tempfile.TemporaryDirectory() as log_dir:
        for spec in args.server:
            label, _, command = spec.partition("=")
            manage = args.reference_manage
            if label != "reference":
                args.reference_manage = None
            try:
                out["servers"].append(run(label, command, args, log_dir))
            finally:
                args.reference_manage = manage
    for found in out["servers"]:
        print(
            "%s: %s reports/s with p99 < %g ms"
            % (found["label"], found["sustained_reports_per_s"], args.p99_ms)
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
