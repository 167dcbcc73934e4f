"""placement-api holds its workers to a few glibc malloc arenas: threads
building large answers in arenas of their own made a busy worker's memory
grow without end (doc/operations.md "Memory")."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

# A process that maybe limits its arenas, lets 8 threads allocate at once
# and prints glibc's malloc statistics (one "Arena N:" line per arena).
PROGRAM = textwrap.dedent(
    """
    import ctypes, sys, threading
    from placement.cmd import api
    limited = api.limit_malloc_arenas() if sys.argv[1] == "limit" else False
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    start = threading.Barrier(8)
    def allocate():
        start.wait()
        for _ in range(100):
            libc.malloc(4096)
    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(limited, flush=True)
    libc.malloc_stats()
    """
)


def arenas(mode, env=None):
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout.strip(), done.stderr.count("Arena ")


pytestmark = pytest.mark.skipif(
    not hasattr(ctypes.CDLL(None), "malloc_stats"), reason="glibc malloc only"
)


def test_threads_share_at_most_two_arenas_once_limited():
    assert arenas("limit") == ("True", 2)


def test_threads_take_arenas_of_their_own_otherwise():
    limited, count = arenas("none")
    assert limited == "False" and count > 2


def test_an_operators_malloc_arena_max_wins():
    env = dict(os.environ, MALLOC_ARENA_MAX="3")
    assert arenas("limit", env) == ("False", 3)
