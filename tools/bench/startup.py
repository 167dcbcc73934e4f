"""Time from starting ``placement-api`` to its first answered request.

Each run starts the command on a fresh SQLite file (``--db-sync`` or not:
SQLite is always synced) or on one already at head (``existing``), polls
``GET /`` every 5 ms and reports the wall time to the first 200 plus the
CPU time the server's processes (master and workers) had used by then: on
a shared machine CPU time is the steadier figure. Not a test: a
measurement.

    .venv/bin/python tools/bench/startup.py --runs 5
    .venv/bin/python tools/bench/startup.py --runs 5 --workers 2 -- --debug

``--server-cmd`` also times another server, side by side (runs taking
turns), started as the shared benchmark starts one: ``bash -c`` in its own
process group with ``PORT`` and ``OS_PLACEMENT_DATABASE__CONNECTION`` set;
its CPU includes the children it waited for (a schema sync, say):

    .venv/bin/python tools/bench/startup.py --runs 5 --workers 2 \
        --server-cmd ../shared/bench/upstream-server
"""

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import procfs

TICK = os.sysconf("SC_CLK_TCK")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu(pid):
    """CPU seconds of ``pid``, the children it waited for and its living
    children."""
    total = 0
    for other, fields in procfs.stats():
        if other == pid:
            total += sum(int(f) for f in fields[11:15])
        elif int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def _answered(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def run_once(command, extra, workers, db_sync, tmp, bytecode=True, server_cmd=None):
    port = _free_port()
    env = dict(
        os.environ,
        OS_PLACEMENT_DATABASE__CONNECTION="sqlite:///%s/placement.sqlite" % tmp,
        OS_API__AUTH_STRATEGY="noauth2",
    )
    if bytecode:
        # As an installed package runs: without .pyc files every start
        # compiles placement's ~80 modules again (about 0.1 s).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    if server_cmd is None:
        args = [command, "--port", str(port), "--workers", str(workers)]
        args += (["--db-sync"] if db_sync else []) + extra
    else:
        args = ["bash", "-c", server_cmd]
        env["PORT"] = str(port)
    log = tempfile.TemporaryFile()
    started = time.monotonic()
    proc = subprocess.Popen(
        args,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # Not this checkout: a `python -c` in the command would import it.
        cwd=tmp if server_cmd else None,
    )
    try:
        while not _answered(port):
            if proc.poll() is not None:
                log.seek(0)
                tail = log.read().decode(errors="replace").splitlines()[-5:]
                sys.exit(
                    "%s exited with %s:\n%s"
                    % (server_cmd or command, proc.returncode, "\n".join(tail))
                )
            if time.monotonic() - started > 30:
                sys.exit("no answer within 30 s")
            time.sleep(0.005)
        return time.monotonic() - started, _cpu(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        log.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--command",
        default=os.path.join(os.path.dirname(sys.executable), "placement-api"),
    )
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE if set (sources compiled each start)",
    )
    parser.add_argument(
        "--server-cmd",
        help="also time this server command (the shared benchmark's way)",
    )
    parser.add_argument("extra", nargs="*", help="more placement-api arguments")
    args = parser.parse_args()
    servers = [("ours", None)]
    modes = ("fresh", "--db-sync", "existing")
    if args.server_cmd:
        servers.append(("other", args.server_cmd))
        modes = ("--db-sync", "existing")
    bytecode = not args.no_bytecode
    for mode in modes:
        walls: dict = {label: [] for label, _ in servers}
        cpus: dict = {label: [] for label, _ in servers}
        existing = {}
        for label, cmd in servers:
            existing[label] = tempfile.mkdtemp(prefix="placement-startup-")
            run_once(
                args.command,
                args.extra,
                args.workers,
                True,
                existing[label],
                bytecode,
                cmd,
            )
        for _ in range(args.runs):
            for label, cmd in servers:  # taking turns
                tmp = existing[label] if mode == "existing" else tempfile.mkdtemp()
                wall, cpu = run_once(
                    args.command,
                    args.extra,
                    args.workers,
                    mode == "--db-sync",
                    tmp,
                    bytecode,
                    cmd,
                )
                walls[label].append(wall)
                cpus[label].append(cpu)
                if tmp != existing[label]:
                    shutil.rmtree(tmp, ignore_errors=True)
        for label, _ in servers:
            shutil.rmtree(existing[label], ignore_errors=True)
            print(
                "%-6s %-10s first answer: median %.3fs min %.3fs; "
                "server CPU median %.3fs"
                % (
                    label,
                    mode,
                    statistics.median(walls[label]),
                    min(walls[label]),
                    statistics.median(cpus[label]),
                )
            )


if __name__ == "__main__":
    main()
