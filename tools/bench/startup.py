"""Time from starting ``placement-api`` to its first answered request.

Each run starts the command on a fresh SQLite file (``--db-sync`` or not:
SQLite is always synced) or on one already at head (``existing``), polls
``GET /`` every 5 ms and reports the wall time to the first 200 plus the
CPU time the server's processes (master and workers) had used by then: on
a shared machine CPU time is the steadier figure. Not a test: a
measurement.

    .venv/bin/python tools/bench/startup.py --runs 5
    .venv/bin/python tools/bench/startup.py --runs 5 --workers 2 -- --debug
"""

import argparse
import os
import shutil
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
    """CPU seconds of ``pid`` and its children, living ones included."""
    return sum(
        (int(fields[11]) + int(fields[12])) / TICK
        for other, fields in procfs.stats()
        if other == pid or int(fields[1]) == pid
    )


def _answered(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def run_once(command, extra, workers, db_sync, tmp, bytecode=True):
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
    args = [command, "--port", str(port), "--workers", str(workers)]
    args += ["--db-sync"] if db_sync else []
    started = time.monotonic()
    proc = subprocess.Popen(
        args + extra, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while not _answered(port):
            if proc.poll() is not None:
                sys.exit("%s exited with %s" % (command, proc.returncode))
            if time.monotonic() - started > 30:
                sys.exit("no answer within 30 s")
            time.sleep(0.005)
        return time.monotonic() - started, _cpu(proc.pid)
    finally:
        proc.terminate()
        proc.wait()


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
    parser.add_argument("extra", nargs="*", help="more placement-api arguments")
    args = parser.parse_args()
    for mode in ("fresh", "--db-sync", "existing"):
        walls, cpus = [], []
        existing = tempfile.mkdtemp(prefix="placement-startup-")
        bytecode = not args.no_bytecode
        run_once(args.command, args.extra, args.workers, False, existing, bytecode)
        for _ in range(args.runs):
            tmp = existing if mode == "existing" else tempfile.mkdtemp()
            wall, cpu = run_once(
                args.command,
                args.extra,
                args.workers,
                mode == "--db-sync",
                tmp,
                bytecode,
            )
            walls.append(wall)
            cpus.append(cpu)
            if tmp != existing:
                shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(existing, ignore_errors=True)
        print(
            "%-10s first answer: median %.3fs min %.3fs; server CPU median %.3fs"
            % (
                mode,
                statistics.median(walls),
                min(walls),
                statistics.median(cpus),
            )
        )


if __name__ == "__main__":
    main()
