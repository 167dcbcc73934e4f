"""CPU, in process, of a read that follows another writer's change of
one host's inventories (``heartbeat.py``'s PUT, 1% of hosts a period,
which every worker's catalog follows at its next request): the changed
provider's rows read by ``catalog/rows.py``'s four statements built anew
and run through ``Connection.execute`` (``execute``, as before) or built
once and run on the driver's cursor (``plain``).

The whole app is called directly (no HTTP) on a fresh MariaDB database
holding ``--hosts`` hosts of ``heartbeat.py``'s cloud (two instances
each); per batch, each of 40 hosts PUTs its inventories (a changed
``reserved``, not counted), then another host's aggregates are read
(counted: the look, the log, the provider's rows, the catalog's maps);
batches alternate the two ways in one process, so a busy machine slows
both alike: median and min of ``--batches`` each (a first round not
counted), the ratio of the medians, and a plain read after each for
the floor.

    .venv/bin/python tools/bench/follow_ab.py [--hosts N] [--out F]
"""

import argparse
import collections
import io
import json
import os
import statistics
import sys
import time
import wsgiref.util

import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import heartbeat  # noqa: E402

from placement.objects.catalog import rows  # noqa: E402
from tests import fixtures  # noqa: E402

INV = rows.INV
BATCH = 40
HEADERS = {
    "HTTP_X_AUTH_TOKEN": "admin",
    "HTTP_ACCEPT": "application/json",
    "HTTP_OPENSTACK_API_VERSION": "placement 1.39",
}


def _executed(self, conn, wanted):
    """``Rows.__init__`` before: each statement built anew and run
    through ``Connection.execute``."""

    def where(column):
        if wanted is None:
            return ()
        return (column.in_(sa.bindparam("ids", expanding=True)),)

    def grouped(column):
        into = collections.defaultdict(set)
        rp_column = column.table.c.resource_provider_id
        statement = sa.select(rp_column, column).where(*where(rp_column))
        for rp, value in conn.execute(statement, params):
            into[rp].add(value)
        return {rp: one(frozenset(values)) for rp, values in into.items()}

    params = {} if wanted is None else {"ids": sorted(wanted)}
    columns = (rows.RP.c.id, rows.RP.c.uuid, rows.RP.c.name)
    parents = (rows.RP.c.parent_provider_id, rows.RP.c.root_provider_id)
    statement = sa.select(*columns, *parents).where(*where(rows.RP.c.id))
    self.providers = {
        rp: (rows.Provider(rp, parent, root), uuid, name)
        for rp, uuid, name, parent, root in conn.execute(
            statement.order_by(rows.RP.c.id), params
        )
    }
    self.inventories = collections.defaultdict(dict)
    one = rows.Interned()
    parsed = {}
    for rp, rc, ratio, joined in conn.execute(
        sa.select(
            INV.c.resource_provider_id,
            INV.c.resource_class_id,
            INV.c.allocation_ratio,
            rows._JOINED,
        ).where(*where(INV.c.resource_provider_id)),
        params,
    ):
        inventory = parsed.get((joined, ratio))
        if inventory is None:
            total, reserved, least, most, step = map(int, joined.split(","))
            inventory = parsed[joined, ratio] = one(
                rows.Inventory(total, reserved, ratio, least, most, step, 0)
            )
        self.inventories[rp][rc] = inventory
    self.traits = grouped(rows.RPT.c.trait_id)
    self.aggregates = grouped(rows.RPA.c.aggregate_id)


def _call(app, method, path, body=None):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, **HEADERS}
    if body is not None:
        data = json.dumps(body).encode()
        environ["CONTENT_TYPE"] = "application/json"
        environ["CONTENT_LENGTH"] = str(len(data))
        environ["wsgi.input"] = io.BytesIO(data)
    wsgiref.util.setup_testing_defaults(environ)
    status = []
    answer = b"".join(app(environ, lambda s, h, e=None: status.append(s)))
    assert status[0].startswith("200"), (status, answer)
    return answer


def _put(app, host):
    """``host`` PUTs its inventories with a changed ``reserved``."""
    found = json.loads(_call(app, "GET", host.url + "/inventories"))
    inventories = dict(found["inventories"])
    disk = inventories["DISK_GB"]
    inventories["DISK_GB"] = dict(disk, reserved=1 - disk["reserved"])
    generation = found["resource_provider_generation"]
    _call(
        app,
        "PUT",
        host.url + "/inventories",
        {"resource_provider_generation": generation, "inventories": inventories},
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--out", help="the figures as JSON into this file")
    args = parser.parse_args()
    load = os.getloadavg()
    ways = {"execute": _executed, "plain": rows.Rows.__init__}
    found = {way: [] for way in (*ways, "floor")}
    kept = rows.Rows.__init__
    with fixtures.app("mysql") as (app, db):
        uuids = heartbeat.fill(db, args.hosts, 2)
        hosts = [heartbeat.Host(n, rp) for n, rp in enumerate(uuids[: 2 * BATCH])]
        try:
            for batch in range(args.batches + 1):
                for way, function in ways.items():
                    rows.Rows.__init__ = function
                    spent = floor = 0.0
                    for n in range(BATCH):
                        _put(app, hosts[n])
                        read = hosts[BATCH + n].url + "/aggregates"
                        start = time.process_time()
                        _call(app, "GET", read)
                        spent += time.process_time() - start
                        start = time.process_time()
                        _call(app, "GET", read)
                        floor += time.process_time() - start
                    if batch:
                        found[way].append(spent / BATCH * 1e3)
                        found["floor"].append(floor / BATCH * 1e3)
        finally:
            rows.Rows.__init__ = kept
    medians = {way: statistics.median(ms) for way, ms in found.items()}
    for way, ms in found.items():
        print("%-8s %.3f ms (min %.3f)" % (way, medians[way], min(ms)))
    ratio = medians["plain"] / medians["execute"]
    print("ratio %.2f" % ratio)
    if args.out:
        figures = {
            "tool": "tools/bench/follow_ab.py (CPU ms per read after a PUT)",
            "hosts": args.hosts,
            "batch": BATCH,
            "batches": args.batches,
            "load_average": load,
            "load_average_after": os.getloadavg(),
            "results": {
                way: {"median_ms": medians[way], "min_ms": min(ms)}
                for way, ms in found.items()
            },
            "ratio": ratio,
        }
        with open(args.out, "w") as out:
            json.dump(figures, out, indent=1)
            out.write("\n")


if __name__ == "__main__":
    main()
