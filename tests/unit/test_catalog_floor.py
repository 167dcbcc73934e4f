"""The host's floor (catalog/floor.py) is shared with the processes
forked after it was made, only ever rises, and is still raised when a
process died holding its lock."""

import os
import signal

from placement.objects.catalog import floor
from tests import helpers


def test_a_raise_in_a_forked_worker_is_seen_by_the_others():
    shared = floor.Floor()
    assert helpers.in_child(lambda: shared.raise_to(12.5)) == 0
    assert shared.value() == 12.5
    shared.raise_to(3.0)
    assert shared.value() == 12.5


def test_a_worker_killed_holding_the_lock_does_not_stop_raises(monkeypatch):
    shared = floor.Floor()
    monkeypatch.setattr(floor, "LOCK_WAIT_S", 0.05)
    pid = os.fork()
    if pid == 0:
        shared._lock.acquire()
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    shared.raise_to(7.0)
    assert shared.value() == 7.0


def test_a_catalog_read_in_the_floor_s_state_leaves_it_where_it_is():
    shared = floor.Floor()
    assert shared.raise_to(5.0, state=42) == 5.0
    # Another worker read the same database state later: it holds what
    # the floor stands for, and the others need not compare again.
    assert shared.raise_to(9.0, state=42) == 5.0
    assert shared.value() == 5.0
    assert shared.raise_to(9.0, state=43) == 9.0
    assert shared.value() == 9.0
    # A state not known always raises.
    assert shared.raise_to(11.0) == 11.0
    assert shared.value() == 11.0
