"""A connection lost at any point of a request: the server kills it just
before one of the request's statements runs, or just before its commit,
one point after the other. Every such request answers a JSON 503 with
Retry-After (never a 500, nor a 200 whose body breaks off), writes
nothing half, and the next request is served again.

The kill is deterministic: the test's own listener on the engine asks the
server to end exactly that connection (``KILL CONNECTION`` on MySQL,
``pg_terminate_backend`` on PostgreSQL) from a connection of its own."""

import contextlib
import uuid

import httpx
import pytest
import sqlalchemy as sa

from placement.objects.catalog import verify
from tests import fixtures

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
SERVERS = ("mysql", "mysqldb", "postgresql")


class Killer:
    """Counts the points (statements, commits) of ``engine``'s
    connections and kills the connection at point number ``at``."""

    def __init__(self, backend, engine):
        self.backend = backend
        self.engine = engine
        self.admin = fixtures._admin(backend)
        self.at = None
        self.points = 0
        sa.event.listen(engine, "before_cursor_execute", self._statement)
        sa.event.listen(engine, "commit", self._commit)

    def close(self):
        sa.event.remove(self.engine, "before_cursor_execute", self._statement)
        sa.event.remove(self.engine, "commit", self._commit)
        self.admin.dispose()

    def _statement(self, conn, cursor, statement, *args):
        self._point(conn)

    def _commit(self, conn):
        self._point(conn)

    def _point(self, conn):
        self.points += 1
        if self.points != self.at:
            return
        dbapi = conn.connection.dbapi_connection
        with self.admin.connect() as admin:
            if self.backend != "postgresql":
                admin.exec_driver_sql("KILL CONNECTION %d" % dbapi.thread_id())
            else:
                admin.execute(
                    sa.text("SELECT pg_terminate_backend(:pid)"),
                    {"pid": dbapi.info.backend_pid},
                )

    @contextlib.contextmanager
    def counting(self, at=None):
        self.at, self.points = at, 0
        try:
            yield
        finally:
            self.at = None


@pytest.fixture(params=SERVERS)
def served(request, monkeypatch):
    backend = request.param
    # A request compares the catalog with the database's fingerprint when
    # the last comparison is 0.5 s old: a point count that depends on the
    # clock. Here only the first comparison falls due, so each request
    # after it has the same points every time.
    monkeypatch.setattr(verify, "VERIFY_EVERY_S", float("inf"))
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db):
        client = httpx.Client(
            transport=httpx.WSGITransport(app=app),
            base_url="http://localhost",
            headers=ADMIN,
        )
        killer = Killer(backend, db.engine)
        try:
            yield client, killer
        finally:
            killer.close()


def _compute_tree(client):
    """One compute node with a GPU child; returns the root's uuid."""
    root, child = str(uuid.uuid4()), str(uuid.uuid4())
    assert (
        client.post("/resource_providers", json={"uuid": root, "name": root})
    ).status_code == 200
    assert (
        client.post(
            "/resource_providers",
            json={"uuid": child, "name": child, "parent_provider_uuid": root},
        )
    ).status_code == 200
    for rp, inventories in (
        (root, {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}),
        (child, {"VGPU": {"total": 4}}),
    ):
        resp = client.put(
            "/resource_providers/%s/inventories" % rp,
            json={"resource_provider_generation": 0, "inventories": inventories},
        )
        assert resp.status_code == 200, resp.text
    return root


def _every_point(client, killer, request, check_unchanged=None, points=None):
    """Send ``request()`` once per point it has (``points`` if given, else
    more than one), killing its connection at that point; every answer is
    a JSON 503 with Retry-After, and the request succeeds again
    afterwards."""
    # The first time may read the worker's catalog too, the second compare
    # it with the database's fingerprint (then none falls due).
    for _ in range(2):
        assert request().status_code in (200, 204)
    with killer.counting():
        assert request().status_code in (200, 204)
    found = killer.points
    assert found == points if points else found > 1
    for at in range(1, found + 1):
        with killer.counting(at):
            resp = request()
        assert resp.status_code == 503, (at, found, resp.status_code, resp.text)
        assert int(resp.headers["retry-after"]) > 0
        (error,) = resp.json()["errors"]
        assert error["status"] == 503
        if check_unchanged is not None:
            check_unchanged()
    with killer.counting():
        assert request().status_code in (200, 204)


@pytest.mark.parametrize("catalog", [True, False], ids=["catalog", "sql"])
def test_candidates_stream(served, catalog):
    """No limit: the answer is streamed, but its head (all of a small
    answer) is produced before the status goes out: a connection lost
    until then is still a 503."""
    client, killer = served
    _compute_tree(client)
    url = "/allocation_candidates?resources=VCPU:1&resources1=VGPU:1"
    with fixtures.overrides(**{"placement.provider_catalog": catalog}):
        # From the catalog the look is its one statement (in autocommit:
        # no COMMIT, ``Database.several_reads``).
        points = 1 if catalog else None
        _every_point(client, killer, lambda: client.get(url), points=points)


def test_candidates_with_limit(served):
    client, killer = served
    _compute_tree(client)
    url = "/allocation_candidates?resources=VCPU:1&limit=1"
    # From the catalog: its look, in autocommit (no COMMIT).
    _every_point(client, killer, lambda: client.get(url), points=1)


@pytest.mark.parametrize(
    "kind", ("", "/inventories", "/inventories/VCPU", "/traits", "/aggregates")
)
def test_single_reads(served, kind):
    """A read of one statement, in autocommit (``Database.single_read``):
    its only point is that statement."""
    client, killer = served
    url = "/resource_providers/%s%s" % (_compute_tree(client), kind)
    _every_point(client, killer, lambda: client.get(url), points=1)


def test_provider_list(served):
    client, killer = served
    _compute_tree(client)
    _every_point(
        client, killer, lambda: client.get("/resource_providers?resources=VCPU:1")
    )


def test_catalog_catch_up(served):
    """A write between requests: the next one brings the worker's catalog
    up to date (by the change log) before it answers, on a connection of
    its own; lost there too, it is a 503."""
    client, killer = served
    root = _compute_tree(client)
    url = "/resource_providers/%s/traits" % root
    candidates = "/allocation_candidates?resources=VCPU:1"

    def change_traits(n):
        assert client.put("/traits/CUSTOM_T%d" % n).status_code in (201, 204)
        generation = client.get(url).json()["resource_provider_generation"]
        body = {
            "resource_provider_generation": generation,
            "traits": ["CUSTOM_T%d" % n],
        }
        assert client.put(url, json=body).status_code == 200

    with fixtures.overrides(**{"placement.provider_catalog": True}):
        for _ in range(2):  # as in _every_point
            assert client.get(candidates).status_code == 200
        # Twice: a look that found the catalog behind has the next ones
        # read the shards' counts too (``Holder.look``), a statement less.
        for n in (0, 1):
            change_traits(n)
            with killer.counting():
                assert client.get(candidates).status_code == 200
        points = killer.points
        for at in range(1, points + 1):
            change_traits(at + 1)
            with killer.counting(at):
                resp = client.get(candidates)
            assert resp.status_code == 503, (at, points, resp.text)
            assert int(resp.headers["retry-after"]) > 0
        assert client.get(candidates).status_code == 200


def test_claim(served):
    """A write transaction lost at any statement or at its commit: 503,
    and nothing of it stays (usage unchanged)."""
    client, killer = served
    root = _compute_tree(client)
    consumer = str(uuid.uuid4())
    project, user = str(uuid.uuid4()), str(uuid.uuid4())
    usages = "/resource_providers/%s/usages" % root

    def claim():
        return client.put(
            "/allocations/%s" % consumer,
            json={
                "allocations": {root: {"resources": {"VCPU": 2}}},
                "consumer_generation": None,
                "project_id": project,
                "user_id": user,
                "consumer_type": "INSTANCE",
            },
        )

    def unclaimed():
        assert client.get(usages).json()["usages"]["VCPU"] == 0

    # The first claim of a project also stores its project and user.
    for _ in range(2):
        with killer.counting():
            resp = claim()
            assert resp.status_code == 204, resp.text
        points = killer.points
        assert client.delete("/allocations/%s" % consumer).status_code == 204
        consumer = str(uuid.uuid4())
    for at in range(1, points + 1):
        with killer.counting(at):
            resp = claim()
        assert resp.status_code == 503, (at, points, resp.text)
        assert int(resp.headers["retry-after"]) > 0
        unclaimed()
    assert claim().status_code == 204
    assert client.get(usages).json()["usages"]["VCPU"] == 2
