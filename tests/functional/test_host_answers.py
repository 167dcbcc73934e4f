"""Workers of one host share the allocation candidates answers they render
(objects/catalog/host_answers): a worker asked the question another one
answered, whose own look finds the same database state, sends that
body byte for byte without a search; after any write (through a worker,
by SQL by hand) no worker sends the old one; answers that are not the
same for every request of a question (randomized) are not shared; where
the store cannot be written the answers are the same."""

import gc

import pytest
import sqlalchemy as sa

from placement.db import engine as db_engine
from placement.objects.catalog import refresh
from placement.objects.catalog import verify
from tests import fixtures
from tests import helpers
from tests import wsgi_client
from tests.functional.test_candidate_catalog import two_workers
from tests.functional.test_resource_provider_objects import _queries
from tests.functional.test_resource_provider_objects import statements

QUERY = (
    "/allocation_candidates?resources=VCPU:1,DISK_GB:10"
    "&resources1=VGPU:1&group_policy=isolate"
)
LATEST = "placement latest"


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request, monkeypatch):
    fixtures.require_backend(request.param)
    # No comparison with the database falls due during a test (its
    # statements are not the answer's).
    monkeypatch.setattr(verify, "VERIFY_EVERY_S", 3600.0)
    with fixtures.database_url(request.param) as url, two_workers(url, url) as cloud:
        for name in ("cn1", "cn2"):
            cn = cloud.provider(name)
            cloud.inventories(cn, VCPU=8, DISK_GB=100)
            for gpu in range(2):
                cloud.inventories(cloud.provider("%s-gpu%d" % (name, gpu), cn), VGPU=2)
        cloud.cn = cn
        # The reader's catalog read before its "workers" fork, as
        # placement-api's master does.
        refresh.warm(cloud.reader_db)
        yield cloud


def _served():
    return helpers.counted("placement_host_answers_total", how="served")


def _get(app, path=QUERY, version=LATEST):
    resp = wsgi_client.call(
        app, path, x_auth_token="admin", openstack_api_version=version
    )
    assert resp.status == 200, resp.body
    return resp.body


def _in_another_worker(cloud, path=QUERY, version=LATEST):
    """The body a client reads through another worker of the reader's
    host."""
    return helpers.in_another_worker(
        cloud.reader_db, lambda: _get(cloud.reader, path, version)
    )


def _read(cloud, path=QUERY, version=LATEST):
    """(the reader's body, whether it was another worker's, its
    statements)."""
    served = _served()
    with statements(cloud.reader_db) as seen:
        body = _get(cloud.reader, path, version)
    return body, _served() - served, _queries(seen)


def test_another_worker_s_answer_is_sent_at_the_same_state(cloud):
    theirs = _in_another_worker(cloud)
    mine, served, seen = _read(cloud)
    assert mine == theirs
    assert served == 1
    assert len(seen) == 1  # the look: no search read anything
    assert b'"allocation_requests":[{' in mine
    # The same again: this worker's own answers are shared as well.
    assert _read(cloud)[:2] == (theirs, 1)


def test_no_worker_sends_an_answer_older_than_a_write(cloud):
    old = _in_another_worker(cloud)
    # A write through another host's worker: a third pGPU's room.
    cloud.inventories(cloud.provider("cn2-gpu2", cloud.cn), VGPU=2)
    fresh, served, _ = _read(cloud)
    assert served == 0 and fresh != old
    assert fresh == _get(cloud.writer)
    # Kept at the new state: the other worker sends it.
    assert _in_another_worker(cloud) == fresh

    # Another writer (SQL by hand, seen through the triggers): a pGPU's
    # room gone.
    with cloud.writer_db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE inventories SET reserved = total"))
    after, served, _ = _read(cloud)
    assert served == 0 and after != fresh
    assert after == _get(cloud.writer)


def test_another_question_is_not_sent_another_s_answer(cloud):
    _in_another_worker(cloud)
    for path, version in (
        (QUERY, "placement 1.30"),  # another microversion
        (QUERY.replace("VCPU:1", "VCPU:2"), LATEST),  # another query
        (QUERY + "&limit=2", LATEST),  # limited: not shared
    ):
        body, served, _ = _read(cloud, path, version)
        assert served == 0
        assert body == _get(cloud.writer, path, version)


def test_randomized_answers_are_not_shared(cloud):
    with fixtures.overrides(**{"placement.randomize_allocation_candidates": True}):
        _in_another_worker(cloud)
        served = _read(cloud)[1]
        _in_another_worker(cloud)
        assert served == 0 and _read(cloud)[1] == 0


def test_answers_are_the_same_where_the_store_cannot_be_written(cloud, tmp_path):
    (tmp_path / "a-file").write_text("")
    store = refresh.shared_answers(cloud.reader_db)
    store.directory = str(tmp_path / "a-file" / "answers")
    theirs = _in_another_worker(cloud)
    for _ in range(2):
        mine, served, _ = _read(cloud)
        assert served == 0
        assert mine == theirs == _get(cloud.writer)


@pytest.mark.parametrize("failing", ["state", "get"])
def test_a_failing_store_gives_the_connection_back(cloud, monkeypatch, failing):
    """An error of the store between the look and the search (here its
    ``state`` or ``get`` failing) gives the look's connection back to the
    pool as it goes, not when the garbage collector finds it."""
    store = refresh.shared_answers(cloud.reader_db)
    # The pool of the look's connection (``Database.several_reads``).
    pool = db_engine.autocommit(cloud.reader_db.engine).pool
    _get(cloud.reader)
    held = pool.checkedout()

    def fails(*args):
        raise RuntimeError("the store fails")

    monkeypatch.setattr(store, failing, fails)
    gc.disable()
    try:
        resp = wsgi_client.call(
            cloud.reader, QUERY, x_auth_token="admin", openstack_api_version=LATEST
        )
        assert resp.status == 500
        assert pool.checkedout() == held
    finally:
        gc.enable()
    monkeypatch.undo()
    assert _get(cloud.reader) == _get(cloud.writer)
