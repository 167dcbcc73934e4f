"""``Catalog.read`` timed per stage, in process, as placement-api's master
reads it (the collector off, ``followed``: usage, generations and
allocations too), on a loaded database (``scale.py --keep``'s URL).

Per stage: wall, this process's CPU and, with ``--db-pid``, the database
server's CPU (a private MariaDB's: tests.private_mariadb), and at the end
this process's RSS growth. On a shared machine the wall is the machine's
queue: read the CPU.

    .venv/bin/python tools/bench/catalog_read.py --url mysql+mysqldb://... \\
        --rounds 2 --db-pid PID --out tools/bench/results/catalog-read-....json
"""

import argparse
import collections
import contextlib
import cProfile
import gc
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

from placement import conf as placement_conf  # noqa: E402
from placement.db import api as db_api  # noqa: E402
from placement.objects.catalog import bulk  # noqa: E402
from placement.objects.catalog import columns  # noqa: E402
from placement.objects.catalog import consumers  # noqa: E402
from placement.objects.catalog import rows  # noqa: E402
from placement.objects.catalog import snapshot  # noqa: E402
from placement.objects.catalog import store  # noqa: E402
from placement.objects.catalog import used  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _db_cpu(pid):
    if pid is None:
        return 0.0
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Stages:
    """Wall, CPU and the database's CPU per stage, nested stages apart."""

    def __init__(self, db_pid):
        self.db_pid = db_pid
        self.found = collections.defaultdict(list)

    @contextlib.contextmanager
    def timed(self, name):
        wall, cpu, db = time.perf_counter(), time.process_time(), _db_cpu(self.db_pid)
        try:
            yield
        finally:
            self.found[name].append(
                {
                    "wall_s": round(time.perf_counter() - wall, 3),
                    "cpu_s": round(time.process_time() - cpu, 3),
                    "db_cpu_s": round(_db_cpu(self.db_pid) - db, 3),
                }
            )

    def wrap(self, owner, attribute, name):
        """Time every call of ``owner.attribute`` as ``name``."""
        original = getattr(owner, attribute)
        is_class_method = isinstance(owner.__dict__.get(attribute), classmethod)
        function = original.__func__ if is_class_method else original

        def timed(*args, **kwargs):
            with self.timed(name):
                return function(*args, **kwargs)

        setattr(owner, attribute, classmethod(timed) if is_class_method else timed)

    def wrap_bulk(self):
        """Time every ``bulk.columns`` call as "bulk <its table>"."""
        original = bulk.columns

        def timed(conn, source, *args, **kwargs):
            with self.timed("bulk %s" % getattr(source, "name", source)):
                return original(conn, source, *args, **kwargs)

        bulk.columns = timed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--db-pid", type=int, help="the database server's pid")
    parser.add_argument("--out", help="write the figures here as JSON")
    parser.add_argument("--label", default="read")
    parser.add_argument("--profile", help="write cProfile's stats of a read here")
    args = parser.parse_args()
    stages = Stages(args.db_pid)
    for owner, attribute, name in (
        (consumers, "read", "allocations (consumers.read)"),
        (store.Catalog, "_readnames", "names"),
        (rows, "pairs", "pairs"),
        (rows.Rows, "whole", "Rows.whole"),
        (store.Catalog, "_whole", "_whole (maps)"),
        (store.Catalog, "fingerprint", "fingerprint"),
        (columns.Columns, "__init__", "columns.of"),
        (columns.Columns, "prepare", "Columns.prepare"),
        (store.Catalog, "_every_value_roots", "_every_value_roots"),
        (used.Used, "read", "Used.read"),
        (used.Used, "prepare", "Used.prepare"),
    ):
        stages.wrap(owner, attribute, name)
    stages.wrap_bulk()
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    db = db_api.Database(db_api.create_engine(args.url, conf), conf)
    for _ in range(args.rounds):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        gc.disable()
        profiler = cProfile.Profile() if args.profile else None
        with stages.timed("TOTAL"), snapshot.own(db) as conn:
            if profiler:
                profiler.enable()
            catalog = store.Catalog.read(conn, followed=True)
            if profiler:
                profiler.disable()
                profiler.dump_stats(args.profile)
        gc.enable()
        stages.found["peak RSS growth MB"].append(
            round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024, 1)
        )
        print("%d providers" % len(catalog.providers))
        del catalog
        gc.collect()
    for name, runs in stages.found.items():
        print(
            "%-30s %s"
            % (
                name,
                "; ".join(
                    "%(cpu_s).2f cpu %(wall_s).2f wall %(db_cpu_s).2f db" % r
                    if isinstance(r, dict)
                    else str(r)
                    for r in runs
                ),
            )
        )
    if args.out:
        found = {}
        if os.path.exists(args.out):
            with open(args.out) as f:
                found = json.load(f)
        found[args.label] = dict(stages.found, load_average=os.getloadavg())
        with open(args.out, "w") as f:
            json.dump(found, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
