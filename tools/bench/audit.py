"""The data audit at scale: load a cloud, plant defects, time the audit.

1. Loads a fresh MariaDB database with scale.py's bulk loader (``--hosts``
   compute hosts, half of them carrying 1-8 instances), or takes an
   already loaded one (``--url``, e.g. what ``scale.py --keep`` left).
2. Plants a few defects with SQL: hosts over capacity (their VCPU total
   lowered below their use), an inventory whose step_size its allocations
   break, consumers with no allocations, allocations without a consumer
   row, a consumer whose project row is gone, a host whose root is wrong
   (given a parent), two hosts whose parents loop, and an unused custom
   resource class and trait.
3. Runs the audit in this process (``placement.objects.audit.run``, as
   ``placement-manage audit`` and ``GET /maintenance/audit`` do): the
   whole audit ``--repeat`` times (wall and this process's CPU; the rest
   is the database's), then each check alone; checks that it names
   exactly what was planted, prints it abbreviated as the command does
   and writes the figures as JSON (``--out``).

    .venv/bin/python tools/bench/audit.py --hosts 100000 \\
        --out tools/bench/results/audit-100000-<commit>.json

The planted rows are taken out again at the end when ``--url`` was given
(the loaded database is dropped otherwise, unless ``--keep``).
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import uuid

import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

import profile_request  # noqa: E402  (fresh databases)
import scale  # noqa: E402  (the loader)

from placement import conf as placement_conf  # noqa: E402
from placement.cmd import audit as audit_cmd  # noqa: E402
from placement.db import api as db_api  # noqa: E402
from placement.objects import audit  # noqa: E402
from tests import helpers  # noqa: E402

TARGET_S = 10
OVER = 5  # hosts put over capacity
EMPTY = 3  # consumers without allocations
DANGLING = 2  # allocations without a consumer row
UNUSED = "CUSTOM_AUDIT_BENCH_UNUSED"


def _ids(conn, sql, **params):
    return [row[0] for row in conn.execute(sa.text(sql), params)]


def plant(engine):
    """The defects (see the module's docstring); what the audit must name,
    per kind: the set of resource provider uuids, consumer uuids or names
    it lists."""
    with engine.begin() as conn:
        vcpu = _ids(conn, "SELECT id FROM resource_classes WHERE name = 'VCPU'")[0]
        disk = _ids(conn, "SELECT id FROM resource_classes WHERE name = 'DISK_GB'")[0]
        used = _ids(
            conn,
            "SELECT resource_provider_id FROM allocations GROUP BY"
            " resource_provider_id ORDER BY resource_provider_id LIMIT :n",
            n=OVER + 1,
        )
        over, stepped = used[:OVER], used[OVER]
        conn.execute(
            sa.text(
                "UPDATE inventories SET total = 1, allocation_ratio = 1.0 WHERE"
                " resource_class_id = :rc AND resource_provider_id IN :ids"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"rc": vcpu, "ids": over},
        )
        # The loader's disk amounts are 40, 80 or 200: none a multiple of 7.
        conn.execute(
            sa.text(
                "UPDATE inventories SET step_size = 7 WHERE resource_class_id = :rc"
                " AND resource_provider_id = :rp"
            ),
            {"rc": disk, "rp": stepped},
        )
        project, user = conn.execute(
            sa.text("SELECT project_id, user_id FROM consumers LIMIT 1")
        ).first()
        empty = [str(uuid.uuid4()) for _ in range(EMPTY)]
        ownerless = str(uuid.uuid4())
        conn.execute(
            sa.text(
                "INSERT INTO consumers (uuid, project_id, user_id, generation)"
                " VALUES (:uuid, :project, :user, 0)"
            ),
            [{"uuid": c, "project": project, "user": user} for c in empty]
            + [{"uuid": ownerless, "project": 999999999, "user": user}],
        )
        spare = _ids(
            conn,
            "SELECT id FROM resource_providers WHERE id NOT IN (SELECT"
            " resource_provider_id FROM allocations) ORDER BY id LIMIT 5",
        )
        dangling = [str(uuid.uuid4()) for _ in range(DANGLING)]
        conn.execute(
            sa.text(
                "INSERT INTO allocations (resource_provider_id, consumer_id,"
                " resource_class_id, used) VALUES (:rp, :consumer, :rc, 1)"
            ),
            [
                {"rp": spare[0], "consumer": c, "rc": vcpu}
                for c in dangling + [ownerless]
            ],
        )
        # spare[1] under spare[2], its root left as itself; spare[3] and
        # spare[4] each other's parent.
        for child, parent in ((spare[1], spare[2]), (spare[3], spare[4])):
            conn.execute(
                sa.text(
                    "UPDATE resource_providers SET parent_provider_id = :parent"
                    " WHERE id = :id"
                ),
                {"id": child, "parent": parent},
            )
        conn.execute(
            sa.text(
                "UPDATE resource_providers SET parent_provider_id = :parent"
                " WHERE id = :id"
            ),
            {"id": spare[4], "parent": spare[3]},
        )
        top = _ids(conn, "SELECT MAX(id) FROM resource_classes")[0]
        conn.execute(
            sa.text("INSERT INTO resource_classes (id, name) VALUES (:id, :name)"),
            {"id": max(top + 1, 10000), "name": UNUSED},
        )
        conn.execute(
            sa.text("INSERT INTO traits (name) VALUES (:name)"), {"name": UNUSED}
        )
        uuids = dict(
            conn.execute(
                sa.text(
                    "SELECT id, uuid FROM resource_providers WHERE id IN :ids"
                ).bindparams(sa.bindparam("ids", expanding=True)),
                {"ids": over + [stepped] + spare},
            ).all()
        )
    return {
        "over_capacity": {uuids[i] for i in over},  # and the loader's own
        "unit_limits": {uuids[stepped]},
        "empty_consumers": set(empty),
        "missing_consumers": set(dangling),
        "missing_owners": {ownerless},
        "wrong_roots": {uuids[spare[1]]},
        "parent_loops": {uuids[spare[3]], uuids[spare[4]]},
        "unused_resource_classes": {UNUSED},
        "unused_traits": {UNUSED},
    }, {
        "over": over,
        "stepped": stepped,
        "spare": spare,
        "consumers": empty + dangling + [ownerless],
    }


def unplant(engine, planted):
    """Puts a database given with --url back as the loader left it (the
    lowered VCPU totals go back to scale.HOST's)."""
    ids = lambda name: sa.bindparam(name, expanding=True)  # noqa: E731
    host = scale.HOST
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE inventories SET total = :total, allocation_ratio = :ratio"
                " WHERE resource_class_id = (SELECT id FROM resource_classes"
                " WHERE name = 'VCPU') AND resource_provider_id IN :over"
            ).bindparams(ids("over")),
            {
                "total": host["VCPU"]["total"],
                "ratio": host["VCPU"]["allocation_ratio"],
                "over": planted["over"],
            },
        )
        conn.execute(
            sa.text(
                "UPDATE inventories SET step_size = 1 WHERE resource_provider_id = :rp"
            ),
            {"rp": planted["stepped"]},
        )
        conn.execute(
            sa.text("DELETE FROM allocations WHERE consumer_id IN :c").bindparams(
                ids("c")
            ),
            {"c": planted["consumers"]},
        )
        conn.execute(
            sa.text("DELETE FROM consumers WHERE uuid IN :c").bindparams(ids("c")),
            {"c": planted["consumers"]},
        )
        conn.execute(
            sa.text(
                "UPDATE resource_providers SET parent_provider_id = NULL WHERE id IN :s"
            ).bindparams(ids("s")),
            {"s": planted["spare"]},
        )
        for table in ("resource_classes", "traits"):
            conn.execute(
                sa.text("DELETE FROM %s WHERE name = :name" % table), {"name": UNUSED}
            )


def named(check):
    """What a check's items name, as plant() lists it."""
    keys = ("resource_provider", "consumer", "name")
    return {next(item[k] for k in keys if k in item) for item in check["items"]}


def server_pid(engine):
    """The pid of the MariaDB server ``engine`` talks to (this machine's)."""
    with engine.connect() as conn:
        path = conn.exec_driver_sql("SELECT @@pid_file").scalar()
    with open(path) as f:
        return int(f.read())


def server_cpu(pid):
    """CPU seconds the server process has used (shared with whatever else
    it serves meanwhile)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(db, kinds=audit.KINDS, pid=None):
    """(answer, wall s, this process's CPU s, the server's CPU s)."""
    server = server_cpu(pid) if pid else 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    found = audit.run(db, kinds)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return found, wall, cpu, (server_cpu(pid) - server) if pid else None


def run(db, expected, repeat):
    figures = {}
    pid = server_pid(db.engine)
    runs = [timed(db, pid=pid) for _ in range(repeat)]
    found = runs[-1][0]
    figures["audit_s"] = [round(r[1], 2) for r in runs]
    figures["audit_median_s"] = round(statistics.median(figures["audit_s"]), 2)
    figures["audit_cpu_s"] = [round(r[2], 2) for r in runs]
    figures["server_cpu_s"] = [round(r[3], 2) for r in runs]
    figures["load_average"] = os.getloadavg()
    figures["per_check_s"] = {
        kind: round(timed(db, [kind])[1], 3) for kind in audit.KINDS
    }
    # Checked on every item, not the first ITEMS the timed runs list.
    checks = {c["kind"]: c for c in audit.run(db, limit=10**9)["checks"]}
    problems = []
    for kind, check in checks.items():
        want = expected.get(kind, set())
        if named(check) != want:
            problems.append("%s: named %s, planted %s" % (kind, named(check), want))
    figures["problems"] = found["problems"]
    figures["answer_problems"] = problems
    for check in found["checks"]:
        audit_cmd._print_check(check)
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100000)
    parser.add_argument("--aggregates", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url", help="audit this loaded database (MySQL)")
    parser.add_argument("--keep", action="store_true", help="keep the loaded database")
    parser.add_argument("--out", help="write the figures here as JSON")
    args = parser.parse_args()
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    figures = {"hosts": args.hosts, "target_s": TARGET_S}
    with contextlib.ExitStack() as stack:
        if args.url:
            url = args.url
            db = db_api.Database(db_api.create_engine(url, conf), conf)
            stack.callback(db.engine.dispose)
        else:
            database = (
                scale.kept_database(conf)
                if args.keep
                else profile_request.fresh_database("mysql", conf)
            )
            url, db = stack.enter_context(database)
            start = time.perf_counter()
            figures["instances"] = scale.load(db, args.hosts, args.aggregates)
            figures["load_s"] = round(time.perf_counter() - start, 1)
            print("loaded %d hosts in %.1f s" % (args.hosts, figures["load_s"]))
            if args.keep:
                print("kept: --url '%s'" % url)
        with db.reader() as conn:
            for table in ("resource_providers", "allocations", "consumers"):
                figures[table] = conn.scalar(sa.text("SELECT COUNT(*) FROM " + table))
        expected, planted = plant(db.engine)
        # Summed from the rows: the loader itself over-fills MEMORY_MB on some
        # hosts (up to eight 64 GiB instances on 252 GiB).
        expected["over_capacity"] = helpers.over_capacity_from_rows(db.engine)
        figures["over_capacity_planted"] = OVER
        figures["over_capacity_in_rows"] = len(expected["over_capacity"])
        try:
            figures.update(run(db, expected, args.repeat))
        finally:
            if args.url or args.keep:
                unplant(db.engine, planted)
    figures["met"] = (
        figures["audit_median_s"] < TARGET_S and not figures["answer_problems"]
    )
    print(
        "audit at %d hosts (%d allocations): %s s (median %.2f s, CPU here %s s,"
        " MariaDB server CPU %s s, load average %s) per-check %s; answers %s;"
        " target %d s %s"
        % (
            args.hosts,
            figures["allocations"],
            figures["audit_s"],
            figures["audit_median_s"],
            figures["audit_cpu_s"],
            figures["server_cpu_s"],
            figures["load_average"],
            figures["per_check_s"],
            figures["answer_problems"] or "as planted",
            TARGET_S,
            "met" if figures["met"] else "NOT MET",
        )
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
