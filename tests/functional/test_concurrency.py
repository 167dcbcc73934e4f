"""Concurrent claims against real gunicorn servers never over-allocate.

Several client threads fire PUT /allocations/{new uuid} (and delete some of
their own claims again) at multi-worker gunicorn servers sharing one
database: two servers on MySQL and on PostgreSQL, one on SQLite. Afterwards
the API must show that no provider's usage exceeds its capacity, that the
successful claims add up exactly to the usage (nothing lost, nothing
phantom), that every refusal was a clean 409 that left no allocation and
that nothing answered 5xx. test_galera runs the same against a cluster.

Providers are set up directly in the database (the claims, not provider
creation, are under test); every check afterwards goes through the API.
Run with ``-s`` to see claims/s and 409 counts.
"""

import collections
import contextlib
import dataclasses
import os
import random
import threading
import time
import uuid
from collections.abc import Mapping

import pytest
import requests
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import schema
from placement.db import tables
from placement.objects import standard_names
from placement.objects.catalog import changes
from tests import fixtures
from tests.functional import live_server

pytestmark = pytest.mark.slow

PROVIDERS = 4
CAPACITY = {"VCPU": 24, "MEMORY_MB": 4096}
THREADS = 8
CLAIMS_PER_THREAD = 40
DELETE_CHANCE = 0.2


@dataclasses.dataclass(frozen=True)
class Mode:
    """The shape of a claims check: how many providers of what capacity,
    how many client threads making how many claims each (of ``amount``
    VCPU, or of random sizes), and how often a client deletes one of its
    own claims instead."""

    providers: int = PROVIDERS
    capacity: Mapping[str, int] = dataclasses.field(default_factory=lambda: CAPACITY)
    threads: int = THREADS
    claims_per_thread: int = CLAIMS_PER_THREAD
    delete_chance: float = DELETE_CHANCE
    amount: int | None = None  # VCPU of every claim; None: random sizes


# Hot: every claim of 1 VCPU on one of only 2 providers with room for all,
# from 16 threads, no deletes: nearly every claim races another for a
# provider generation (and on Galera fails certification now and then).
HOT = Mode(
    providers=2,
    capacity={"VCPU": 1000},
    threads=16,
    claims_per_thread=50,
    delete_chance=0.0,
    amount=1,
)
HEADERS = {
    "x-auth-token": "admin",
    "accept": "application/json",
    "content-type": "application/json",
    "openstack-api-version": "placement latest",
}


def _create_providers(url, count=PROVIDERS, capacity=CAPACITY):
    """Schema, standard names and ``count`` providers with ``capacity``."""
    engine = db_api.create_engine(url)
    try:
        schema.upgrade(engine)
        db = db_api.Database(engine, fixtures.configure())
        standard_names.sync_standard_names(db)
        uuids = [str(uuid.uuid4()) for _ in range(count)]
        with db.writer() as conn:
            # Rows written directly: every catalog reads them whole.
            changes.record(conn, changes.EVERYTHING)
            rc = dict(
                conn.execute(
                    sa.select(
                        tables.resource_classes.c.name, tables.resource_classes.c.id
                    ).where(tables.resource_classes.c.name.in_(capacity))
                ).all()
            )
            for n, rp_uuid in enumerate(uuids):
                rp_id = conn.execute(
                    tables.resource_providers.insert().values(
                        uuid=rp_uuid, name="rp-%d" % n, generation=0
                    )
                ).inserted_primary_key[0]
                conn.execute(
                    tables.resource_providers.update()
                    .where(tables.resource_providers.c.id == rp_id)
                    .values(root_provider_id=rp_id)
                )
                conn.execute(
                    tables.inventories.insert(),
                    [
                        {
                            "resource_provider_id": rp_id,
                            "resource_class_id": rc[c],
                            "total": total,
                            "reserved": 0,
                            "min_unit": 1,
                            "max_unit": total,
                            "step_size": 1,
                            "allocation_ratio": 1.0,
                        }
                        for c, total in capacity.items()
                    ],
                )
        return uuids
    finally:
        engine.dispose()


def _server(db_url, workers, workdir):
    """A gunicorn over ``db_url`` configured only through the environment
    (an empty placement.conf keeps any system-wide one out)."""
    open(os.path.join(workdir, "placement.conf"), "w").close()
    env = dict(
        os.environ,
        OS_API__AUTH_STRATEGY="noauth2",
        OS_PLACEMENT_DATABASE__CONNECTION=db_url,
        OS_PLACEMENT_CONFIG_DIR=workdir,
    )
    return live_server.serve(
        workers, env, os.path.join(workdir, "gunicorn-%s.log" % uuid.uuid4().hex[:8])
    )


class Tally:
    """What the clients observed, shared by the client threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.claims = {}  # consumer uuid -> (provider uuid, resources)
        self.generations = collections.Counter()  # provider -> claims made
        self.refused = []  # consumer uuids whose claim was refused
        self.statuses = collections.Counter()
        self.conflicts = collections.Counter()  # 409 error code -> count
        self.problems = []

    def record(self, what, response):
        with self.lock:
            self.statuses[what, response.status_code] += 1
            if response.status_code == 409:
                try:
                    error = response.json()["errors"][0]
                    self.conflicts[error["code"]] += 1
                except (ValueError, KeyError, IndexError):
                    self.problems.append(("unclean 409", response.text))
            elif response.status_code >= 300:
                self.problems.append((what, response.status_code, response.text[:300]))


def random_claim(session, base, providers, rnd, timeout=None, amount=None):
    """PUT a claim of random size (or of ``amount`` VCPU) on a random
    provider of ``providers`` for a new consumer; (consumer, provider,
    resources, response)."""
    consumer = str(uuid.uuid4())
    rp = rnd.choice(providers)
    if amount is None:
        resources = {
            "VCPU": rnd.randint(1, 4),
            "MEMORY_MB": rnd.choice((256, 512, 1024)),
        }
    else:
        resources = {"VCPU": amount}
    response = session.put(
        base + "/allocations/" + consumer,
        json={
            "allocations": {rp: {"resources": resources}},
            "project_id": "proj",
            "user_id": "user",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
        timeout=timeout,
    )
    return consumer, rp, resources, response


def _client(base_urls, providers, tally, seed, mode):
    rnd = random.Random(seed)
    mine = []
    with requests.Session() as session:
        session.headers.update(HEADERS)
        for n in range(mode.claims_per_thread):
            base = base_urls[n % len(base_urls)]
            if mine and rnd.random() < mode.delete_chance:
                consumer = mine.pop(rnd.randrange(len(mine)))
                response = session.delete(base + "/allocations/" + consumer)
                if response.status_code == 204:
                    with tally.lock:
                        del tally.claims[consumer]
                tally.record("delete", response)
                continue
            consumer, rp, resources, response = random_claim(
                session, base, providers, rnd, amount=mode.amount
            )
            with tally.lock:
                if response.status_code == 204:
                    tally.claims[consumer] = (rp, resources)
                    tally.generations[rp] += 1
                else:
                    tally.refused.append(consumer)
            if response.status_code == 204:
                mine.append(consumer)
            tally.record("claim", response)


def _check_through_api(base, providers, tally, capacity=CAPACITY):
    expected = {rp: collections.Counter() for rp in providers}
    for rp, resources in tally.claims.values():
        expected[rp].update(resources)
    with requests.Session() as session:
        session.headers.update(HEADERS)
        for rp in providers:
            # Each claim answered 204 moved its provider's generation once
            # (deletes move none), and nothing else did: a claim written
            # in part (its rows without its generation move) shows here.
            got = session.get(base + "/resource_providers/%s" % rp).json()
            assert got["generation"] == tally.generations[rp], (rp, got)
            usages = session.get(base + "/resource_providers/%s/usages" % rp)
            assert usages.status_code == 200, usages.text
            usages = usages.json()["usages"]
            for rc, total in capacity.items():
                assert usages[rc] <= total, (rp, rc, usages)
                assert usages[rc] == expected[rp][rc], (rp, rc, usages)
            allocations = session.get(
                base + "/resource_providers/%s/allocations" % rp
            ).json()
            claimed = {c for c, (p, _) in tally.claims.items() if p == rp}
            assert set(allocations["allocations"]) == claimed
            for consumer, entry in allocations["allocations"].items():
                assert entry["resources"] == tally.claims[consumer][1]
                assert entry["consumer_generation"] == 1
        # A refused claim left nothing behind (not even elsewhere).
        for consumer in tally.refused:
            left = session.get(base + "/allocations/" + consumer)
            assert left.status_code == 200, left.text
            assert left.json()["allocations"] == {}, (consumer, left.text)


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_concurrent_claims_never_over_allocate(backend, tmp_path):
    fixtures.require_backend(backend)
    servers, workers = (1, 3) if backend == "sqlite" else (2, 2)
    with fixtures.database_url(backend) as db_url:
        claim_and_check(backend, [db_url] * servers, workers, str(tmp_path))


def claim_and_check(label, server_db_urls, workers, workdir, mode=Mode()):
    """Run the claiming clients (``mode``) against one server per URL of
    ``server_db_urls`` (providers created through the first), check the
    outcome through the API and return claims per second."""
    providers = _create_providers(server_db_urls[0], mode.providers, mode.capacity)
    with contextlib.ExitStack() as stack:
        bases = [
            stack.enter_context(_server(db_url, workers, workdir))
            for db_url in server_db_urls
        ]
        tally = Tally()
        threads = [
            threading.Thread(target=_client, args=(bases, providers, tally, seed, mode))
            for seed in range(mode.threads)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        claims = sum(n for (what, _), n in tally.statuses.items() if what == "claim")
        print(
            "\n[%s] %d servers x %d workers, %d threads: %d claims in "
            "%.1fs (%.1f claims/s); statuses %s; 409 codes %s"
            % (
                label,
                len(bases),
                workers,
                mode.threads,
                claims,
                elapsed,
                claims / elapsed,
                dict(tally.statuses),
                dict(tally.conflicts),
            )
        )
        # Every refusal a clean 409: capacity, or retries exhausted.
        assert not tally.problems, tally.problems[:5]
        assert set(tally.conflicts) <= {
            "placement.undefined_code",
            "placement.concurrent_update",
        }
        assert not any(status >= 500 for _, status in tally.statuses)
        assert tally.claims, "no claim succeeded at all"
        _check_through_api(bases[-1], providers, tally, mode.capacity)
        return claims / elapsed
