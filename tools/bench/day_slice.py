"""The day slice of issue 37, for ``scale.py --day``: on a loaded cloud,
``--servers`` placement-api processes (API hosts, each on its own port,
``--workers`` workers each), two clients looping over nova's
``limit=1000`` request of the four shapes (flat, trait, forbidden trait,
member_of), and one scheduler that asks ``resources=VCPU:1,MEMORY_MB:1024
&limit=20`` and claims a random candidate for a new consumer, at most
5 times a second, for ``--day`` seconds.

Measured: the candidate requests' p50/p99, claims per second achieved
(and refused), CPU per process from /proc (every server's process group,
the database server, this client) over the slice and over an idle
stretch before it; with ``--profile``, where the database's time went,
by statement, from MariaDB's slow log (``long_query_time = 0`` in the
servers' own sessions only, ``log_output = TABLE``; the server's settings
are put back after). The log is switched on before the servers start:
MariaDB copies ``slow_query_log`` into a session as it connects, so the
servers' pooled connections log only if it was on then (with it switched
on later, as before 2026-11-29, most statements went unlogged); their
statements are counted from the slice's start.

The database server is the one the URL names (host and port): the
machine's, or a private one (``tests.private_mariadb``, its own process,
so that its CPU is this slice's alone); its CPU is that one process's
(found by ``@@pid_file``), not every mariadbd of the machine's.
"""

import collections
import concurrent.futures
import contextlib
import os
import random
import re
import threading
import time
import urllib.parse
import uuid

import procfs
import profile_request
import pymysql
import requests

CLAIM_QUERY = "/allocation_candidates?resources=VCPU:1,MEMORY_MB:1024&limit=20"
CLAIMS_PER_S = 5
CLIENTS = 2
IDLE_S = 10
TICK = os.sysconf("SC_CLK_TCK")


def add_arguments(parser):
    parser.add_argument(
        "--day", type=float, default=0, help="run the day slice for this many s"
    )
    parser.add_argument(
        "--servers", type=int, default=1, help="placement-api processes (hosts)"
    )
    parser.add_argument(
        "--day-clients",
        type=int,
        default=CLIENTS,
        help="clients looping over the four shapes (0: the scheduler's claims"
        " alone, whose followers' cost a loaded machine otherwise starves)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="with --day: the database's time by statement (slow log)",
    )


def _cpu_of(pids):
    ticks = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / TICK


def _connect(url):
    """A root connection (autocommit) to the server ``url`` names."""
    parsed = urllib.parse.urlparse(url)
    return pymysql.connect(
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or 3306,
        user="root",
        autocommit=True,
    )


def _database_pids(url):
    """The pid of the database server ``url`` names (its pid file)."""
    conn = _connect(url)
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@pid_file")
        (path,) = cur.fetchone()
    finally:
        conn.close()
    with open(path) as f:
        return [int(f.read().strip())]


class Watch:
    """CPU seconds per role (each server's group, database, client)."""

    def __init__(self, pgids, url):
        self.roles = {"server %d" % i: pgid for i, pgid in enumerate(pgids)}
        self.db = _database_pids(url)

    def _pids(self):
        groups = collections.defaultdict(list)
        for pid, fields in procfs.stats():
            groups[int(fields[2])].append(pid)
        return groups

    def sample(self):
        groups = self._pids()
        out = {role: _cpu_of(groups[pgid]) for role, pgid in self.roles.items()}
        out["database"] = _cpu_of(self.db)
        out["client"] = _cpu_of([os.getpid()])
        return out, time.perf_counter()


def cores(before, after):
    """{role: share of one core} between two ``Watch.sample``s."""
    (a, t0), (b, t1) = before, after
    return {role: round((b[role] - a[role]) / (t1 - t0), 3) for role in a}


def _session():
    s = requests.Session()
    s.headers.update(
        {
            "x-auth-token": "admin",
            "accept": "application/json",
            "openstack-api-version": "placement 1.39",
        }
    )
    return s


def run_slice(bases, paths, seconds, clients=CLIENTS):
    """The slice itself: {"a_c": [s...], "claims": n, "refused": n, ...}."""
    stop = threading.Event()
    times = collections.defaultdict(list)
    counts = collections.Counter()
    lock = threading.Lock()

    def client(n):
        s = _session()
        order = list(paths.items())
        random.Random(n).shuffle(order)
        i = n
        while not stop.is_set():
            for name, path in order:
                if stop.is_set():
                    break
                base = bases[i % len(bases)]
                i += 1
                start = time.perf_counter()
                r = s.get(base + path, timeout=120)
                elapsed = time.perf_counter() - start
                with lock:
                    times[name].append(elapsed)
                    counts["a_c %d" % r.status_code] += 1

    def scheduler():
        s = _session()
        rnd = random.Random(7)
        started = time.perf_counter()
        n = 0
        while not stop.is_set():
            due = started + n / CLAIMS_PER_S
            now = time.perf_counter()
            if due > now:
                if stop.wait(due - now):
                    break
            n += 1
            base = bases[n % len(bases)]
            start = time.perf_counter()
            r = s.get(base + CLAIM_QUERY, timeout=120)
            with lock:
                times["scheduler"].append(time.perf_counter() - start)
            found = r.json().get("allocation_requests", []) if r.ok else []
            if not found:
                counts["no candidate"] += 1
                continue
            body = {
                "allocations": rnd.choice(found)["allocations"],
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            }
            start = time.perf_counter()
            put = s.put(base + "/allocations/" + str(uuid.uuid4()), json=body)
            with lock:
                times["claim"].append(time.perf_counter() - start)
                counts["claimed" if put.status_code == 204 else "refused"] += 1

    with concurrent.futures.ThreadPoolExecutor(clients + 1) as pool:
        futures = [pool.submit(client, n) for n in range(clients)]
        futures.append(pool.submit(scheduler))
        time.sleep(seconds)
        stop.set()
        for f in futures:
            f.result()
    return times, counts


def _digest(sql):
    sql = re.sub(r"'(?:[^'\\]|\\.)*'", "?", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "?", sql)
    sql = re.sub(r"\(\s*\?(\s*,\s*\?)*\s*\)", "(?...)", sql)
    sql = re.sub(r"(\(\?\.\.\.\)\s*,\s*)+", "", sql)
    return re.sub(r"\s+", " ", sql).strip()[:160]


@contextlib.contextmanager
def slow_log(url, database):
    """Log every statement of the servers' sessions (their URL sets
    ``long_query_time = 0`` for each session) to mysql.slow_log, from
    connections opened from now on; yields (``mark``, ``digests``):
    ``mark()`` notes the database's time, ``digests()`` gives
    {digest: (count, seconds, rows examined)} for ``database`` since the
    last mark."""
    conn = _connect(url)
    cur = conn.cursor()
    cur.execute("SELECT @@global.slow_query_log, @@global.log_output")
    was = cur.fetchone()
    cur.execute("SET GLOBAL log_output = 'TABLE'")
    cur.execute("SET GLOBAL slow_query_log = ON")
    since = []

    def mark():
        cur.execute("SELECT NOW(6)")
        since[:] = [cur.fetchone()[0]]

    def digests():
        cur.execute(
            "SELECT sql_text, TIME_TO_SEC(query_time), rows_examined"
            " FROM mysql.slow_log WHERE db = %s AND start_time >= %s",
            (database, since[0]),
        )
        out = collections.defaultdict(lambda: [0, 0.0, 0])
        for text, seconds, rows in cur.fetchall():
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            d = out[_digest(text)]
            d[0] += 1
            d[1] += float(seconds)
            d[2] += int(rows)
        return out

    mark()
    try:
        yield mark, digests
    finally:
        cur.execute("SET GLOBAL slow_query_log = %s" % int(was[0]))
        cur.execute("SET GLOBAL log_output = %s", (was[1],))
        conn.close()


# The server's counters diffed over the slice (the whole server's): its
# commands by kind, the rows its engines handed out, its network bytes.
STATUS = (
    "Questions",
    "Com_select",
    "Com_commit",
    "Com_rollback",
    "Com_begin",
    "Com_insert",
    "Com_update",
    "Com_delete",
    "Com_admin_commands",
    "Handler_commit",
    "Handler_read_key",
    "Handler_read_next",
    "Handler_read_rnd_next",
    "Bytes_received",
    "Bytes_sent",
)


def _server_figures(url, database):
    """(beat of catalog_currency or None, rows the storage engines handed
    out so far, Handler_read_*, the whole server's; {STATUS name: value})."""
    conn = _connect(url)
    try:
        cur = conn.cursor()
        cur.execute("SHOW GLOBAL STATUS")
        status = {name: int(v) for name, v in cur.fetchall() if v.isdigit()}
        rows = sum(v for name, v in status.items() if name.startswith("Handler_read_"))
        counters = {name: status.get(name, 0) for name in STATUS}
        try:
            cur.execute("SELECT beat FROM `%s`.catalog_currency" % database)
            beat = int(cur.fetchone()[0])
        except pymysql.err.ProgrammingError:
            beat = None  # before the table
        return beat, rows, counters
    finally:
        conn.close()


def _profiled(url):
    sep = "&" if "?" in url else "?"
    return url + sep + "init_command=" + "SET+SESSION+long_query_time%3D0"


def day(url, args, paths, summary_ms):
    """The slice's figures (see the module's doc)."""
    figures = {"servers": args.servers, "workers_per_server": args.workers}
    database = url.rsplit("/", 1)[1].split("?", 1)[0]
    serve_url = _profiled(url) if args.profile else url
    with contextlib.ExitStack() as stack:
        profile = stack.enter_context(slow_log(url, database)) if args.profile else None
        started = [
            stack.enter_context(
                profile_request.server(serve_url, args.workers, args.threads, 2)
            )
            for _ in range(args.servers)
        ]
        bases = [base for base, _ in started]
        s = _session()
        first = time.perf_counter()
        for base in bases:  # every server answers (its catalog read)
            while s.get(base + paths["flat"], timeout=600).status_code != 200:
                time.sleep(0.5)
        figures["ready_s"] = round(time.perf_counter() - first, 1)
        watch = Watch([pgid for _, pgid in started], url)
        time.sleep(2)
        before = watch.sample()
        time.sleep(IDLE_S)
        figures["idle_cores"] = cores(before, watch.sample())
        if profile is not None:
            profile[0]()
        before = watch.sample()
        beat, rows, status = _server_figures(url, database)
        times, counts = run_slice(bases, paths, args.day, args.day_clients)
        figures["day_cores"] = cores(before, watch.sample())
        beat_after, rows_after, status_after = _server_figures(url, database)
        figures["server_status"] = {
            name: status_after[name] - status[name] for name in STATUS
        }
        # Comparisons published by the lease holder (one per period for the
        # whole cloud), and rows the engines handed out (all databases).
        if beat is not None:
            figures["published_comparisons"] = beat_after - beat
        figures["handler_reads_per_s"] = round((rows_after - rows) / args.day)
        figures["counts"] = dict(counts)
        figures["claims_per_s"] = round(counts["claimed"] / args.day, 2)
        shapes = [v for name, v in times.items() if name in paths]
        figures["a_c"] = summary_ms([t for v in shapes for t in v] or [0])
        figures["scheduler_a_c"] = summary_ms(times["scheduler"] or [0])
        figures["claim_put"] = summary_ms(times["claim"] or [0])
        if profile is not None:
            rows = sorted(profile[1]().items(), key=lambda kv: -kv[1][1])
            total = sum(v[1] for _, v in rows) or 1
            figures["db_time_s"] = round(total, 3)
            figures["db_profile"] = [
                {
                    "statement": text,
                    "count": n,
                    "seconds": round(sec, 3),
                    "share": round(sec / total, 3),
                    "rows_examined": rows_,
                }
                for text, (n, sec, rows_) in rows[:15]
            ]
    print(
        "day slice %d x %d workers, %.0f s: a_c p50 %.1f p99 %.1f ms, claims %.2f/s"
        % (
            args.servers,
            args.workers,
            args.day,
            figures["a_c"]["p50_ms"],
            figures["a_c"]["p99_ms"],
            figures["claims_per_s"],
        )
    )
    print(
        "  published comparisons %s, Handler_read_* %d/s (whole server)"
        % (figures.get("published_comparisons"), figures["handler_reads_per_s"])
    )
    print("  cores idle: %s" % figures["idle_cores"])
    print("  cores day:  %s" % figures["day_cores"])
    for row in figures.get("db_profile", []):
        print(
            "  %6.3f s %5.1f%% %6d x %9d rows  %s"
            % (
                row["seconds"],
                100 * row["share"],
                row["count"],
                row["rows_examined"],
                row["statement"][:90],
            )
        )
    return figures
