"""Database fail-over as kolla-ansible and openstack-ansible deploy it.

haproxy sends every database connection to one node of a 3-node Galera
cluster, the other two being ``backup`` servers; a clustercheck per node (an
HTTP answer of 200 only while the node is Synced) tells haproxy which are
up, with kolla's check timing. Two placement-api servers use that haproxy
while client threads claim and release resources through both. The active
node is killed with SIGKILL, then started again and rejoins.

What clients observe: every failure is a JSON 503 with Retry-After (no
500, no other status, no broken connection); claims succeed again within
15 s of the kill; no acknowledged claim is lost and no provider is over
capacity; the rejoined node holds the same data as the others.

The cluster is a private one (tests/galera.py, its own ports): the suite's
shared cluster may serve other Galera tests at the same time. Run with
``-s`` for the statuses and the time claims took to come back.
"""

import collections
import contextlib
import http.server
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time

import pymysql
import pytest
import requests

from tests import galera
from tests import ports
from tests.functional import live_server
from tests.functional import test_concurrency

pytestmark = [pytest.mark.slow, pytest.mark.galera]

DATABASE = "placement"
THREADS = 4
HOLD = 5  # claims a client holds before it releases its oldest
BACK_WITHIN = 15  # seconds from the kill to the next successful claim
HANG_GUARD = 90


def _require():
    if galera.available() and shutil.which("haproxy", path="/usr/sbin:/usr/bin"):
        return
    if os.environ.get("PLACEMENT_REQUIRE_MYSQL") == "1":
        pytest.fail("the fail-over test needs MariaDB Galera, rsync and haproxy")
    pytest.skip("no MariaDB Galera or haproxy on this machine")


def _port(url):
    return int(url.rsplit(":", 1)[1])


def _query(port, sql, database=None):
    conn = pymysql.connect(
        host="127.0.0.1", port=port, user="root", database=database, connect_timeout=2
    )
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


class _Clustercheck(http.server.BaseHTTPRequestHandler):
    """What a clustercheck script answers haproxy's HTTP check: 200 while
    the node is Synced (wsrep_local_state 4), 503 otherwise."""

    sql_port = 0

    def do_OPTIONS(self):
        try:
            rows = _query(self.sql_port, "SHOW STATUS LIKE 'wsrep_local_state'")
            synced = rows and rows[0][1] == "4"
        except pymysql.err.MySQLError:
            synced = False
        self.send_response(200 if synced else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_OPTIONS

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _clusterchecks(urls):
    """One clustercheck HTTP server per node; yields their ports."""
    servers = []
    try:
        for url in urls:
            handler = type("Check", (_Clustercheck,), {"sql_port": _port(url)})
            server = http.server.ThreadingHTTPServer(
                ("127.0.0.1", ports.free_port()), handler
            )
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
        yield [s.server_address[1] for s in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


HAPROXY = """\
global
    maxconn 1000
defaults
    mode tcp
    timeout connect 2s
    timeout client 3600s
    timeout server 3600s
    retries 3
listen mariadb
    bind 127.0.0.1:{port}
    option tcpka
    option httpchk
{servers}
"""


def _uncaught(workdir):
    """The servers' logged tracebacks, to say why an answer was a 500."""
    found = []
    for name in sorted(os.listdir(workdir)):
        if name.startswith("server-") and name.endswith(".log"):
            with open(os.path.join(workdir, name), errors="replace") as log:
                text = log.read()
            start = text.find("Uncaught exception")
            if start >= 0:
                found.append("%s: %s" % (name, text[start : start + 6000]))
    return found


@contextlib.contextmanager
def _haproxy(workdir, urls, check_ports):
    """haproxy in front of the nodes, the first active and the others
    backups (kolla-ansible's layout and check timing); yields its port."""
    port = ports.free_port()
    servers = "\n".join(
        "    server node%d 127.0.0.1:%d check port %d inter 2000 rise 2 fall 5%s"
        % (n, _port(url), check, " backup" if n > 1 else "")
        for n, (url, check) in enumerate(zip(urls, check_ports), 1)
    )
    config = os.path.join(workdir, "haproxy.cfg")
    with open(config, "w") as f:
        f.write(HAPROXY.format(port=port, servers=servers))
    with open(os.path.join(workdir, "haproxy.log"), "wb") as log:
        proc = subprocess.Popen(
            ["haproxy", "-db", "-f", config],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin"),
        )
    try:
        # Up once the active node passed its checks and answers through it.
        _until(lambda: _node_behind(port) == "node1", 30, "haproxy to reach node1")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _node_behind(port):
    try:
        return _query(port, "SELECT @@wsrep_node_name")[0][0]
    except pymysql.err.MySQLError:
        return None


def _until(check, timeout, what):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.2)


class Tally:
    """What the clients observed."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acknowledged = {}  # consumer -> (provider, resources)
        self.uncertain = {}  # answered 503: may or may not have happened
        self.refused = set()  # claims answered 409
        self.statuses = collections.Counter()
        self.successes = []  # monotonic times of acknowledged claims
        self.problems = []

    def record(self, what, response):
        status = response.status_code
        with self.lock:
            self.statuses[what, status] += 1
            if status == 503:
                try:
                    error = response.json()["errors"][0]
                    clean = error["status"] == 503 and error["code"]
                except (ValueError, KeyError, IndexError, TypeError):
                    clean = False
                if not clean or not response.headers.get("Retry-After"):
                    self.problems.append((what, status, response.text[:300]))
            elif status == 409 and what == "claim":
                try:
                    code = response.json()["errors"][0]["code"]
                except (ValueError, KeyError, IndexError, TypeError):
                    code = None
                if code not in (
                    "placement.undefined_code",
                    "placement.concurrent_update",
                ):
                    self.problems.append((what, status, response.text[:300]))
            elif status not in (200, 204):
                self.problems.append((what, status, response.text[:300]))

    def successes_after(self, moment):
        with self.lock:
            return [t for t in self.successes if t > moment]


def _client(bases, providers, tally, seed, stop):
    rnd = random.Random(seed)
    mine = []
    with requests.Session() as session:
        session.headers.update(test_concurrency.HEADERS)
        n = 0
        while not stop.is_set():
            n += 1
            base = bases[n % len(bases)]
            try:
                if len(mine) >= HOLD:
                    consumer = mine.pop(0)
                    response = session.delete(
                        base + "/allocations/" + consumer, timeout=HANG_GUARD
                    )
                    tally.record("delete", response)
                    with tally.lock:
                        claim = tally.acknowledged.pop(consumer)
                        if response.status_code != 204:
                            tally.uncertain[consumer] = claim
                    continue
                consumer, rp, resources, response = test_concurrency.random_claim(
                    session, base, providers, rnd, timeout=HANG_GUARD
                )
            except requests.RequestException as e:
                with tally.lock:
                    tally.problems.append(("request", repr(e)))
                continue
            tally.record("claim", response)
            with tally.lock:
                if response.status_code == 204:
                    tally.acknowledged[consumer] = (rp, resources)
                    tally.successes.append(time.monotonic())
                    mine.append(consumer)
                elif response.status_code == 409:
                    tally.refused.add(consumer)
                else:
                    tally.uncertain[consumer] = (rp, resources)


def _check_allocations(base, providers, tally):
    """Through the API: every acknowledged claim is there as it was made,
    nothing else but claims whose answer was a 503, no refused claim, and
    no provider over its capacity."""
    found = {}
    with requests.Session() as session:
        session.headers.update(test_concurrency.HEADERS)
        for rp in providers:
            usages = session.get(base + "/resource_providers/%s/usages" % rp)
            assert usages.status_code == 200, usages.text
            allocations = session.get(base + "/resource_providers/%s/allocations" % rp)
            assert allocations.status_code == 200, allocations.text
            total = collections.Counter()
            for consumer, entry in allocations.json()["allocations"].items():
                found[consumer] = (rp, entry["resources"])
                total.update(entry["resources"])
            for rc, capacity in test_concurrency.CAPACITY.items():
                used = usages.json()["usages"][rc]
                assert used <= capacity, (rp, rc, used)
                assert used == total[rc], (rp, rc, used, total)
    lost = set(tally.acknowledged) - set(found)
    assert not lost, "acknowledged claims lost: %s" % sorted(lost)
    for consumer, claim in found.items():
        made = tally.acknowledged.get(consumer) or tally.uncertain.get(consumer)
        assert made == claim, (consumer, claim, made)
    assert not tally.refused & set(found)


def _contents(url):
    """Every row of the placement database on one node, once the node has
    applied everything the cluster committed (a causal read)."""
    conn = pymysql.connect(
        host="127.0.0.1", port=_port(url), user="root", database=DATABASE
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION wsrep_sync_wait = 1")
            cur.execute("SHOW TABLES")
            tables = [row[0] for row in cur.fetchall()]
            contents = {}
            for table in tables:
                cur.execute("SELECT * FROM `%s`" % table)
                contents[table] = sorted(cur.fetchall(), key=repr)
            return contents
    finally:
        conn.close()


def test_claims_survive_the_active_node_dying_and_rejoining(tmp_path):
    _require()
    # Not under tmp_path: the servers run as the mysql user, which must
    # reach their data directories.
    base = tempfile.mkdtemp(prefix="placement-failover-")
    workdir = str(tmp_path)
    try:
        nodes = galera.start(base)
        _query(
            _port(nodes[0]),
            "CREATE DATABASE %s CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" % DATABASE,
        )
        providers = test_concurrency._create_providers(
            "%s/%s?charset=utf8mb4" % (nodes[0], DATABASE)
        )
        with contextlib.ExitStack() as stack:
            checks = stack.enter_context(_clusterchecks(nodes))
            proxy = stack.enter_context(_haproxy(workdir, nodes, checks))
            db_url = "mysql+pymysql://root@127.0.0.1:%d/%s?charset=utf8mb4" % (
                proxy,
                DATABASE,
            )
            bases = [
                stack.enter_context(
                    live_server.placement_api(
                        workdir,
                        "--workers",
                        "2",
                        OS_PLACEMENT_DATABASE__CONNECTION=db_url,
                    )
                )
                for _ in range(2)
            ]
            tally, stop = Tally(), threading.Event()
            clients = [
                threading.Thread(
                    target=_client, args=(bases, providers, tally, seed, stop)
                )
                for seed in range(THREADS)
            ]
            for client in clients:
                client.start()
            try:
                _until(lambda: len(tally.successes_after(0)) >= 30, 30, "claims")
                killed = time.monotonic()
                galera.kill(base, 1)
                _until(lambda: tally.successes_after(killed), HANG_GUARD, "a claim")
                back = tally.successes_after(killed)[0] - killed
                galera.rejoin(base, 1, nodes[0], donor="node3")
                rejoined = time.monotonic()
                # haproxy sends new connections to the active node again.
                _until(lambda: _node_behind(proxy) == "node1", 30, "node1 in haproxy")
                _until(
                    lambda: len(tally.successes_after(rejoined)) >= 30,
                    HANG_GUARD,
                    "claims after the rejoin",
                )
            finally:
                stop.set()
                for client in clients:
                    client.join()
            print(
                "\n[failover] claims back %.1f s after the kill; statuses %s"
                % (back, dict(tally.statuses))
            )
            assert not tally.problems, (tally.problems[:5], _uncaught(workdir))
            assert back < BACK_WITHIN
            _check_allocations(bases[0], providers, tally)
        first, *others = [_contents(url) for url in nodes]
        assert first["allocations"]
        for other in others:
            assert other == first
    finally:
        galera.stop(base)
