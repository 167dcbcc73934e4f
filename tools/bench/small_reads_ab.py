"""CPU per request, in process, of the small reads with and without the
cuts of issue 45 (tools/bench/README, third round and after): the
provider read by SQL (``sql``) or from the catalog (``memory``), the
catalog's look through ``Connection.execute`` (``execute``) or on the
driver's cursor (``plain``), and a provider's inventories, traits and
aggregates (at nova's microversions, and at 1.39 with their times) by
SQL alone (``sql``) or from the catalog after the look (``memory``),
and the reads of one statement on a connection taken from the pool
each time (``pooled``) or kept by the thread (``kept``); a provider's
usages from the catalog with the look in a read transaction
(``transaction``) or in autocommit (``autocommit``); nova's look for the
sharing providers of the provider's aggregate (none) answered by the
catalog after its look in a read transaction (``reader``) or in
autocommit on the thread's kept connection (``single``).

The whole app is called directly (no HTTP) on a fresh MariaDB database
with one provider holding an inventory, a trait, an aggregate and one
allocation (beside ``--hosts`` hosts of ``heartbeat.py``'s cloud, two
instances each); batches of 200 requests
alternate the two ways in one process, so a busy machine slows both
alike: median and min of 25 batches each (a first round not counted),
the ratio of the medians, and the bodies compared.

    .venv/bin/python tools/bench/small_reads_ab.py [--hosts N] [--out F] [way ...]

``--out`` also writes the figures as JSON, with the load average before
and after.

Ways name the cuts to run (e.g. ``kept``); all of them by default.
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import figures_file  # noqa: E402
import heartbeat  # noqa: E402
import profile_request  # noqa: E402

from placement.db import transaction  # noqa: E402
from placement.objects import common  # noqa: E402
from placement.objects import provider_list  # noqa: E402
from placement.objects import resource_provider as rp_obj  # noqa: E402
from placement.objects import usage  # noqa: E402
from placement.objects.catalog import changes  # noqa: E402
from placement.objects.catalog import refresh  # noqa: E402
from tests import fixtures  # noqa: E402
from tests import helpers  # noqa: E402

RP = "c0ffee00-0000-4000-8000-000000000001"
CONSUMER = "c0ffee00-0000-4000-8000-0000000000c1"
PROJECT = "c0ffee00-0000-4000-8000-0000000000a1"
AGGREGATE = "c0ffee00-0000-4000-8000-0000000000a9"
# nova's look for the sharing providers of the provider's aggregate (none).
SHARING = "?member_of=in:%s&required=MISC_SHARES_VIA_AGGREGATE" % AGGREGATE
HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
BATCH, BATCHES = 200, 25


def _sql_get(db, uuid):
    """The provider read by SQL alone (as before the catalog answered)."""
    with db.single_read() as conn:
        row = rp_obj._fetch(conn, uuid)
    if row is None:
        raise common.provider_not_found(uuid)
    return row


def _executed_look(conn):
    """The look through Connection.execute (as before plain_rows)."""
    count, tokens = conn.execute(changes.STAMP).one()
    return int(count or 0), int(tokens or 0)


@contextlib.contextmanager
def _pooled(self):
    """single_read with a connection taken from the pool for each read
    (as before a thread kept its own)."""
    with self._single.connect() as conn:
        yield conn


def _usages_in_transaction(db, uuid):
    """A provider's usages from the catalog with the look in a read
    transaction (as before it ran in autocommit): the look and a
    COMMIT."""
    with db.reader() as conn:
        catalog = refresh.current(db, conn)
    used = refresh.used_of(db, catalog)
    assert used is not None
    return usage._from_memory(catalog, used, uuid)


def _none_in_transaction(db, member_of=None, required=None):
    """The catalog's "no such providers" with its look in a read
    transaction (as before it ran in autocommit): the look and a COMMIT.
    The bench's list finds none."""
    with db.reader() as conn:
        assert provider_list._none_held(db, conn, member_of, required)
    return [], None


def _not_held(db, conn, uuid):
    """No provider from the catalog: its rows read by SQL alone (as
    before the catalog answered them)."""
    return None


# (module, attribute, {way: function}), and the paths each is tried on
# with their microversions (a provider's rows: nova's).
CUTS = (
    (rp_obj, "get", {"sql": _sql_get, "memory": rp_obj.get}, (("", "1.39"),)),
    (
        changes,
        "look",
        {"execute": _executed_look, "plain": changes.look},
        (("", "1.39"), ("/allocations", "1.39")),
    ),
    (
        rp_obj,
        "held",
        {"sql": _not_held, "memory": rp_obj.held},
        (
            ("/inventories", "1.0"),
            ("/traits", "1.6"),
            ("/aggregates", "1.19"),
            ("/inventories", "1.39"),
            ("/traits", "1.39"),
            ("/aggregates", "1.39"),
        ),
    ),
    (
        usage,
        "provider_usages",
        {"transaction": _usages_in_transaction, "autocommit": usage.provider_usages},
        (("/usages", "1.39"),),
    ),
    (
        provider_list,
        "list_providers",
        {"reader": _none_in_transaction, "single": provider_list.list_providers},
        ((SHARING, "1.39"),),
    ),
    (
        transaction.Database,
        "single_read",
        {"pooled": _pooled, "kept": transaction.Database.single_read},
        (
            ("", "1.39"),
            ("/allocations", "1.39"),
            ("/inventories", "1.0"),
            ("/traits", "1.6"),
            ("/aggregates", "1.19"),
            ("/usages", "1.39"),
        ),
    ),
)


def _seed(app):
    client = helpers.wsgi_client(app, HEADERS)
    for method, path, body in (
        ("POST", "/resource_providers", {"name": "bench", "uuid": RP}),
        (
            "PUT",
            "/resource_providers/%s/inventories" % RP,
            {
                "resource_provider_generation": 0,
                "inventories": {"MEMORY_MB": {"total": 1_000_000}},
            },
        ),
        ("PUT", "/traits/CUSTOM_BENCH", None),
        (
            "PUT",
            "/resource_providers/%s/aggregates" % RP,
            {"resource_provider_generation": 1, "aggregates": [AGGREGATE]},
        ),
        (
            "PUT",
            "/resource_providers/%s/traits" % RP,
            {"resource_provider_generation": 2, "traits": ["CUSTOM_BENCH"]},
        ),
        (
            "PUT",
            "/allocations/" + CONSUMER,
            {
                "allocations": {RP: {"resources": {"MEMORY_MB": 64}}},
                "project_id": PROJECT,
                "user_id": PROJECT,
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
        ),
    ):
        resp = client.request(method, path, json=body)
        assert resp.is_success, resp.text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ways", nargs="*", help="the cuts to run (all by default)")
    parser.add_argument("--hosts", type=int, default=0, help="hosts beside it")
    parser.add_argument("--out", help="the figures as JSON into this file")
    args = parser.parse_args()
    figures = {
        "tool": "tools/bench/small_reads_ab.py (CPU ms per request)",
        "hosts": args.hosts,
        "batch": BATCH,
        "batches": BATCHES,
        "load_average": os.getloadavg(),
        "results": [],
    }
    with fixtures.app("mysql") as (app, db):
        heartbeat.fill(db, args.hosts, 2)
        _seed(app)
        for module, name, ways, suffixes in CUTS:
            if args.ways and not set(args.ways) & set(ways):
                continue
            kept = getattr(module, name)
            for suffix, version in suffixes:
                # A provider's read, or a list (its query).
                listed = suffix.startswith("?")
                path = "/resource_providers" + (suffix if listed else "/" + RP + suffix)
                request = "GET /resource_providers" + (
                    suffix if listed else "/{uuid}" + suffix
                )
                found = {way: [] for way in ways}
                bodies = {}
                try:
                    for batch in range(BATCHES + 1):
                        for way, function in ways.items():
                            setattr(module, name, function)
                            start = time.process_time()
                            for _ in range(BATCH):
                                status, bodies[way] = profile_request.call(
                                    app, path, version
                                )
                                assert status.startswith("200"), status
                            if batch:
                                found[way].append(
                                    (time.process_time() - start) / BATCH * 1e3
                                )
                finally:
                    setattr(module, name, kept)
                assert len(set(bodies.values())) == 1, bodies
                (before, after) = ways
                medians = {way: statistics.median(ms) for way, ms in found.items()}
                figures["results"].append(
                    {
                        "request": request,
                        "microversion": version,
                        **{
                            way: {"median_ms": medians[way], "min_ms": min(ms)}
                            for way, ms in found.items()
                        },
                        "ratio": medians[after] / medians[before],
                    }
                )
                print(
                    "%s @%s: %s %.3f ms (min %.3f), %s %.3f ms (min %.3f), ratio %.2f"
                    % (
                        request,
                        version,
                        before,
                        medians[before],
                        min(found[before]),
                        after,
                        medians[after],
                        min(found[after]),
                        medians[after] / medians[before],
                    ),
                    flush=True,
                )
    figures["load_average_after"] = os.getloadavg()
    figures_file.write(args.out, figures)


if __name__ == "__main__":
    main()
