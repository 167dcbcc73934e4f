"""Answers never go back in time across a host's workers ("Monotonic
reads" in doc/architecture.md): once an answer has shown another
writer's change, no answer to a request sent after it lacks it, whichever
worker serves it. A real ``placement-api`` with two workers, one of them
slow to compare its catalog with the database on its own (its periods
made a minute long by a ``sitecustomize`` the test puts on its path: the
delay a loaded worker's follower can have), serves candidate searches
from several clients on new connections (so both workers answer) while
another writer inserts a provider by SQL, deletes it, and restores a
backup that has it."""

import concurrent.futures
import os
import textwrap
import threading
import time
import uuid

import pytest
import requests
import sqlalchemy as sa

from placement.objects.catalog import changes
from tests import fixtures
from tests.functional import backups
from tests.functional import live_server

pytestmark = pytest.mark.slow

HEADERS = {
    "x-auth-token": "admin",
    "openstack-api-version": "placement 1.39",
    "connection": "close",
}
CLIENTS = 4
AFTER = 40  # answers to requests sent after the first that showed the change
SHOW_WITHIN_S = 20.0
# The first worker forked compares its catalog only when asked to by
# another worker (or after LAG_S).
LAG_S = 600
SLOW_FIRST_WORKER = textwrap.dedent(
    """
    import os

    forks = [0]


    def _count():
        forks[0] += 1


    def _slow():
        if forks[0] == 1:
            from placement.objects.catalog import verify

            for name in ("VERIFY_EVERY_S", "FOLLOWED_VERIFY_S", "OWN_AFTER_S"):
                setattr(verify, name, %d)


    os.register_at_fork(before=_count, after_in_child=_slow)
    """
    % LAG_S
)


class Answers:
    """Candidate searches sent by CLIENTS threads, each on a new
    connection: (sent, answered, whether the provider showed)."""

    def __init__(self, base):
        self.base = base

    def _one(self, rp):
        sent = time.monotonic()
        resp = requests.get(
            self.base + "/allocation_candidates?resources=VCPU:1",
            headers=HEADERS,
            timeout=30,
        )
        answered = time.monotonic()
        if resp.status_code != 200:
            return None  # a 503 while a restore has the tables away
        return sent, answered, rp in resp.json()["provider_summaries"]

    def until_turned(self, rp, shown):
        """Search until an answer says ``rp`` is ``shown`` (True or
        False), then for AFTER answers to requests sent after that one was
        answered; every one of those must say the same."""
        turned_at = None
        after = []
        deadline = time.monotonic() + SHOW_WITHIN_S
        lock = threading.Lock()

        def client():
            nonlocal turned_at
            while time.monotonic() < deadline:
                answer = self._one(rp)
                if answer is None:
                    continue
                sent, answered, showed = answer
                with lock:
                    if turned_at is not None and sent > turned_at:
                        after.append(showed)
                        if len(after) >= AFTER:
                            return
                    elif showed == shown and turned_at is None:
                        turned_at = answered

        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            for done in [pool.submit(client) for _ in range(CLIENTS)]:
                done.result()
        assert turned_at is not None, "no answer turned within %ss" % SHOW_WITHIN_S
        went_back = after.count(not shown)
        assert went_back == 0, "%d of %d answers after the first went back" % (
            went_back,
            len(after),
        )


# Another writer's statements, each run with the provider's uuid.
INSERT = (
    "INSERT INTO resource_providers (uuid, name, generation) VALUES (:uuid, :uuid, 0)",
    "UPDATE resource_providers SET root_provider_id = id WHERE uuid = :uuid",
    "INSERT INTO inventories (resource_provider_id, resource_class_id, total,"
    " reserved, min_unit, max_unit, step_size, allocation_ratio)"
    " SELECT id, 0, 4, 0, 1, 4, 1, 1.0 FROM resource_providers WHERE uuid = :uuid",
)
DELETE = (
    "DELETE FROM inventories WHERE resource_provider_id ="
    " (SELECT id FROM resource_providers WHERE uuid = :uuid)",
    # Its own root: MySQL checks the foreign key row by row.
    "UPDATE resource_providers SET root_provider_id = NULL WHERE uuid = :uuid",
    "DELETE FROM resource_providers WHERE uuid = :uuid",
)


def _by_sql(engine, statements, rp):
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement), {"uuid": rp})


def _provider_by_sql(engine, rp):
    _by_sql(engine, INSERT, rp)


def _delete_by_sql(engine, rp):
    _by_sql(engine, DELETE, rp)


def _join_many_aggregates(base, rp):
    generation = requests.get(
        base + "/resource_providers/%s" % rp, headers=HEADERS, timeout=30
    ).json()["generation"]
    resp = requests.put(
        base + "/resource_providers/%s/aggregates" % rp,
        json={
            "aggregates": [str(uuid.uuid4()) for _ in range(changes.MAX_LOGGED + 1)],
            "resource_provider_generation": generation,
        },
        headers=HEADERS,
        timeout=30,
    )
    assert resp.status_code == 200, resp.text


def _inserted(db, url, rp):
    return lambda base, host: _provider_by_sql(db.engine, rp), True


def _deleted(db, url, rp):
    _provider_by_sql(db.engine, rp)
    return lambda base, host: _delete_by_sql(db.engine, rp), False


def _restored(db, url, rp):
    _provider_by_sql(db.engine, rp)
    backup = backups.dump(url)
    _delete_by_sql(db.engine, rp)
    return lambda base, host: backups.restore(url, backup), True


def _read_whole(db, url, rp):
    def change(base, host):
        _provider_by_sql(db.engine, rp)
        # A write every worker follows by reading its catalog whole (more
        # changes than the log names one by one).
        _join_many_aggregates(base, host)

    return change, True


# What another writer does before the server starts: the change it makes
# once the server is up, and whether the provider shows after it.
CHANGES = {
    "inserted": _inserted,
    "deleted": _deleted,
    "restored": _restored,
    "read whole": _read_whole,
}


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_no_answer_goes_back_in_time_across_workers(backend, change, tmp_path):
    fixtures.require_backend(backend)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_FIRST_WORKER)
    with fixtures.database(backend) as db:
        url = db.engine.url.render_as_string(hide_password=False)
        host, rp = str(uuid.uuid4()), str(uuid.uuid4())
        _provider_by_sql(db.engine, host)
        made, shown = CHANGES[change](db, url, rp)
        with live_server.placement_api(
            str(tmp_path),
            "--workers",
            "2",
            OS_PLACEMENT_DATABASE__CONNECTION=url,
            PYTHONPATH=os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        ) as base:
            answers = Answers(base)
            # Both workers have compared their catalogs once.
            answers.until_turned(host, shown=True)
            made(base, host)
            answers.until_turned(rp, shown=shown)
