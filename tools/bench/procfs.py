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


def group(pgid):
    """(pid, fields) of every process of the process group ``pgid``."""
    return [(pid, fields) for pid, fields in stats() if int(fields[2]) == pgid]


def group_cpu(pgid):
    """CPU seconds of every process of the process group ``pgid`` (ticks)."""
    ticks = sum(int(fields[11]) + int(fields[12]) for _, fields in group(pgid))
    return ticks / os.sysconf("SC_CLK_TCK")


def _tasks(pids):
    """(pid, tid) of every thread of the processes ``pids``."""
    for pid in pids:
        try:
            tasks = os.listdir("/proc/%s/task" % pid)
        except OSError:
            continue
        for task in tasks:
            yield pid, int(task)


def _task_file(pid, tid, name):
    """The text of /proc/PID/task/TID/``name``; None for a thread gone."""
    try:
        with open("/proc/%s/task/%s/%s" % (pid, tid, name)) as f:
            return f.read()
    except OSError:
        return None  # gone since the listing


def _task_files(pids, name):
    """The text of /proc/PID/task/TID/``name`` of every thread of the
    processes ``pids``; threads that ended are skipped."""
    for pid, tid in _tasks(pids):
        text = _task_file(pid, tid, name)
        if text is not None:
            yield text


def _switches_of(status):
    """(voluntary, involuntary) context switches a thread's status names."""
    found = [0, 0]
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches"):
            found[0] = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches"):
            found[1] = int(line.split()[1])
    return tuple(found)


def threads_cpu(pids):
    """CPU seconds so far of every thread of the processes ``pids``, from
    their schedstat (nanoseconds: what ticks cannot tell apart at 10 ms).
    Threads that ended are not counted."""
    return sum(int(text.split()[0]) for text in _task_files(pids, "schedstat")) / 1e9


def switches(pids):
    """Context switches so far of every thread of the processes ``pids``:
    (voluntary, involuntary). A thread waiting for another (a lock, a
    queue, a socket) switches voluntarily; a preempted one involuntarily.
    Threads that ended are not counted."""
    counts = [_switches_of(text) for text in _task_files(pids, "status")]
    return tuple(sum(column) for column in zip((0, 0), *counts))


def threads(pids):
    """{(pid, tid): (CPU seconds, voluntary, involuntary switches)} so far
    of every thread of the processes ``pids`` (``threads_cpu``,
    ``switches``, thread by thread)."""
    found = {}
    for pid, tid in _tasks(pids):
        sched = _task_file(pid, tid, "schedstat")
        status = _task_file(pid, tid, "status")
        if sched is not None and status is not None:
            found[(pid, tid)] = (int(sched.split()[0]) / 1e9, *_switches_of(status))
    return found


def machine_busy():
    """CPU seconds every process on the machine has used (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_split(server_pgid, database_pid):
    """CPU seconds so far of the server (its process group), the database
    (``database_pid``), this process and the whole machine."""
    found = dict(server=0, database=0, tool=0)
    own = os.getpid()
    for pid, fields in stats():
        role = (
            "server"
            if int(fields[2]) == server_pgid
            else "database"
            if pid == database_pid
            else "tool"
            if pid == own
            else None
        )
        if role:
            found[role] += int(fields[11]) + int(fields[12])
    split = {k: v / os.sysconf("SC_CLK_TCK") for k, v in found.items()}
    split["machine"] = machine_busy()
    return split
