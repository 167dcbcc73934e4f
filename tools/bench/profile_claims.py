"""Time, count and profile the claims of the shared benchmark in-process.

Like the benchmark's ``claims`` scenario: providers each with VCPU
inventory, and claims of ``GET /allocation_candidates?resources=VCPU:<n>
&limit=5`` (1.38) then ``PUT /allocations/{new consumer}`` with one of the
candidates, a new project and user, ``consumer_type`` and
``consumer_generation: null``; a 409 retries the claim. The database is
bulk-loaded (profile_request.py's loader) and our WSGI app called
directly, so the figures are our request path alone. Prints per request
kind the median wall and CPU time and the SQL statements per request;
``--threads`` runs the claims from that many threads at once (the
generation races of the benchmark: 409s, internal retries);
``--profile`` (one thread) adds a cProfile of all the claims, timed in
CPU (thread) time so that waiting for the database does not count:

    .venv/bin/python tools/bench/profile_claims.py --db mysql --claims 300
    .venv/bin/python tools/bench/profile_claims.py --db mysql --threads 8
    .venv/bin/python tools/bench/profile_claims.py --db mysql --profile
"""

import argparse
import collections
import cProfile
import json
import os
import pstats
import random
import statistics
import sys
import threading
import time
import uuid

sys.path.insert(0, __file__.rsplit("/", 3)[0])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_request  # noqa: E402

from placement import deploy  # noqa: E402
from placement import events  # noqa: E402
from placement.cmd import api  # noqa: E402
from tests import wsgi_client  # noqa: E402

HEADERS = {
    "x-auth-token": "admin",
    "accept": "application/json",
    "openstack-api-version": "placement 1.38",
}


class Claims:
    """Runs claims against ``app``, recording per request kind the wall
    and CPU (thread) time and the statements executed."""

    def __init__(self, app, engine, vcpu, retries):
        self.app = app
        self.query = "/allocation_candidates?resources=VCPU:%d&limit=5" % vcpu
        self.retries = retries
        self.wall = collections.defaultdict(list)
        self.cpu = collections.defaultdict(list)
        self.statements = collections.defaultdict(collections.Counter)
        self.outcome = collections.Counter()
        self.local = threading.local()
        profile_request.sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *args):
        self.local.count = getattr(self.local, "count", 0) + 1

    def _call(self, kind, path, method="GET", body=None):
        before = getattr(self.local, "count", 0)
        start, start_cpu = time.perf_counter(), time.thread_time()
        resp = wsgi_client.call(self.app, path, method, body, headers=HEADERS)
        self.cpu[kind].append(time.thread_time() - start_cpu)
        self.wall[kind].append(time.perf_counter() - start)
        self.statements[kind][getattr(self.local, "count", 0) - before] += 1
        return resp

    def claim(self):
        consumer, project, user = (str(uuid.uuid4()) for _ in range(3))
        for _ in range(1 + self.retries):
            found = self._call("GET", self.query)
            requests = found.json()["allocation_requests"]
            if not requests:
                self.outcome["no_candidates"] += 1
                return
            body = {
                "allocations": random.choice(requests)["allocations"],
                "consumer_generation": None,
                "project_id": project,
                "user_id": user,
                "consumer_type": "BENCH",
            }
            resp = self._call("PUT", "/allocations/" + consumer, "PUT", body)
            if resp.status == 204:
                self.outcome["ok"] += 1
                return
            assert resp.status == 409, (resp.status, resp.body)
            self.outcome["409 " + resp.json()["errors"][0]["code"]] += 1
        self.outcome["gave_up"] += 1

    def run(self, claims, threads):
        todo = iter(range(claims))
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    if next(todo, None) is None:
                        return
                self.claim()

        if threads == 1:  # in this thread, where a profiler runs
            worker()
            return
        workers = [threading.Thread(target=worker) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    def report(self):
        for kind in sorted(self.cpu):
            print(
                "%s: n=%d median=%.2fms cpu median=%.2fms mean=%.2fms "
                "statements %s"
                % (
                    kind,
                    len(self.cpu[kind]),
                    statistics.median(self.wall[kind]) * 1000,
                    statistics.median(self.cpu[kind]) * 1000,
                    statistics.mean(self.cpu[kind]) * 1000,
                    dict(sorted(self.statements[kind].items())),
                )
            )
        print("outcome: %s" % json.dumps(dict(self.outcome), sort_keys=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # galera: the cluster of PLACEMENT_TEST_GALERA_DIR (python -m
    # tests.galera start DIR), claims through its last node.
    parser.add_argument("--db", choices=("sqlite", "mysql", "galera"), default="sqlite")
    parser.add_argument("--providers", type=int, default=100)
    parser.add_argument("--vcpu-total", type=int, default=64)
    parser.add_argument("--vcpu", type=int, default=8, help="VCPU per claim")
    parser.add_argument("--claims", type=int, default=500)
    parser.add_argument("--retries", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-lines", type=int, default=60)
    parser.add_argument(
        "--profile-out", help="also write the raw profile here (for pstats' callees)"
    )
    args = parser.parse_args()
    if args.profile and args.threads != 1:
        parser.error("--profile profiles one thread: --threads 1")

    conf = profile_request.noauth_conf()
    with profile_request.fresh_database(args.db, conf) as (url, db):
        conf.set_override("connection", url, group="placement_database")
        loader = profile_request.Loader(db)
        for i in range(args.providers):
            loader.provider("claims-%d" % i, {"VCPU": {"total": args.vcpu_total}})
        loader.flush()
        app = deploy.build_app(conf, db=db, sync_schema=False)
        api.tune_gc()  # as placement-api does in every worker
        claims = Claims(app, db.engine, args.vcpu, args.retries)
        retries = collections.Counter()
        events_retry = events.conflict_retry

        def counted_retry():
            retries["internal"] += 1
            events_retry()

        events.conflict_retry = counted_retry
        profiler = cProfile.Profile(time.thread_time) if args.profile else None
        start = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        claims.run(args.claims, args.threads)
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - start
        claims.report()
        print(
            "%.1f claims/s, internal retries %d"
            % (claims.outcome["ok"] / wall, retries["internal"])
        )
        if profiler is not None:
            if args.profile_out:
                profiler.dump_stats(args.profile_out)
            stats = pstats.Stats(profiler).strip_dirs()
            stats.sort_stats("cumulative").print_stats(args.profile_lines)
            stats.sort_stats("tottime").print_stats(args.profile_lines)


if __name__ == "__main__":
    main()
