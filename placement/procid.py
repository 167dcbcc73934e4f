"""This process's id, kept: ``os.getpid`` is a system call, and every
request asked for it several times (the access line, each metric value
it updates). Set again in a child after ``os.fork``."""

import os

_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def current() -> int:
    """``os.getpid()``."""
    return _PID[0]
