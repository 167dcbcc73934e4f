"""What /proc tells about the processes on this machine, for the benchmarks
that watch a server's processes."""

import os


def stats():
    """(pid, fields) of every process, ``fields`` being /proc/PID/stat after
    the command name: [0] state, [1] parent pid, [2] process group, [11]
    and [12] user and system CPU ticks."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                # The command name (in parentheses) may hold spaces.
                yield int(entry), f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone since the listing
