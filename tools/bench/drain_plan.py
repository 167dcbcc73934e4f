"""A drain plan at scale (issue 39): ``GET /maintenance/drain`` for 40
hosts holding 200 consumers in a cloud of ``--hosts`` hosts.

1. Loads a fresh MariaDB database as tools/bench/scale.py does (its
   ``load``: hosts with VCPU, MEMORY_MB and DISK_GB, half of them with 1-8
   instances of three flavors), or serves one a ``scale.py --keep`` run
   left (``--url``).
2. Picks the first 40 hosts (by name) holding exactly 5 consumers each:
   200 consumers.
3. Starts ``placement-api`` (``--workers`` x ``--threads``) on it and
   times, over HTTP from this process, the plan of those 40 hosts with
   each strategy (``--runs`` each after one warm-up; median and all
   runs), with the server's CPU per plan; checks every move against the
   database's free capacity (before the plan) and that no two moves
   over-fill a host together.
4. Prints the figures and an abbreviated answer; writes them as JSON
   (``--out``).

    .venv/bin/python tools/bench/drain_plan.py --hosts 10000
    .venv/bin/python tools/bench/drain_plan.py --url '<scale.py --keep url>' \\
        --out tools/bench/results/drain-100000-<commit>.json
"""

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import time

import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

import procfs  # noqa: E402
import profile_request  # noqa: E402  (server, fresh databases)
import scale  # noqa: E402  (load, session, group CPU)

from placement import conf as placement_conf  # noqa: E402

DRAINED = 40
PER_HOST = 5
TARGET_S = 2.0


def drained_hosts(url):
    """The uuids of the first DRAINED hosts by name holding PER_HOST
    consumers each."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT rp.uuid FROM resource_providers rp"
                    " JOIN allocations a ON a.resource_provider_id = rp.id"
                    " GROUP BY rp.id, rp.uuid, rp.name"
                    " HAVING COUNT(DISTINCT a.consumer_id) = :n"
                    " ORDER BY rp.name LIMIT :k"
                ),
                {"n": PER_HOST, "k": DRAINED},
            ).all()
    finally:
        engine.dispose()
    return [uuid for (uuid,) in rows]


def free_before(url, uuids):
    """{(provider uuid, class): free} of every provider named in
    ``uuids``, from the database."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT rp.uuid, rc.name, i.total, i.reserved,"
                    " i.allocation_ratio, COALESCE((SELECT SUM(a.used)"
                    " FROM allocations a WHERE a.resource_provider_id = rp.id"
                    " AND a.resource_class_id = i.resource_class_id), 0)"
                    " FROM resource_providers rp"
                    " JOIN inventories i ON i.resource_provider_id = rp.id"
                    " JOIN resource_classes rc ON rc.id = i.resource_class_id"
                    " WHERE rp.uuid IN :uuids"
                ).bindparams(sa.bindparam("uuids", expanding=True)),
                {"uuids": sorted(uuids)},
            ).all()
    finally:
        engine.dispose()
    return {
        (u, rc): int((total - reserved) * ratio) - int(used)
        for u, rc, total, reserved, ratio, used in rows
    }


def check(url, plan):
    """Problems of ``plan``: moves that together take more than a
    provider had free, or that land in a drained tree."""
    drained = {d["uuid"] for d in plan["drained"]}
    taken = collections.Counter()
    for move in plan["moves"]:
        for rp, held in move["allocations"].items():
            if rp in move["kept"]:
                continue
            for rc, n in held["resources"].items():
                taken[rp, rc] += n
    free = free_before(url, {rp for rp, _ in taken})
    problems = [
        "%s %s: plan takes %d, %d free" % (rp, rc, n, free.get((rp, rc), 0))
        for (rp, rc), n in taken.items()
        if n > free.get((rp, rc), 0)
    ]
    problems += [
        "%s moves into drained %s" % (m["consumer"], m["target"]["uuid"])
        for m in plan["moves"]
        if m["target"]["uuid"] in drained
    ]
    return problems


def abbreviated(plan):
    """The answer with its first two moves (and unplaced) only."""
    return dict(
        plan,
        drained=plan["drained"][:2] + ["... %d in all" % len(plan["drained"])],
        moves=plan["moves"][:2] + ["... %d in all" % len(plan["moves"])],
        unplaced=plan["unplaced"][:2],
    )


def measure(args, url):
    figures = {}
    hosts = drained_hosts(url)
    if len(hosts) < DRAINED:
        raise SystemExit("only %d hosts hold %d consumers" % (len(hosts), PER_HOST))
    path = "/maintenance/drain?providers=" + ",".join(hosts)
    with profile_request.server(url, args.workers, args.threads, 2) as (base, pgid):
        s = scale.session()
        scale.ready(
            base, time.perf_counter(), "/allocation_candidates?resources=VCPU:1&limit=1"
        )
        pids = [pid for pid, _ in procfs.group(pgid)]
        for strategy in ("first", "spread", "pack"):
            url_ = base + path + "&strategy=" + strategy
            scale.timed(s, url_)  # warm-up: each worker's catalog, imports
            runs, cpu = [], []
            for _ in range(args.runs):
                before = scale.group_cpu(pids)
                elapsed, response = scale.timed(s, url_)
                cpu.append(scale.group_cpu(pids) - before)
                runs.append(elapsed)
            plan = response.json()
            figures[strategy] = {
                "median_s": round(statistics.median(runs), 3),
                "runs_s": [round(r, 3) for r in runs],
                "server_cpu_s": round(statistics.median(cpu), 3),
                "totals": plan["totals"],
                "problems": check(url, plan)[:20],
            }
            print(
                "%-6s %d consumers: %d placed, %d left; median %.3f s "
                "(runs %s), server CPU %.3f s, %d problems"
                % (
                    strategy,
                    plan["totals"]["consumers"],
                    plan["totals"]["placed"],
                    plan["totals"]["left"],
                    figures[strategy]["median_s"],
                    ", ".join("%.3f" % r for r in runs),
                    figures[strategy]["server_cpu_s"],
                    len(figures[strategy]["problems"]),
                )
            )
            if strategy == "first":
                figures["example"] = abbreviated(plan)
    figures["request"] = "GET /maintenance/drain?providers=<%d uuids>" % len(hosts)
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100000)
    parser.add_argument("--aggregates", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--url", help="serve this loaded database (scale.py --keep)")
    parser.add_argument("--out", help="write the figures here as JSON")
    args = parser.parse_args()
    figures = {"hosts": args.hosts, "workers": args.workers, "threads": args.threads}
    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            conf = placement_conf.command_conf()
            placement_conf.parse_args(conf, [], default_config_files=[])
            url, db = stack.enter_context(profile_request.fresh_database("mysql", conf))
            start = time.perf_counter()
            figures["instances"] = scale.load(db, args.hosts, args.aggregates)
            figures["load_s"] = round(time.perf_counter() - start, 1)
            db.engine.dispose()
            print("loaded %d hosts in %.1f s" % (args.hosts, figures["load_s"]))
        figures.update(measure(args, url))
    figures["met"] = all(
        figures[s]["median_s"] < TARGET_S and not figures[s]["problems"]
        for s in ("first", "spread", "pack")
    )
    print("under %.0f s with no problem: %s" % (TARGET_S, figures["met"]))
    print(json.dumps(figures["example"], indent=1)[:3000])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
