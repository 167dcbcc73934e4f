"""Time of one statement writing N rows, with and without the change-log
triggers (placement/db/triggers.py): an INSERT of N allocations, an
UPDATE of them all, a DELETE of them all, each in its own transaction,
on a fresh database per backend made at the tree's head (so run it with
another tree on PYTHONPATH for a before and after).

    PYTHONPATH=$PWD .venv/bin/python tools/bench/trigger_rows.py --db sqlite
    .venv/bin/python tools/bench/trigger_rows.py --db mysql --rows 1000,8000

Wall time of the statement (the work is the database's), the median of
``--repeat`` runs; the with/without ratio is read in one run.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid

import sqlalchemy as sa

from placement.db import schema
from placement.db import triggers

SERVERS = {
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306",
}
STATEMENTS = {
    "insert": (
        "INSERT INTO allocations (resource_provider_id, consumer_id,"
        " resource_class_id, used) SELECT 1, s, 0, 1 FROM bench_numbers"
        " WHERE i < %d"
    ),
    "update": "UPDATE allocations SET used = used + 1",
    "delete": "DELETE FROM allocations",
}


def _scratch(backend, server):
    """(url, drop) of a fresh database."""
    if backend == "sqlite":
        path = os.path.join(tempfile.mkdtemp(prefix="trigger-rows-"), "p.sqlite")
        return "sqlite:///" + path, lambda: os.unlink(path)
    name = "placement_trigger_rows_%s" % uuid.uuid4().hex[:12]
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql("CREATE DATABASE %s" % name)

    def drop():
        with admin.connect() as conn:
            conn.exec_driver_sql("DROP DATABASE %s" % name)
        admin.dispose()

    suffix = "?charset=utf8mb4" if backend == "mysql" else ""
    return "%s/%s%s" % (server, name, suffix), drop


def _timed(engine, sql):
    with engine.connect() as conn:
        started = time.perf_counter()
        with conn.begin():
            conn.exec_driver_sql(sql)
        return time.perf_counter() - started


def run(backend, server, rows, repeat):
    url, drop = _scratch(backend, server)
    engine = sa.create_engine(url)
    results = []
    try:
        schema.create_at_head(engine)
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE bench_numbers (i INTEGER PRIMARY KEY, s VARCHAR(36))"
            )
            conn.execute(
                sa.text("INSERT INTO bench_numbers (i, s) VALUES (:i, :s)"),
                [{"i": i, "s": str(uuid.UUID(int=i))} for i in range(max(rows))],
            )
        for with_triggers in (True, False):
            with engine.begin() as conn:
                if with_triggers:
                    assert triggers.create(conn)
                else:
                    triggers.drop(conn)
            for n in rows:
                times = {event: [] for event in STATEMENTS}
                for _ in range(repeat):
                    for event, sql in STATEMENTS.items():
                        sql = sql % n if event == "insert" else sql
                        times[event].append(_timed(engine, sql))
                row = {
                    "db": backend,
                    "triggers": with_triggers,
                    "rows": n,
                    **{e: round(statistics.median(t), 4) for e, t in times.items()},
                }
                print(
                    "%-10s %-8s %6d  insert %7.3f s  update %7.3f s  delete %7.3f s"
                    % (
                        backend,
                        "with" if with_triggers else "without",
                        n,
                        row["insert"],
                        row["update"],
                        row["delete"],
                    ),
                    flush=True,
                )
                results.append(row)
    finally:
        engine.dispose()
        drop()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", action="append", choices=["sqlite", *SERVERS])
    parser.add_argument("--rows", default="1000,4000,8000,16000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON there")
    args = parser.parse_args()
    rows = [int(n) for n in args.rows.split(",")]
    results = []
    for backend in args.db or ["postgresql"]:
        results += run(backend, SERVERS.get(backend), rows, args.repeat)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
