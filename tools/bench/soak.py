"""Soak: a long cloud day on MariaDB, watching the server for leaks.

Starts one server command (cloud_day.py's conventions; by default this
tree's ``placement-api --workers 2 --threads 10`` on a fresh database of
the MariaDB server at 127.0.0.1:3306), registers ``--hosts`` hosts and
runs cloud_day.py's traffic for ``--duration`` seconds (20 minutes). Every
``--every`` seconds it samples, for the server's master and each worker
process (read from /proc): resident memory and open file descriptors; the
database connections the server holds (MariaDB's processlist for its
database); and the requests answered and 5xx so far. Afterwards it checks
that every provider's usage equals its allocations and is within capacity.

The summary compares the first minute after ``--warmup`` seconds with the
last minute: worker RSS growth (the bar is under 10 %), descriptors and
connections (flat), 5xx (0) and the consistency check. Not part of CI; run
it at low priority on a shared machine, from the repository:

    nice -n 10 .venv/bin/python tools/bench/soak.py \\
        --out tools/bench/results/soak-$(git rev-parse --short HEAD).json
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import pymysql

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cloud_day  # noqa: E402
import procfs  # noqa: E402

DEFAULT_SERVER = (
    "exec .venv/bin/placement-api --db-sync --port $PORT --workers 2 --threads 10"
)
WINDOW = 60  # seconds compared at the start (after warm-up) and the end
RSS_GROWTH_LIMIT = 10.0  # per cent
# What each sample prints as it is taken.
SHOWN = ("t", "worker_rss_mib", "fds", "db_connections", "requests", "5xx_or_error")


def children(pid):
    """The pids whose parent is ``pid``."""
    return sorted(other for other, fields in procfs.stats() if int(fields[1]) == pid)


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def db_connections(database):
    conn = pymysql.connect(**cloud_day.MYSQL)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = %s",
                (database,),
            )
            return cur.fetchone()[0]
    finally:
        conn.close()


def sample(running, stats, t):
    master = running.proc.pid
    workers = children(master)
    processes = {}
    for pid in [master] + workers:
        try:
            processes[pid] = {"rss_mib": rss_mib(pid), "fds": open_fds(pid)}
        except OSError:
            pass  # a worker that just exited
    with stats.lock:
        answered = sum(stats.statuses.values())
        errors = sum(
            n
            for (_, status), n in stats.statuses.items()
            if status == "error" or int(status) >= 500
        )
    return {
        "t": round(t, 1),
        "master": master,
        "workers": workers,
        "processes": {str(pid): p for pid, p in processes.items()},
        "worker_rss_mib": round(
            sum(processes[p]["rss_mib"] for p in workers if p in processes), 1
        ),
        "fds": sum(p["fds"] for p in processes.values()),
        "db_connections": db_connections(running.database),
        "requests": answered,
        "5xx_or_error": errors,
    }


def _mean(samples, key):
    return round(sum(s[key] for s in samples) / len(samples), 1)


def summarize(samples, warmup):
    """Start (first minute after warm-up) against end (last minute)."""
    settled = [s for s in samples if s["t"] >= warmup]
    first = [s for s in settled if s["t"] < settled[0]["t"] + WINDOW]
    last = [s for s in settled if s["t"] > settled[-1]["t"] - WINDOW]
    summary = {}
    for key in ("worker_rss_mib", "fds", "db_connections"):
        start, end = _mean(first, key), _mean(last, key)
        summary[key] = {
            "after_warmup": start,
            "end": end,
            "min": min(s[key] for s in settled),
            "max": max(s[key] for s in settled),
            "growth_pct": round(100.0 * (end - start) / start, 1) if start else None,
        }
    summary["workers_replaced"] = len({tuple(s["workers"]) for s in samples}) > 1
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="server command")
    parser.add_argument("--warmup", type=float, default=120)
    parser.add_argument("--every", type=float, default=10)
    cloud_day.add_day_arguments(parser, duration=1200)
    args = parser.parse_args()
    if args.log_dir is None:
        args.log_dir = tempfile.mkdtemp(prefix="soak-logs-")
    result = {"args": vars(args)}
    with cloud_day.server(args.server, "soak", args.log_dir) as running:
        cloud = cloud_day.Cloud(running.base)
        registering = cloud_day.Stats()
        result.update(cloud_day.register_all(cloud, registering, args))
        result["register_5xx_or_error"] = sum(
            n
            for (_, status), n in registering.statuses.items()
            if status == "error" or int(status) >= 500
        )
        stats, stop = cloud_day.Stats(), threading.Event()
        threads, claims = cloud_day.start_day(cloud, stats, args, stop)
        started = time.monotonic()
        samples = []
        while True:
            t = time.monotonic() - started
            samples.append(sample(running, stats, t))
            print(json.dumps({k: samples[-1][k] for k in SHOWN}), flush=True)
            if t >= args.duration:
                break
            time.sleep(min(args.every, args.duration - t))
        stop.set()
        for thread in threads:
            thread.join(180)
        checked, problems = cloud_day.consistency(cloud)
    summary = summarize(samples, args.warmup)
    summary.update(
        {
            "requests": samples[-1]["requests"],
            "claims": claims[True],
            "5xx_or_error": samples[-1]["5xx_or_error"],
            "errors": stats.errors[:5],
            "providers_checked": checked,
            "consistency": "ok" if not problems else problems[:10],
        }
    )
    growth = summary["worker_rss_mib"]["growth_pct"]
    summary["passed"] = (
        growth is not None
        and growth < RSS_GROWTH_LIMIT
        and summary["5xx_or_error"] == 0
        and result["register_5xx_or_error"] == 0
        and not problems
    )
    result["summary"] = summary
    result["samples"] = samples
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
