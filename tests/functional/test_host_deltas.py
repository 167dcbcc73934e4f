"""Workers of one host follow a claim by what one of them read
(catalog/host_deltas.py): what a client reads through any of them is the
claim, whoever wrote it (a worker of another host, SQL by hand), and the
others read neither the log nor the claimed rows again."""

import decimal
import types
import uuid

import pytest
import sqlalchemy as sa

from placement.objects.catalog import host_deltas
from placement.objects.catalog import refresh
from placement.objects.catalog.store import Fresh
from tests import fixtures
from tests import helpers
from tests import wsgi_client
from tests.functional.test_candidate_catalog import two_workers
from tests.functional.test_resource_provider_objects import statements

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.database_url(request.param) as url, two_workers(url, url) as cloud:
        rp = cloud.provider("host-1")
        cloud.inventories(rp, VCPU=8)
        cloud.rp = rp
        refresh.warm(cloud.reader_db)
        yield cloud


def _by_host():
    return helpers.counted("placement_catalog_updates_total", how="host")


def _vcpu_used(cloud):
    resp = wsgi_client.call(
        cloud.reader, "/resource_providers/%s/usages" % cloud.rp, **HEADERS
    )
    assert resp.status == 200, resp.body
    return resp.json()["usages"].get("VCPU", 0)


def _read_in_another_worker(cloud):
    """What a client reads through another worker of the reader's host."""
    return helpers.in_another_worker(cloud.reader_db, lambda: _vcpu_used(cloud))


def _claim(cloud, vcpu):
    consumer = str(uuid.uuid4())
    cloud.write(
        "/allocations/%s" % consumer,
        body={
            "allocations": {cloud.rp: {"resources": {"VCPU": vcpu}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    return consumer


def _by_hand(cloud, vcpu):
    """Another writer (the reference beside us, an operator) changes the
    claim's usage in SQL, through the triggers only."""
    with cloud.writer_db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE allocations SET used = :n"), {"n": vcpu})


def test_a_claim_read_by_one_worker_is_followed_by_the_others(cloud):
    assert _vcpu_used(cloud) == 0
    # A claim through a worker of another host, acknowledged.
    _claim(cloud, 3)
    # The next read through a worker of this host sees it; it read the
    # log and the claim from the database, and shared what it read.
    assert _read_in_another_worker(cloud) == 3
    followed = _by_host()
    with statements(cloud.reader_db) as seen:
        assert _vcpu_used(cloud) == 3
    assert _by_host() == followed + 1
    assert not [s for s in seen if "catalog_log" in s or "allocations" in s]

    # SQL by hand: seen through both, the second again from the first's.
    _by_hand(cloud, 5)
    assert _read_in_another_worker(cloud) == 5
    assert _vcpu_used(cloud) == 5
    assert _by_host() == followed + 2


def test_a_worker_that_missed_a_move_follows_the_moves_one_after_another(cloud):
    """A worker two claims behind, each claim read by another worker of
    the host (from where its own catalog was), follows both by what they
    read, one after the other, with no statement but its look."""
    cache = refresh._CACHES[cloud.reader_db]
    behind = cache.catalog  # this worker, before both claims
    _claim(cloud, 3)
    assert _read_in_another_worker(cloud) == 3  # the first move, shared
    assert _vcpu_used(cloud) == 3  # the host's catalog past it
    _claim(cloud, 2)
    assert _read_in_another_worker(cloud) == 5  # the second, from there
    cache.catalog = behind
    followed = _by_host()
    with statements(cloud.reader_db) as seen:
        assert _vcpu_used(cloud) == 5
    assert _by_host() == followed + 1
    assert not [s for s in seen if "catalog_log" in s or "allocations" in s]


def test_a_worker_without_the_move_reads_the_database(cloud):
    _claim(cloud, 2)
    # No other worker read it: this one does, and its answer is the claim.
    followed = _by_host()
    with statements(cloud.reader_db) as seen:
        assert _vcpu_used(cloud) == 2
    assert _by_host() == followed
    assert [s for s in seen if "catalog_log" in s]


def _at(seqs, tokens):
    return types.SimpleNamespace(
        seqs=seqs,
        tokens=tokens,
        stamp=sum(seqs.values()),
        token_sum=sum(tokens.values()),
    )


MOVE = host_deltas.Move(
    {0: 4, 1: 2}, {0: 10, 1: 20}, {0: 5, 1: 2}, {0: 11, 1: 20}, {}, Fresh(None, [])
)


def test_only_a_catalog_at_the_move_s_counts_and_tokens_follows_by_it():
    ring = host_deltas.HostDeltas()
    assert ring.put(MOVE)
    assert ring.path(_at({0: 4, 1: 2}, {0: 10, 1: 20}), 7, 31) == [MOVE]
    # Another history at the same counts (a restore): not that move.
    assert ring.path(_at({0: 4, 1: 2}, {0: 10, 1: 21}), 7, 31) is None
    assert ring.path(_at({0: 4, 1: 2}, {0: 10, 1: 20}), 7, 32) is None
    # The same sums from other counts per shard.
    assert ring.path(_at({0: 3, 1: 3}, {0: 10, 1: 20}), 7, 31) is None


def test_a_torn_or_overwritten_record_is_not_followed():
    ring = host_deltas.HostDeltas(slots=1)
    assert ring.put(MOVE)
    ring._map[host_deltas._HEAD.size + 3] ^= 0xFF
    assert ring.path(_at({0: 4, 1: 2}, {0: 10, 1: 20}), 7, 31) is None
    assert ring.put(MOVE)
    assert ring.put(MOVE._replace(seqs={0: 6, 1: 2}))  # the same slot
    assert ring.path(_at({0: 4, 1: 2}, {0: 10, 1: 20}), 7, 31) is None


def test_a_move_too_large_for_a_slot_is_not_shared():
    ring = host_deltas.HostDeltas(slot_bytes=256)
    big = MOVE._replace(fresh=Fresh(None, [(rp, 1, 1, None) for rp in range(100)]))
    assert not ring.put(big)
    assert ring.path(_at({0: 4, 1: 2}, {0: 10, 1: 20}), 7, 31) is None


def test_a_look_summed_by_the_database_finds_its_move():
    ring = host_deltas.HostDeltas()
    assert ring.put(MOVE)
    at = _at({0: 4, 1: 2}, {0: 10, 1: 20})
    assert ring.path(at, decimal.Decimal(7), decimal.Decimal(31)) == [MOVE]


def test_a_catalog_past_the_move_s_start_on_some_shards_follows_by_it():
    """A worker that followed one claim (shard 0) before another worker
    read both (shards 0 and 1) follows the second by what it read."""
    ring = host_deltas.HostDeltas()
    both = MOVE._replace(seqs={0: 5, 1: 3}, tokens={0: 11, 1: 21})
    assert ring.put(both)
    assert ring.path(_at({0: 5, 1: 2}, {0: 11, 1: 20}), 8, 32) == [both]
    # Shard 0 at the end's count with another token: another history.
    assert ring.path(_at({0: 5, 1: 2}, {0: 12, 1: 20}), 8, 32) is None


def test_moves_one_after_another_are_followed_in_order():
    ring = host_deltas.HostDeltas()
    second = host_deltas.Move(
        MOVE.seqs, MOVE.tokens, {0: 5, 1: 3}, {0: 11, 1: 22}, {}, Fresh(None, [])
    )
    assert ring.put(MOVE) and ring.put(second)
    start = _at({0: 4, 1: 2}, {0: 10, 1: 20})
    assert ring.path(start, 8, 33) == [MOVE, second]
    assert ring.path(_at(MOVE.seqs, MOVE.tokens), 8, 33) == [second]
    # Another history at the start's counts: neither.
    assert ring.path(_at({0: 4, 1: 2}, {0: 10, 1: 21}), 8, 33) is None
    # The first gone from the ring: the database it is.
    ring._map[: host_deltas._HEAD.size] = bytes(host_deltas._HEAD.size)
    ring._map[ring._at(7) : ring._at(7) + host_deltas._HEAD.size] = bytes(
        host_deltas._HEAD.size
    )
    assert ring.path(start, 8, 33) is None
    assert ring.path(_at(MOVE.seqs, MOVE.tokens), 8, 33) == [second]


def test_the_last_moves_keep_their_slots():
    """Moves a few rows of the log apart never take each other's slot, so
    a worker a few claims behind follows them all (a slot by counts and
    tokens hashed together lost one in 32)."""
    ring = host_deltas.HostDeltas()
    moves = []
    seqs, tokens = {0: 4, 1: 2}, {0: 10, 1: 20}
    # Tokens as the database draws them; the first two moves' hashed
    # together took one slot.
    for step, token in enumerate((7929, 23771, 47524, 79200)):
        then, then_tokens = seqs, tokens
        seqs = {0: seqs[0] + 1 + step % 3, 1: seqs[1]}
        tokens = {0: token, 1: 20}
        moves.append(
            host_deltas.Move(then, then_tokens, seqs, tokens, {}, Fresh(None, []))
        )
        assert ring.put(moves[-1])
    look = (sum(seqs.values()), sum(tokens.values()))
    assert ring.path(_at({0: 4, 1: 2}, {0: 10, 1: 20}), *look) == moves
