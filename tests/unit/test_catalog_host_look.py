"""The host's last look (catalog/host_look.py): shared with the processes
forked after it was made; a request takes it only when it was sent after
the request arrived; a torn record is none."""

import time

from placement.objects.catalog import host_look
from tests import helpers


def test_a_look_sent_after_a_request_arrived_confirms_it():
    shared = host_look.HostLook()
    assert shared.last() is None
    assert shared.sent() == float("-inf")
    arrived = time.monotonic()
    assert shared.since(arrived) is None
    sent = time.monotonic()
    assert helpers.in_child(lambda: shared.saw(7, 11, sent)) == 0
    assert shared.last() == (7, 11)
    assert shared.sent() == sent
    assert shared.since(arrived) == (7, 11)
    # Another process's, recent: the follower need not look.
    assert shared.told(60.0) == (7, 11)
    # Sent before the request arrived: it may lack writes acknowledged
    # before then.
    assert shared.since(time.monotonic()) is None


def test_a_torn_record_is_none():
    shared = host_look.HostLook()
    arrived = time.monotonic()
    shared.saw(7, 11, time.monotonic())
    other = host_look.HostLook()
    other.saw(9, 13, time.monotonic())
    # The stamp of one record with the rest of another (two writers at
    # once): matches nothing.
    shared._map[16:24] = other._map[16:24]
    assert shared.last() is None
    assert shared.since(arrived) is None
    assert shared.told(60.0) is None
    assert shared.sent() is None
