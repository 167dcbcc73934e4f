"""The kept process id is the process's, in a forked child too, and is
what prometheus_client's multiprocess values name their files by."""

import os

from placement import procid


def test_current_is_getpid_after_a_fork():
    assert procid.current() == os.getpid()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os.write(write, b"1" if procid.current() == os.getpid() else b"0")
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
