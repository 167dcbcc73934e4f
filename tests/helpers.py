"""Helpers shared by the functional tests: threads released at the same
moment, child processes that see only the configuration a test gives
them, providers written directly to a database, and this process's
counts of a metric."""

import contextlib
import multiprocessing
import os
import subprocess
import sys
import threading
import uuid

import httpx
import hypothesis
import prometheus_client
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import changes

BIN = os.path.dirname(sys.executable)


def counted(metric, **labels):
    """This process's count of ``metric`` with ``labels`` (0 before any)."""
    return prometheus_client.REGISTRY.get_sample_value(metric, labels) or 0


def in_another_worker(db, action):
    """``action()``'s value, run in a process forked from this one (as
    placement-api forks its workers from its master, whose host-wide
    state they share) that uses none of the connections of ``db`` this
    one holds."""
    context = multiprocessing.get_context("fork")
    answer = context.Queue()

    def worker():
        # The autocommit twin's first: disposing of the engine disposes
        # of it, closing the parent's sessions.
        for engine in (db_api.twin_of(db.engine), db.engine):
            if engine is not None:
                engine.dispose(close=False)
        answer.put(action())

    child = context.Process(target=worker)
    child.start()
    value = answer.get(timeout=60)
    child.join(30)
    assert child.exitcode == 0
    return value


def in_child(action):
    """Run ``action`` in a forked child; its exit status."""
    pid = os.fork()
    if pid == 0:
        try:
            action()
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


def run_together(fn, count):
    """Call ``fn(i)`` for i in range(count), each in its own thread, all
    released at once; the return values, or the exceptions raised, in i
    order."""
    barrier = threading.Barrier(count)
    outcomes = [None] * count

    def run(i):
        barrier.wait()
        try:
            outcomes[i] = fn(i)
        except Exception as e:  # the outcome under test
            outcomes[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def clean_env(**extra):
    """This process's environment without any OS_* configuration override
    (the developer's own settings must not reach a child), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(extra)
    return env


def wsgi_client(app, headers):
    """An HTTP client of the WSGI ``app``, in process, sending ``headers``."""
    return httpx.Client(
        transport=httpx.WSGITransport(app=app),
        base_url="http://localhost",
        headers=headers,
    )


def claim(rp, resources, project="p", user="u"):
    """The body of a new consumer's claim of ``resources`` ({class:
    amount}) on provider ``rp`` (microversion 1.38 and later)."""
    return {
        "allocations": {rp: {"resources": resources}},
        "project_id": project,
        "user_id": user,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }


def script(name):
    """The path of a console script installed in this virtualenv."""
    return os.path.join(BIN, name)


def run(cmd, env=None, timeout=120):
    """Run ``cmd`` to completion with ``clean_env(**env)``; the
    CompletedProcess, output captured as text."""
    return subprocess.run(
        cmd,
        env=clean_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def bounded_examples(count):
    """Hypothesis settings for a fixed, reproducible number of generated
    examples (no shrinking: each example costs real requests)."""
    return hypothesis.settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
    )


def new_provider(db):
    """The uuid of a new root provider, at generation 0 and without
    inventory, its row written directly (every catalog reads it whole),
    its own root as the service writes it."""
    rp_uuid = str(uuid.uuid4())
    rp = tables.resource_providers
    with db.writer() as conn:
        changes.record(conn, changes.EVERYTHING)
        conn.execute(rp.insert().values(uuid=rp_uuid, name=rp_uuid, generation=0))
        conn.execute(
            rp.update()
            .where(rp.c.uuid == rp_uuid)
            .values(root_provider_id=rp.c.id, updated_at=rp.c.updated_at)
        )
    return rp_uuid


def over_capacity_from_rows(engine):
    """The uuids of the providers whose use of a class exceeds its
    capacity ((total - reserved) * allocation_ratio), summed here from the
    rows, not by the audit's SQL (test_audit, tools/bench/audit.py)."""
    with engine.connect() as conn:
        used = {}
        for rp, rc, amount in conn.execute(
            sa.text(
                "SELECT resource_provider_id, resource_class_id, used FROM allocations"
            )
        ):
            used[rp, rc] = used.get((rp, rc), 0) + amount
        inventories = conn.execute(
            sa.text(
                "SELECT p.uuid, i.resource_provider_id, i.resource_class_id,"
                " i.total, i.reserved, i.allocation_ratio FROM inventories i"
                " JOIN resource_providers p ON p.id = i.resource_provider_id"
            )
        ).all()
    return {
        uuid_
        for uuid_, rp, rc, total, reserved, ratio in inventories
        if used.get((rp, rc), 0) > (total - reserved) * ratio
    }


@contextlib.contextmanager
def statements(db):
    """Collects every SQL statement the engine runs meanwhile."""
    seen = []

    def record(conn, cursor, statement, *args):
        seen.append(statement)

    sa.event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", record)
