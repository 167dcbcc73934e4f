"""This service beside the reference (openstack-placement, pinned in
tools/reference-requirements.txt, installed into .venv-reference by
tools/ensure-reference) on one database, as while an operator replaces
API hosts one at a time (doc/operations.md, "Replacing the reference host
by host"). The reference is a black box: its HTTP API and its
`placement-manage`.

On each database: the reference creates the schema (`db sync`), ours
brings it to its head, and both serve it (started together, or ours
first). Writes through the reference show in ours' answers after the
comparison period (ours then answers what the reference answers), a host
the reference fills is never offered, claims through both on the same
hosts (taking turns) never exceed capacity, and a restore from a backup taken earlier
is what ours answers from.
"""

import contextlib
import os
import subprocess
import threading
import time
import uuid

import os_resource_classes
import os_traits
import pytest
import requests
import sqlalchemy as sa

from placement.db import tables
from placement.objects.catalog import verify
from tests import fixtures
from tests import helpers
from tests import ports
from tests.functional import live_server
from tests.functional.test_shared_database import dump
from tests.functional.test_shared_database import restore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join(ROOT, ".venv-reference", "bin")
HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
HOST = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 16384}}


def _reference(name):
    path = os.path.join(REFERENCE, name)
    if not os.path.exists(path):
        pytest.fail(
            "the reference service is not installed (%s): run tools/ensure-reference"
            % path
        )
    return path


class Api:
    """One server's API, as a client sees it."""

    def __init__(self, url):
        self.url = url
        self.session = requests.Session()
        self.session.headers.update(HEADERS)

    def call(self, method, path, body=None, expect=(200, 201, 204)):
        resp = self.session.request(method, self.url + path, json=body, timeout=30)
        if expect is not None:
            assert resp.status_code in expect, (method, path, resp.text)
        return resp

    def host(self, name):
        rp = self.call("POST", "/resource_providers", {"name": name}).json()["uuid"]
        self.call(
            "PUT",
            "/resource_providers/%s/inventories" % rp,
            {"resource_provider_generation": 0, "inventories": HOST},
        )
        return rp

    def generation(self, rp):
        return self.call("GET", "/resource_providers/%s" % rp).json()["generation"]

    def candidates(self, query):
        found = self.call("GET", "/allocation_candidates?" + query).json()
        return set(found["provider_summaries"])

    def usages(self, rp):
        return self.call("GET", "/resource_providers/%s/usages" % rp).json()["usages"]


@contextlib.contextmanager
def _both(url, workdir, together):
    """(reference, ours) serving ``url``: started at the same moment, or
    ours first and the reference once ours answers."""
    env = helpers.clean_env(
        OS_PLACEMENT_DATABASE__CONNECTION=url, OS_API__AUTH_STRATEGY="noauth2"
    )
    # The reference's driver for PostgreSQL is psycopg2.
    reference_env = dict(
        env,
        OS_PLACEMENT_DATABASE__CONNECTION=url.replace(
            "postgresql+psycopg:", "postgresql+psycopg2:"
        ),
    )
    # Its own `placement` package, never this tree's (empty is unset).
    reference_env["PYTHONPATH"] = ""
    synced = helpers.run([_reference("placement-manage"), "db", "sync"], reference_env)
    assert synced.returncode == 0, synced.stderr
    synced = helpers.run([helpers.script("placement-manage"), "db", "sync"], env)
    assert synced.returncode == 0, synced.stderr
    port = ports.free_port()
    reference_url = "http://127.0.0.1:%d" % port
    command = [
        _reference("gunicorn"),
        "-b",
        "127.0.0.1:%d" % port,
        "-w",
        "1",
        "--threads",
        "4",
        "placement.wsgi.api:application",
    ]
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(os.path.join(workdir, "reference.log"), "wb"))

        def start_reference():
            proc = subprocess.Popen(
                command,
                env=reference_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
            )
            stack.callback(live_server.stop, proc)
            return proc

        proc = start_reference() if together else None
        ours = stack.enter_context(
            live_server.placement_api(
                workdir, "--workers", "1", OS_PLACEMENT_DATABASE__CONNECTION=url
            )
        )
        if proc is None:
            proc = start_reference()
        try:
            live_server._wait_up(reference_url + "/", proc)
        except RuntimeError as exc:
            log.flush()
            with open(log.name, "rb") as written:
                tail = written.read()[-4000:].decode(errors="replace")
            raise RuntimeError("%s; the reference's log ends:\n%s" % (exc, tail))
        yield Api(reference_url), Api(ours)


def _past_the_bound():
    """Wait out ours' comparison period: its next request compares its
    catalog with the database before answering."""
    time.sleep(verify.VERIFY_EVERY_S + 0.1)


def _same_answers(reference, ours, queries):
    for query in queries:
        assert ours.candidates(query) == reference.candidates(query), query


@pytest.mark.parametrize(
    "backend, together",
    [("sqlite", True), ("mysql", False), ("mysql", True), ("postgresql", True)],
    ids=["sqlite-together", "mysql-ours-first", "mysql-together", "postgresql"],
)
def test_beside_the_reference(backend, together, tmp_path):
    fixtures.require_backend(backend)
    with (
        fixtures.database_url(backend) as url,
        _both(url, str(tmp_path), together) as (
            reference,
            ours,
        ),
    ):
        engine = sa.create_engine(url)
        try:
            _standard_class_ids(engine)
            _scenario(reference, ours, engine)
        finally:
            engine.dispose()


def test_reference_starts_beside_writes_after_our_db_sync(tmp_path):
    """The reference's start-up adds the standard traits it finds missing
    and, on SQLite, fails to start ("database is locked") when another
    connection commits between its read and its insert: with both
    implementations' servers starting at once, ours adding the same
    names, it failed now and then. Our ``db sync`` adds them (the
    reference's does not), so a reference started after it has nothing
    to add and starts while others write."""
    with fixtures.database_url("sqlite") as url:
        env = helpers.clean_env(OS_PLACEMENT_DATABASE__CONNECTION=url)
        reference_env = dict(env, PYTHONPATH="")
        synced = helpers.run(
            [_reference("placement-manage"), "db", "sync"], reference_env
        )
        assert synced.returncode == 0, synced.stderr
        synced = helpers.run([helpers.script("placement-manage"), "db", "sync"], env)
        assert synced.returncode == 0, synced.stderr
        engine = sa.create_engine(url)
        try:
            with engine.begin() as conn:
                names = set(conn.scalars(sa.select(tables.traits.c.name)))
                conn.exec_driver_sql("CREATE TABLE churn (n INTEGER)")
            assert names == set(os_traits.get_traits())
            _standard_class_ids(engine)
            stop = threading.Event()
            commits = []

            def churn():
                while not stop.is_set():
                    with engine.begin() as conn:
                        conn.exec_driver_sql("INSERT INTO churn VALUES (1)")
                    commits.append(1)

            writer = threading.Thread(target=churn)
            writer.start()
            try:
                port = ports.free_port()
                base = "http://127.0.0.1:%d" % port
                with live_server.running(
                    [
                        _reference("gunicorn"),
                        "-b",
                        "127.0.0.1:%d" % port,
                        "-w",
                        "1",
                        "placement.wsgi.api:application",
                    ],
                    dict(reference_env, OS_API__AUTH_STRATEGY="noauth2"),
                    str(tmp_path / "reference.log"),
                    base + "/",
                    cwd=str(tmp_path),
                ):
                    listed = Api(base).call("GET", "/traits").json()["traits"]
            finally:
                stop.set()
                writer.join()
        finally:
            engine.dispose()
    assert set(listed) == names
    assert len(commits) > 10  # it did write meanwhile


def _standard_class_ids(engine):
    with engine.connect() as conn:
        ids = dict(
            conn.execute(
                sa.select(tables.resource_classes.c.name, tables.resource_classes.c.id)
            ).all()
        )
    for expected, name in enumerate(os_resource_classes.STANDARDS):
        assert ids.get(name) == expected, name


def _scenario(reference, ours, engine):
    hosts = [reference.host("ref-%d" % i) for i in range(5)]
    hosts.append(ours.host("ours-0"))
    backup = dump(engine)
    _past_the_bound()
    assert ours.candidates("resources=VCPU:1,MEMORY_MB:512") == set(hosts)

    emptied, filled, traited, aggregated, renamed, _ = hosts
    reference.call("DELETE", "/resource_providers/%s/inventories" % emptied)
    reference.call(
        "PUT",
        "/allocations/%s" % uuid.uuid4(),
        {
            "allocations": {filled: {"resources": {"VCPU": 8}}},
            "project_id": "p",
            "user_id": "u",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    # Usage is never cached: the host the reference filled is not offered
    # even before the period is over.
    assert filled not in ours.candidates("resources=VCPU:1")
    reference.call("PUT", "/traits/CUSTOM_ROLLING")
    reference.call(
        "PUT",
        "/resource_providers/%s/traits" % traited,
        {
            "resource_provider_generation": reference.generation(traited),
            "traits": ["CUSTOM_ROLLING"],
        },
    )
    aggregate = str(uuid.uuid4())
    reference.call(
        "PUT",
        "/resource_providers/%s/aggregates" % aggregated,
        {
            "resource_provider_generation": reference.generation(aggregated),
            "aggregates": [aggregate],
        },
    )
    reference.call(
        "PUT", "/resource_providers/%s" % renamed, {"name": "renamed-by-reference"}
    )
    hosts.append(reference.host("ref-new"))
    _past_the_bound()
    queries = (
        "resources=VCPU:1",
        "resources=VCPU:1&required=CUSTOM_ROLLING",
        "resources=VCPU:1&member_of=%s" % aggregate,
        "resources=VCPU:1&required=!CUSTOM_ROLLING",
    )
    _same_answers(reference, ours, queries)
    assert ours.candidates("resources=VCPU:1&required=CUSTOM_ROLLING") == {traited}
    listed = ours.call("GET", "/resource_providers").json()["resource_providers"]
    assert {p["uuid"]: p["name"] for p in listed}[renamed] == "renamed-by-reference"
    assert len(listed) == len(hosts)

    _claims_through_both(reference, ours, hosts)

    restore(engine, backup)
    _past_the_bound()
    _same_answers(
        reference,
        ours,
        ("resources=VCPU:1", "resources=VCPU:1&member_of=%s" % aggregate),
    )
    assert ours.candidates("resources=VCPU:1") == set(hosts[:6])
    listed = ours.call("GET", "/resource_providers").json()["resource_providers"]
    assert {p["name"] for p in listed} == {"ref-%d" % i for i in range(5)} | {"ours-0"}


def _claims_through_both(reference, ours, hosts):
    """Clients of both servers claim VCPU:2 on the same hosts, taking
    turns, until their server offers nothing: every unit is claimed once,
    none twice, and both servers report the same usage. Turns, not
    threads: the reference fails concurrent claims by itself (SQLite: 500
    "database is locked"; MariaDB: four of its own clients at once put 10
    VCPU on hosts of 8; PostgreSQL: the same beside ours' clients).
    """
    free = {rp for rp in hosts if reference.usages(rp).get("VCPU", 0) == 0}
    free = {rp for rp in free if "VCPU" in _inventories(reference, rp)}

    def client(api, turns):
        claimed = []
        for _ in range(turns):
            offered = api.candidates("resources=VCPU:2&limit=3")
            if not offered:
                break
            rp = sorted(offered)[0]
            consumer = str(uuid.uuid4())
            resp = api.call(
                "PUT",
                "/allocations/%s" % consumer,
                {
                    "allocations": {rp: {"resources": {"VCPU": 2}}},
                    "project_id": "p",
                    "user_id": "u",
                    "consumer_generation": None,
                    "consumer_type": "INSTANCE",
                },
                expect=(204, 409),
            )
            if resp.status_code == 204:
                claimed.append(rp)
        return claimed

    claimed = []
    for turn in range(40):
        claimed += client((reference, ours)[turn % 2], turns=1)
    # Every host the clients could use is full, and holds exactly what was
    # claimed on it, as both servers report it.
    usages = {rp: reference.usages(rp)["VCPU"] for rp in free}
    assert usages == {rp: 2 * claimed.count(rp) for rp in free}
    assert len(claimed) == 4 * len(free), usages
    for rp in free:
        assert reference.usages(rp)["VCPU"] == 2 * claimed.count(rp) == 8
        assert ours.usages(rp) == reference.usages(rp)


def _inventories(api, rp):
    return api.call("GET", "/resource_providers/%s/inventories" % rp).json()[
        "inventories"
    ]
