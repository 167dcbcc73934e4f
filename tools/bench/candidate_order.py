"""Which 1,000 candidates a scheduler sees: ``[placement]
allocation_candidates_order`` against a scheduler's claims (issue 47).

**fill**: per order (``id``; ``random``, which is ``id`` with
``randomize_allocation_candidates``; ``spread``; ``pack``), a fresh
database of ``--hosts`` empty hosts (scale.py's: 256 VCPU, 252 GiB, 1,990
GB) and a scheduler that claims ``--instances`` instances of scale.py's
three flavors (a seeded mix, the same for every order) one after the
other, each time ``GET /allocation_candidates?...&limit=--limit`` and a
claim of the first candidate (as nova's weighers would among equals),
through the WSGI app in-process. At the end: the hosts used and left
empty, the standard deviation and maximum of the hosts' VCPU usage share,
the time per GET (wall and this process's CPU, median and p90), the
requests that found nothing, and that no provider is over its capacity
(the database's allocations summed against its inventories).

**cost**: ``--cost-hosts`` hosts loaded as scale.py loads them (half of
them with 1-8 instances), then scale.py's flavor with ``limit=1000``
asked ``--repeat`` times per order, the orders alternated; spread and
pack both ranking the trees afresh (``allocation_candidates_order_age =
0``) and with the ranking a request before made (``reused``, a worker
between two rankings); the median wall and CPU per request, and each
over ``id``'s. Both parts time their requests with the cyclic collector
tuned as placement-api's workers tune it (``api.tune_gc``).

    .venv/bin/python tools/bench/candidate_order.py --hosts 10000 \\
        --instances 20000 --cost-hosts 100000 --db mysql \\
        --out tools/bench/results/candidate-order-<commit>.json

``--start used`` begins the fill from scale.py's cloud instead of empty
hosts (half of them with 1-8 instances, as a cloud in use). ``--skip-fill``
/ ``--cost-hosts 0`` run one part only.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid

import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

import figures_file  # noqa: E402
import profile_request  # noqa: E402  (Loader, fresh databases)
import scale  # noqa: E402  (hosts, flavors, the loaded cloud)

from placement import deploy  # noqa: E402
from placement.cmd import api  # noqa: E402
from placement.db import tables  # noqa: E402
from tests import wsgi_client  # noqa: E402

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
# Order name -> (allocation_candidates_order, randomize_allocation_candidates)
ORDERS = {
    "id": ("id", False),
    "random": ("id", True),
    "spread": ("spread", False),
    "pack": ("pack", False),
}
PROJECT, USER = str(uuid.uuid4()), str(uuid.uuid4())


def configure(conf, order):
    name, randomize = ORDERS[order]
    conf.set_override("allocation_candidates_order", name, group="placement")
    conf.set_override("randomize_allocation_candidates", randomize, group="placement")


def query(flavor, limit):
    return "resources=%s&limit=%d" % (
        ",".join("%s:%d" % item for item in flavor.items()),
        limit,
    )


def timed_get(app, path):
    """(response, wall ms, CPU ms of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    resp = wsgi_client.call(app, path, headers=HEADERS)
    return (
        resp,
        (time.perf_counter() - wall) * 1000,
        (time.process_time() - cpu) * 1000,
    )


def summary(values):
    values = sorted(values)
    if not values:
        return {}
    return {
        "median": round(statistics.median(values), 2),
        "p90": round(values[int(0.9 * (len(values) - 1))], 2),
    }


def fill(conf, db, app, args, order):
    """The scheduler's claims under ``order``: the figures."""
    rnd = random.Random(args.seed)
    _, before = used(db)
    walls, cpus, found_nothing = [], [], 0
    for i in range(args.instances):
        flavor = rnd.choice(scale.FLAVORS)
        resp, wall, cpu = timed_get(
            app, "/allocation_candidates?" + query(flavor, args.limit)
        )
        assert resp.status == 200, resp.body
        walls.append(wall)
        cpus.append(cpu)
        candidates = resp.json()["allocation_requests"]
        if not candidates:
            found_nothing += 1
            continue
        claim = wsgi_client.call(
            app,
            "/allocations/%s" % uuid.uuid4(),
            "PUT",
            dict(
                candidates[0],
                project_id=PROJECT,
                user_id=USER,
                consumer_generation=None,
                consumer_type="INSTANCE",
            ),
            headers=HEADERS,
        )
        assert claim.status == 204, claim.body
        if (i + 1) % 1000 == 0:
            print(
                "  %s: %d claims, GET median %.1f ms"
                % (order, i + 1, statistics.median(walls[-1000:])),
                flush=True,
            )
    return dict(
        usage(db, before),
        requests=len(walls),
        found_nothing=found_nothing,
        get_wall_ms=summary(walls),
        get_cpu_ms=summary(cpus),
    )


def used(db):
    """{(provider, class): (capacity, used)} of every inventory."""
    inv, alloc = tables.inventories, tables.allocations
    used = (
        sa.select(
            alloc.c.resource_provider_id.label("rp"),
            alloc.c.resource_class_id.label("rc"),
            sa.func.sum(alloc.c.used).label("used"),
        )
        .group_by(alloc.c.resource_provider_id, alloc.c.resource_class_id)
        .subquery()
    )
    statement = sa.select(
        inv.c.resource_provider_id,
        inv.c.resource_class_id,
        inv.c.total,
        inv.c.reserved,
        inv.c.allocation_ratio,
        sa.func.coalesce(used.c.used, 0),
    ).outerjoin(
        used,
        sa.and_(
            used.c.rp == inv.c.resource_provider_id,
            used.c.rc == inv.c.resource_class_id,
        ),
    )
    with db.reader() as conn:
        vcpu = conn.scalar(
            sa.select(tables.resource_classes.c.id).where(
                tables.resource_classes.c.name == "VCPU"
            )
        )
        rows = conn.execute(statement).all()
    return vcpu, {
        (rp, rc): (int((total - reserved) * ratio), amount)
        for rp, rc, total, reserved, ratio, amount in rows
    }


def usage(db, before):
    """Hosts used and empty, the VCPU usage share's spread, and the
    inventories the claims put or pushed further over capacity (usage
    ``before`` them may be over already: scale.py's cloud is loaded
    without checks), from the database's rows."""
    vcpu, after = used(db)
    over, shares, hosts_used = 0, [], set()
    for (rp, rc), (capacity, amount) in after.items():
        if amount > capacity and amount > before[rp, rc][1]:
            over += 1
        if amount:
            hosts_used.add(rp)
        if rc == vcpu:
            shares.append(amount / capacity)
    hosts = len(shares)
    return {
        "hosts": hosts,
        "hosts_used": len(hosts_used),
        "hosts_empty_pct": round(100 * (hosts - len(hosts_used)) / hosts, 1),
        "vcpu_share_stdev": round(statistics.pstdev(shares), 4),
        "vcpu_share_max": round(max(shares), 4),
        "vcpu_share_mean": round(statistics.fmean(shares), 4),
        "over_capacity": over,
        "over_capacity_before": sum(1 for c, u in before.values() if u > c),
    }


def load_hosts(db, hosts):
    loader = profile_request.Loader(db)
    for i in range(hosts):
        loader.provider("compute-%06d" % i, scale.HOST)
        if i % 10000 == 9999:
            loader.flush()
    loader.flush()


def run_fill(conf, args):
    figures = {}
    for order in args.orders:
        configure(conf, order)
        with profile_request.fresh_database(args.db, conf) as (_, db):
            if args.start == "empty":
                load_hosts(db, args.hosts)
            else:
                scale.load(db, args.hosts, 200, seed=args.seed)
            app = deploy.build_app(conf, db=db, sync_schema=False)
            api.tune_gc()  # the collector as placement-api's workers run it
            started = time.perf_counter()
            figures[order] = fill(conf, db, app, args, order)
            figures[order]["seconds"] = round(time.perf_counter() - started, 1)
        print(order, json.dumps(figures[order]), flush=True)
    return figures


def run_cost(conf, args):
    """Median wall and CPU per limit=1000 request, per order, alternated
    on one database of ``--cost-hosts`` hosts: spread and pack ranking
    the trees afresh (``allocation_candidates_order_age = 0``) and with
    the ranking of the request before (``reused``, as between two
    rankings of a worker)."""
    path = "/allocation_candidates?%s&limit=%d" % (scale.FLAVOR, scale.LIMIT)
    paths = {"capacity": "/allocation_candidates/capacity?%s" % scale.FLAVOR}
    variants = [("id", "id", 0.0)]
    for order in ("spread", "pack"):
        if order in args.orders:
            variants += [(order, order, 0.0), (order + " reused", order, 1e9)]
    variants.append(("capacity", "id", 0.0))
    with profile_request.fresh_database(args.db, conf) as (_, db):
        started = time.perf_counter()
        instances = scale.load(db, args.cost_hosts, 200)
        print(
            "loaded %d hosts, %d instances in %.0f s"
            % (args.cost_hosts, instances, time.perf_counter() - started),
            flush=True,
        )
        configure(conf, "id")
        app = deploy.build_app(conf, db=db, sync_schema=False)
        api.tune_gc()  # the collector as placement-api's workers run it
        walls = {name: [] for name, _, _ in variants}
        cpus = {name: [] for name, _, _ in variants}
        bodies = {}
        for rounds in (1, args.repeat):  # the first warms catalog and plans
            for _ in range(rounds):
                for name, order, age in variants:
                    configure(conf, order)
                    conf.set_override(
                        "allocation_candidates_order_age", age, group="placement"
                    )
                    resp, wall, cpu = timed_get(app, paths.get(name, path))
                    assert resp.status == 200, resp.body
                    walls[name].append(wall)
                    cpus[name].append(cpu)
                    found = resp.json()
                    bodies[name] = found.get(
                        "capacity", len(found.get("allocation_requests", ()))
                    )
    figures = {
        name: {
            "candidates": bodies[name],
            "wall_ms": summary(walls[name][1:]),
            "cpu_ms": summary(cpus[name][1:]),
        }
        for name in walls
    }
    for name in figures:
        for kind in ("wall_ms", "cpu_ms"):
            figures[name][kind]["over_id"] = round(
                figures[name][kind]["median"] / figures["id"][kind]["median"], 3
            )
    return {"hosts": args.cost_hosts, "repeat": args.repeat, "orders": figures}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "mysql"), default="mysql")
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--instances", type=int, default=20000)
    parser.add_argument(
        "--start",
        choices=("empty", "used"),
        default="empty",
        help="the hosts before the claims: empty, or half of them with "
        "1-8 instances (scale.py's cloud)",
    )
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--orders", nargs="+", default=list(ORDERS))
    parser.add_argument("--seed", type=int, default=47)
    parser.add_argument("--skip-fill", action="store_true")
    parser.add_argument("--cost-hosts", type=int, default=100000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()

    conf = profile_request.noauth_conf()
    figures = {"args": vars(args)}
    if not args.skip_fill:
        figures["fill"] = run_fill(conf, args)
    if args.cost_hosts:
        figures["cost"] = run_cost(conf, args)
        print(json.dumps(figures["cost"], indent=1))
    figures_file.write(args.out, figures)


if __name__ == "__main__":
    main()
