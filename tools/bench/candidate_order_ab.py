"""The cost of ``[placement] allocation_candidates_order`` A/B: two trees
(a base, e.g. main, and a new one) serving the same loaded database in two
processes, every request alternated between them (issue 47).

One database per ``--hosts`` size (scale.py's cloud, kept under the name
``<--prefix>_<hosts>`` for the next run: ``--reuse``), then per round:
optionally claims (``--claims [N]``, N per round: a random one of the
first 1000 candidates of id's answer, or ``--claim-from``'s, by the base
and the new process in turn, untimed) and an untimed request each process follows the
change log with, then scale.py's flavor with ``limit=1000`` in each
variant (``id``; spread and pack with the ranking kept from the round
before, made before its claims, ``after claims``; ranking the trees
afresh, ``allocation_candidates_order_age = 0``; and with a kept ranking,
``reused``), base and new alternated, which goes first swapped every
round, the variants' order rotated every round (the first after the
claims pays for the trees they changed). CPU (process_time in the
child, around the app's call) and wall median ms per variant and over
id's; every body's sha256 compared between the two (they see the same
database in the same state).

    .venv/bin/python tools/bench/candidate_order_ab.py --url URL \\
        --base <a git archive of main> --new . --hosts 20000 100000 --rounds 20 \\
        --out tools/bench/results/candidate-order-ab-<commit>.json

The child (``--child TREE URL``) imports ``placement`` from TREE and
answers one JSON line per command read from stdin.
"""

import argparse
import hashlib
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid

import figures_file

HERE = os.path.dirname(os.path.abspath(__file__))
HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
VARIANTS = {  # name -> (order, ranking age)
    "id": ("id", 0.0),
    # First after the claims: the ranking kept from the last round, made
    # at the usage before them (nova's common case: age 1 s, a claim
    # between its requests).
    "spread after claims": ("spread", 1e9),
    "pack after claims": ("pack", 1e9),
    "spread": ("spread", 0.0),
    "spread reused": ("spread", 1e9),
    "pack": ("pack", 0.0),
    "pack reused": ("pack", 1e9),
}
# An untimed request after a claim: each process follows the change log.
WARM = "/allocation_candidates?resources=VCPU:1&limit=1"
PROJECT, USER = str(uuid.uuid4()), str(uuid.uuid4())


def child(tree, url):
    """Serve commands from stdin with TREE's placement on database URL."""
    sys.path[:0] = [tree, HERE]
    from placement import conf as placement_conf
    from placement import deploy
    from placement.cmd import api
    from placement.db import api as db_api
    from tests import wsgi_client

    # Only now: scale.py puts its own tree first on the path when
    # imported, which made every child run the tree of this file.
    scale = importlib.import_module("scale")
    for module in (placement_conf, wsgi_client):
        assert module.__file__.startswith(os.path.join(tree, "")), module.__file__

    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    conf.set_override("auth_strategy", "noauth2", group="api")
    # The catalog's whole read at 100,000 hosts on a loaded machine.
    conf.set_override("statement_timeout", 0, group="placement_database")
    db = db_api.Database(db_api.create_engine(url, conf), conf)
    app = deploy.build_app(conf, db=db, sync_schema=False)
    api.tune_gc()
    path = "/allocation_candidates?%s&limit=%d" % (scale.FLAVOR, scale.LIMIT)
    for line in sys.stdin:
        command = json.loads(line)
        order, age = VARIANTS.get(command.get("variant"), ("id", 0.0))
        conf.set_override("allocation_candidates_order", order, group="placement")
        conf.set_override("allocation_candidates_order_age", age, group="placement")
        if command["do"] == "claim":
            found = wsgi_client.call(app, path, headers=HEADERS).json()
            chosen = found["allocation_requests"][command["pick"]]
            resp = wsgi_client.call(
                app,
                "/allocations/%s" % uuid.uuid4(),
                "PUT",
                dict(
                    chosen,
                    project_id=PROJECT,
                    user_id=USER,
                    consumer_generation=None,
                    consumer_type="INSTANCE",
                ),
                headers=HEADERS,
            )
            assert resp.status == 204, resp.body
            answer = {}
        else:
            wall, cpu = time.perf_counter(), time.process_time()
            resp = wsgi_client.call(app, command.get("path", path), headers=HEADERS)
            cpu = (time.process_time() - cpu) * 1000
            wall = (time.perf_counter() - wall) * 1000
            assert resp.status == 200, resp.body
            answer = {
                "cpu": cpu,
                "wall": wall,
                "sha": hashlib.sha256(resp.body).hexdigest(),
            }
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


class Child:
    def __init__(self, tree, url):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", tree, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tree,
        )

    def ask(self, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def database(server, prefix, hosts, reuse):
    """The URL of the loaded database of ``hosts`` hosts."""
    sys.path[:0] = [os.path.dirname(os.path.dirname(HERE)), HERE]
    import profile_request
    import scale
    import sqlalchemy as sa

    from placement import conf as placement_conf

    name = "%s_%d" % (prefix, hosts)
    url = "%s/%s" % (server, name)
    engine = sa.create_engine(server)
    with engine.connect() as conn:
        exists = conn.scalar(sa.text("SHOW DATABASES LIKE '%s'" % name))
        if exists and reuse:
            return url
        conn.execute(sa.text("DROP DATABASE IF EXISTS %s" % name))
        conn.execute(sa.text("CREATE DATABASE %s" % name))
    engine.dispose()
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    with profile_request.at_head(url, conf) as db:
        started = time.perf_counter()
        instances = scale.load(db, hosts, 200)
        print(
            "loaded %d hosts, %d instances in %.0f s"
            % (hosts, instances, time.perf_counter() - started),
            flush=True,
        )
    return url


def run(url, args):
    trees = {"base": Child(args.base, url), "new": Child(args.new, url)}
    rnd = random.Random(47)
    cpu = {(t, v): [] for t in trees for v in VARIANTS}
    wall = {(t, v): [] for t in trees for v in VARIANTS}
    differ = 0
    try:
        for number in range(args.rounds + 1):  # the first warms both
            # The claimer alternates: each process sees its own claims and
            # the other's equally often (a worker that made a claim knows
            # it before the change log says so).
            claimer = trees[list(trees)[number % 2]]
            for _ in range(args.claims if number else 0):
                claimer.ask(
                    do="claim", variant=args.claim_from, pick=rnd.randrange(1000)
                )
            for tree in trees.values():  # the change log followed, untimed
                tree.ask(do="get", path=WARM)
            ordered = list(trees) if number % 2 else list(trees)[::-1]
            # The variants rotate: the first request of a shape after the
            # claims pays for the trees they changed, each variant as often.
            names = list(VARIANTS)
            shift = number % len(names)
            for variant in names[shift:] + names[:shift]:
                answers = {t: trees[t].ask(do="get", variant=variant) for t in ordered}
                if answers["base"]["sha"] != answers["new"]["sha"]:
                    differ += 1
                if number:
                    for t, answer in answers.items():
                        cpu[t, variant].append(answer["cpu"])
                        wall[t, variant].append(answer["wall"])
    finally:
        for tree in trees.values():
            tree.close()
    figures = {"rounds": args.rounds, "claims": args.claims, "bodies_differ": differ}
    for t in trees:
        mine = figures[t] = {}
        for variant in VARIANTS:
            mine[variant] = {
                "cpu_ms": round(statistics.median(cpu[t, variant]), 2),
                "wall_ms": round(statistics.median(wall[t, variant]), 2),
                "cpu_each": [round(v, 2) for v in cpu[t, variant]],
            }
        for variant in VARIANTS:
            mine[variant]["cpu_over_id"] = round(
                mine[variant]["cpu_ms"] / mine["id"]["cpu_ms"], 3
            )
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("TREE", "URL"))
    parser.add_argument("--url", help="the MariaDB server's URL (no database)")
    parser.add_argument("--prefix", default="order_cost")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--base", help="the code tree to compare with")
    parser.add_argument("--new", default=".")
    parser.add_argument("--hosts", type=int, nargs="+", default=[20000, 100000])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--claims", type=int, nargs="?", const=1, default=0, help="per round"
    )
    parser.add_argument(
        "--claim-from", default="id", choices=VARIANTS, help="whose answer"
    )
    parser.add_argument("--load-only", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    if not args.base:
        parser.error("--base is needed")
    args.base, args.new = os.path.abspath(args.base), os.path.abspath(args.new)
    figures = {"args": vars(args), "load_average": os.getloadavg()}
    for hosts in args.hosts:
        url = database(args.url, args.prefix, hosts, args.reuse)
        if args.load_only:
            continue
        figures[str(hosts)] = run(url, args)
        print(hosts, json.dumps(figures[str(hosts)], indent=1), flush=True)
    figures["load_average_after"] = os.getloadavg()
    figures_file.write(args.out, figures)


if __name__ == "__main__":
    main()
