"""Signals to servers the tests started, found by a pid file.

A pid file outlives its process (a node killed by a test, a start that
failed), and on a busy machine the kernel hands its pid to a new process
within minutes (pid_max is 32768 here): a bare ``os.kill`` from a stale
file can stop another test's server. A signal goes only to a process
whose command line still names the server's own directory.
"""

import os


def is_ours(pid, directory):
    """Whether process ``pid`` runs and its command line names a path under
    ``directory`` (the server's own: its option file, its data)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return os.path.join(directory, "").encode() in f.read()
    except OSError:
        return False


def signal_ours(pid, directory, sig):
    """Send ``sig`` to ``pid`` if it is still the server of ``directory``;
    whether it was."""
    if not is_ours(pid, directory):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True
