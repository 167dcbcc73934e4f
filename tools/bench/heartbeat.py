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

Per server (the ../shared/bench convention: ``bash -c`` in its own
process group, given ``PORT``, ``OS_PLACEMENT_DATABASE__CONNECTION`` and
``OS_API__AUTH_STRATEGY=noauth2``), a fresh MySQL database gets both
schemas (the reference's ``db sync`` when ``--reference-manage`` is
given, then ours) and ``--hosts`` hosts with ``--instances`` instances
each, bulk-loaded before the server starts; every server is loaded and
started first, then their steps alternate, so that each meets the same
moments of a shared machine. ``--private-mysql /dev/shm`` runs a MariaDB
of the tool's own (datadir in memory) so that the database's CPU is the
benchmark's alone.

The reports are sent open loop: at ``--start`` reports/s (a server's own
with ``--start-at``) for ``--step-seconds``, the rate multiplied by
``--factor`` each step, the hosts in turn. A request's latency counts
from when its report was due (or, after the first, when the previous
answer came), so a client or server falling behind shows. The highest
rate whose p99 is under ``--p99-ms`` with no error and the rate achieved,
in one of ``--tries`` steps at that rate, is the figure. The client is
one thread driving ``--clients`` connections (selectors, a minimal
HTTP/1.1 reader): about 0.05 ms of CPU a request where http.client in
threads took 0.16 ms. Each step records the CPU its seconds cost the
server (its process group), the database (the private MariaDB), the tool
and the rest of the machine (/proc). From the repository:

    .venv/bin/python tools/bench/heartbeat.py --hosts 10000 \\
        --private-mysql /dev/shm --start-at ours=250 --start-at reference=40 \\
        --factor 1.25 --step-seconds 10 \\
        --server ours='exec .venv/bin/placement-api --server granian \\
            --port $PORT --workers 2 --threads 10' \\
        --server reference='cd /tmp && PYTHONPATH= exec \\
            '"$PWD"'/.venv-reference/bin/gunicorn -b 127.0.0.1:$PORT -w 2 \\
            --threads 10 placement.wsgi.api:application' \\
        --reference-manage .venv-reference/bin/placement-manage \\
        --out tools/bench/results/heartbeat-10000-<commit>.json

(the reference starts outside this tree: from here, ``placement`` would
import ours).
"""

import argparse
import collections
import contextlib
import http.client
import itertools
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pymysql
import sqlalchemy as sa

sys.path.insert(0, __file__.rsplit("/", 3)[0])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cloud_day  # noqa: E402  (percentile, free ports, MySQL, stop)
import procfs  # noqa: E402
import profile_request  # noqa: E402  (bulk loader, schema at head)

from placement import conf as placement_conf  # noqa: E402
from placement.db import tables  # noqa: E402
from placement.objects.catalog import changes  # noqa: E402
from tests import private_mariadb  # noqa: E402

HEAD = (
    "x-auth-token: admin\r\naccept: application/json\r\n"
    "openstack-api-version: placement 1.39\r\n"
)
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
        return fill(db, hosts, instances)


def fill(db, hosts, instances):
    """``load``'s hosts and instances into ``db`` (at head); returns the
    hosts' uuids."""
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

    def report(self):
        """One period's requests: yields (kind, method, path, body) and is
        sent each answer's (status, body bytes)."""
        period, self.period = self.period, self.period + 1
        yield "GET allocations", "GET", self.url + "/allocations", None
        if (period + self.n) % REFRESH_EVERY == 0:
            path = self.url + "/inventories"
            status, found = yield "GET inventories", "GET", path, None
            yield "GET aggregates", "GET", self.url + "/aggregates", None
            yield "GET traits", "GET", self.url + "/traits", None
            yield "GET sharing", "GET", self.sharing, None
            turn = self.n // REFRESH_EVERY + period // REFRESH_EVERY
            if status == 200 and turn % (PUT_ONE_IN // REFRESH_EVERY) == 0:
                # One host in 100 per period: its inventories changed.
                found = json.loads(found)
                self.reserved = 1 - self.reserved
                inventories = dict(found["inventories"])
                inventories["DISK_GB"] = dict(
                    inventories["DISK_GB"], reserved=self.reserved
                )
                body = {
                    "resource_provider_generation": found[
                        "resource_provider_generation"
                    ],
                    "inventories": inventories,
                }
                yield "PUT inventories", "PUT", path, body


def _request(method, path, body):
    """The bytes of one HTTP/1.1 request."""
    head = "%s %s HTTP/1.1\r\nhost: placement\r\n%s" % (method, path, HEAD)
    if body is None:
        return (head + "\r\n").encode()
    data = json.dumps(body).encode()
    head += "content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(data)
    return head.encode() + data


class Connection:
    """One kept-alive connection sending one report at a time: each
    request's latency counts from when the report was due, then from the
    previous answer."""

    def __init__(self, netloc, selector, results):
        host, _, port = netloc.partition(":")
        self.address = (host, int(port))
        self.selector = selector
        self.results = results
        self.sock = None
        self.report = self.request = None

    def _connect(self):
        if self.sock is not None:
            self.selector.unregister(self.sock)
            self.sock.close()
        self.sock = socket.create_connection(self.address, timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.selector.register(self.sock, selectors.EVENT_READ, self)
        self.buffer = b""

    def begin(self, host, due):
        """Send the first request of ``host``'s next report, due at ``due``."""
        self.report = host.report()
        self.since = due
        self._send(next(self.report), retry=True)

    def _send(self, request, retry):
        self.request, self.retry = request, retry
        self.data = _request(*request[1:])
        if self.sock is None:
            self._connect()
        try:
            self.sock.sendall(self.data)
        except OSError:
            self._again()

    def _again(self):
        """The server closed a kept-alive connection: once more on a new
        one, else an error."""
        self._connect()
        if not self.retry:
            self._answer("error", b"")
            return
        self.retry = False
        self.sock.sendall(self.data)

    def readable(self):
        """Read what came; whether the report is over."""
        try:
            data = self.sock.recv(262144)
        except OSError:
            data = b""
        if not data and self.report is None:
            # An idle connection the server closed (its keep-alive timeout).
            self.selector.unregister(self.sock)
            self.sock.close()
            self.sock = None
            return False
        if not data:
            self._again()
            return self.report is None
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = self.buffer[:end].lower()
        at = head.find(b"\r\ncontent-length:")
        length = 0 if at < 0 else int(head[at + 17 : head.find(b"\r\n", at + 2)])
        if at < 0 and b"\r\ntransfer-encoding:" in head:
            raise RuntimeError("chunked answers are not read: %r" % head)
        if len(self.buffer) < end + 4 + length:
            return False
        body = self.buffer[end + 4 : end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        if b"\r\nconnection: close" in head:
            self.selector.unregister(self.sock)
            self.sock.close()
            self.sock = None
        self._answer(int(head[9:12]), body)
        return self.report is None

    def _answer(self, status, body):
        done = time.monotonic()
        self.results.append((self.request[0], status, done - self.since))
        self.since = done
        try:
            following = self.report.send((status, body))
        except StopIteration:
            self.report = None
            return
        self._send(following, retry=True)


def step(hosts, netloc, rate, seconds, clients):
    """Reports at ``rate`` per second for ``seconds`` on ``clients``
    connections, the hosts in turn, from one thread: (results, reports
    sent, wall time)."""
    results = []
    selector = selectors.DefaultSelector()
    idle = collections.deque(
        Connection(netloc, selector, results) for _ in range(clients)
    )
    waiting = collections.deque()  # due reports without a free connection
    interval = 1 / rate
    start = time.monotonic() + 0.2
    total = int(seconds * rate)
    sent = 0
    while True:
        now = time.monotonic()
        while sent < total and start + sent * interval <= now:
            waiting.append((next(hosts), start + sent * interval))
            sent += 1
        while waiting and idle:
            idle.popleft().begin(*waiting.popleft())
        if sent == total and not waiting and len(idle) == clients:
            break
        timeout = None if sent == total else max(0, start + sent * interval - now)
        for key, _ in selector.select(timeout):
            if key.data.readable():
                idle.append(key.data)
    for conn in idle:
        if conn.sock is not None:
            conn.sock.close()
    selector.close()
    return results, sent, time.monotonic() - start


def summary(rate, results, sent, wall, cpu):
    """A step's figures; ``cpu`` is the CPU seconds the step cost each of
    procfs.cpu_split's roles."""
    latencies = [r[2] for r in results]
    errors = sum(1 for r in results if r[1] == "error" or int(r[1]) >= 400)
    by_kind = {}
    for kind, _, latency in results:
        by_kind.setdefault(kind, []).append(latency)
    requests = max(len(results), 1)
    cores = {k: round(v / wall, 2) for k, v in cpu.items()}
    cores["others"] = round(
        (cpu["machine"] - cpu["server"] - cpu["database"] - cpu["tool"]) / wall, 2
    )
    return {
        "offered_reports_per_s": rate,
        "reports": sent,
        "achieved_reports_per_s": round(sent / wall, 1),
        "requests": len(results),
        "errors": errors,
        "p50_ms": round(cloud_day.percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(cloud_day.percentile(latencies, 99) * 1000, 1),
        "server_cpu_ms_per_request": round(cpu["server"] * 1000 / requests, 3),
        "database_cpu_ms_per_request": round(cpu["database"] * 1000 / requests, 3),
        "tool_cpu_ms_per_request": round(cpu["tool"] * 1000 / requests, 3),
        # Cores busy during the step: the machine has os.cpu_count().
        "cpu_cores": cores,
        "p99_ms_by_kind": {
            k: round(cloud_day.percentile(v, 99) * 1000, 1)
            for k, v in sorted(by_kind.items())
        },
    }


@contextlib.contextmanager
def serving(label, command, args, log_dir, mysql, manage):
    """A fresh database of ``mysql`` (the tool's PrivateMariaDB, or None:
    the machine's) loaded with the hosts (both schemas first when
    ``manage``, the reference's placement-manage, is given), served by
    ``command`` and warmed up: yields the server's Ladder."""
    name = "heartbeat_%s_%s" % (label, uuid.uuid4().hex[:8])
    port = mysql.port if mysql else cloud_day.MYSQL["port"]
    conn = pymysql.connect(**dict(cloud_day.MYSQL, port=port))
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE %s CHARACTER SET utf8mb4" % name)
    conn.close()
    url = "mysql+pymysql://root@127.0.0.1:%d/%s?charset=utf8" % (port, name)
    env = dict(
        os.environ,
        OS_PLACEMENT_DATABASE__CONNECTION=url,
        OS_API__AUTH_STRATEGY="noauth2",
    )
    proc = None
    try:
        if manage:
            # Both schemas, as when both serve one database.
            subprocess.run(
                [os.path.abspath(manage), "db", "sync"],
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
        rate = float(dict(s.split("=") for s in args.start_at).get(label, args.start))
        ladder = Ladder(label, command, proc, netloc, uuids, rate)
        step(ladder.hosts, netloc, rate, 10, args.clients)  # warm-up
        yield ladder
    finally:
        if proc is not None:
            cloud_day.stop(proc)
        if not mysql:
            cloud_day.drop_database(name)


class Ladder:
    """One server's rising rates: the current rate, the best held, the
    steps so far and the failed steps at the current rate."""

    def __init__(self, label, command, proc, netloc, uuids, rate):
        self.label, self.command, self.proc, self.netloc = label, command, proc, netloc
        # The hosts in turn, from one step to the next.
        self.hosts = itertools.cycle([Host(n, rp) for n, rp in enumerate(uuids)])
        self.rate, self.best, self.steps, self.failed = rate, None, [], 0

    def climb(self, args, database):
        """One step at the current rate; whether the ladder goes on. The
        rate rises when the step holds (p99 under the bar, no error, the
        offered rate achieved); the ladder ends after ``--tries`` steps at
        one rate failed (on a shared machine one burst of other work can
        spoil a step)."""
        before = procfs.cpu_split(self.proc.pid, database)
        results, sent, wall = step(
            self.hosts, self.netloc, self.rate, args.step_seconds, args.clients
        )
        after = procfs.cpu_split(self.proc.pid, database)
        figures = summary(
            self.rate, results, sent, wall, {k: after[k] - before[k] for k in after}
        )
        figures["loadavg"] = os.getloadavg()[0]
        print("%s: %s" % (self.label, json.dumps(figures)), flush=True)
        self.steps.append(figures)
        if (
            figures["p99_ms"] < args.p99_ms
            and not figures["errors"]
            and figures["achieved_reports_per_s"] >= self.rate * 0.95
        ):
            self.best, self.failed = self.rate, 0
            self.rate = round(self.rate * args.factor, 1)
            return True
        self.failed += 1
        return self.failed < args.tries

    def found(self):
        return {
            "label": self.label,
            "command": self.command,
            "sustained_reports_per_s": self.best,
            "steps": self.steps,
        }


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
    parser.add_argument(
        "--start-at",
        action="append",
        default=[],
        metavar="LABEL=RATE",
        help="a server's own --start",
    )
    parser.add_argument(
        "--private-mysql",
        metavar="DIR",
        help="load and serve a MariaDB of the tool's own under DIR (e.g. "
        "/dev/shm), so that the database's CPU is the benchmark's alone; "
        "else the machine's (root@127.0.0.1:3306)",
    )
    parser.add_argument("--factor", type=float, default=1.4)
    parser.add_argument("--step-seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=32, help="connections")
    parser.add_argument("--p99-ms", type=float, default=100.0)
    parser.add_argument(
        "--tries", type=int, default=2, help="steps at a rate before it fails"
    )
    parser.add_argument("--out")
    args = parser.parse_args()
    out = {"hosts": args.hosts, "instances": args.instances, "servers": []}
    mysql = None
    if args.private_mysql:
        mysql = private_mariadb.PrivateMariaDB(
            base=args.private_mysql,
            options=private_mariadb.DEBIAN + ("--innodb-buffer-pool-size=2G",),
        )
        mysql.start()
    try:
        with tempfile.TemporaryDirectory() as log_dir, contextlib.ExitStack() as stack:
            ladders = []
            for spec in args.server:
                label, _, command = spec.partition("=")
                manage = args.reference_manage if label == "reference" else None
                ladders.append(
                    stack.enter_context(
                        serving(label, command, args, log_dir, mysql, manage)
                    )
                )
            # The servers' steps alternate: the same moments of a shared
            # machine for each.
            database = mysql.proc.pid if mysql else None
            climbing = list(ladders)
            while climbing:
                climbing = [
                    ladder for ladder in climbing if ladder.climb(args, database)
                ]
            out["servers"] = [ladder.found() for ladder in ladders]
    finally:
        if mysql:
            mysql.close()
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
