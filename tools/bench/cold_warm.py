"""The cold and the warm request of each shape, as a fresh worker sees them.

Builds the app on a kept database (``scale.py --keep``'s ``--url``) as
placement-api's master does (``build_served_app``: the catalog read
before the fork), then per round and shape forks a child, as the server
forks a worker, which answers the shape's request once (cold: it plans
and walks its trees afresh) and ``--warm`` more times (warm: the
candidates its first request kept). Prints the child's CPU per request
(process_time) and the sha256 of each body; ``--out`` writes them as
JSON, ``--profile SHAPE`` a cProfile of that shape's cold request.

    .venv/bin/python tools/bench/cold_warm.py --url 'mysql+pymysql://...' \\
        --rounds 3 --out /tmp/cold-warm.json
"""

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

import profile_request  # noqa: E402  (call)
import scale  # noqa: E402  (the shapes)

from placement import deploy  # noqa: E402
from placement.cmd import api  # noqa: E402
from placement.db import api as db_api  # noqa: E402
from placement.objects.catalog import refresh  # noqa: E402


def shapes():
    paths = scale.shapes(scale.aggregate_uuid(7))
    paths["two_groups"] = scale.TWO_GROUPS
    return paths


def worker(db, app, path, warm, profile):
    """[(cpu ms, sha256)] of the cold request, then ``warm`` warm ones."""
    deploy.warm_catalog(db)  # as placement-api's worker_ready
    # and its follower, which compares the catalog while the worker is
    # idle (else the first request would, on a connection of its own).
    refresh.verify_if_due(db, ahead=3600)
    out = []
    for n in range(1 + warm):
        profiler = cProfile.Profile() if profile and n == 0 else None
        start = time.process_time()
        if profiler:
            profiler.enable()
        status, body = profile_request.call(app, path, "1.39")
        if profiler:
            profiler.disable()
        cpu = (time.process_time() - start) * 1000
        if not status.startswith("200"):
            raise SystemExit("%s: %s %s" % (path, status, body[:300]))
        out.append((round(cpu, 2), hashlib.sha256(body).hexdigest()))
        if profiler:
            pstats.Stats(profiler, stream=sys.stderr).sort_stats(
                "cumulative"
            ).print_stats(45)
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(
                30
            )
    return out


def forked(db, app, path, warm, profile):
    """``worker`` in a child process forked from this one."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            found = worker(db, app, path, warm, profile)
            os.write(write, json.dumps(found).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--shape", action="append", help="only these shapes")
    parser.add_argument("--profile", help="cProfile this shape's cold request")
    parser.add_argument("--out")
    args = parser.parse_args()
    conf = profile_request.noauth_conf(api.serve_opts)
    conf.set_override("connection", args.url, group="placement_database")
    db = db_api.Database(db_api.create_engine(args.url, conf), conf)
    start = time.process_time()
    app = api.build_served_app(conf, db)
    print("master: %.1f s CPU to serve" % (time.process_time() - start), flush=True)
    paths = {k: v for k, v in shapes().items() if not args.shape or k in args.shape}
    results = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, path in paths.items():
            found = forked(db, app, path, args.warm, args.profile == name)
            results[name].append(found)
            print(
                "%-10s cold %7.1f ms  warm %s  %s"
                % (
                    name,
                    found[0][0],
                    " ".join("%.1f" % cpu for cpu, _ in found[1:]),
                    found[0][1][:12],
                ),
                flush=True,
            )
    summary = {}
    for name, rounds in results.items():
        digests = {digest for found in rounds for _, digest in found}
        summary[name] = {
            "cold_cpu_ms": statistics.median(found[0][0] for found in rounds),
            "warm_cpu_ms": statistics.median(
                cpu for found in rounds for cpu, _ in found[1:]
            ),
            "sha256": sorted(digests),
        }
        print(
            "%-10s cold median %7.1f ms  warm median %6.1f ms  bodies %s"
            % (
                name,
                summary[name]["cold_cpu_ms"],
                summary[name]["warm_cpu_ms"],
                ",".join(d[:12] for d in summary[name]["sha256"]),
            )
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "rounds": results}, f, indent=1)


if __name__ == "__main__":
    main()
