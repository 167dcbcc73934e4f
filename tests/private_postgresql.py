"""A PostgreSQL server of the suite's own, its data directory in memory,
so that each test's fresh database (CREATE DATABASE, tables, triggers, DROP)
costs no disk syncs; the machine's cluster is never touched.

    python -m tests.private_postgresql start DIR   # prints its URL, detaches
    python -m tests.private_postgresql stop DIR

tools/run-tests starts it under /dev/shm. It is the same PostgreSQL, with
the machine cluster's encoding and locale; only durability is given up
(fsync off), which a test database never needs.
"""

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

from tests import ports
from tests import server_cli

BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
USER = "postgres"
SETTINGS = (
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "listen_addresses=127.0.0.1",
)


def _as_postgres(args, **kwargs):
    """Run ``args`` as the postgres OS user (the server refuses root)."""
    entry = pwd.getpwnam(USER)

    def drop():
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)

    preexec = drop if os.geteuid() == 0 else None
    return subprocess.run(args, check=True, preexec_fn=preexec, **kwargs)


def start(base):
    """(its directory, its URL) of a new running server under ``base``."""
    bin_dir = BIN[-1]
    top = tempfile.mkdtemp(prefix="placement-postgresql-", dir=base)
    entry = pwd.getpwnam(USER)
    os.chown(top, entry.pw_uid, entry.pw_gid)
    data = os.path.join(top, "data")
    _as_postgres(
        [
            os.path.join(bin_dir, "initdb"),
            "-D",
            data,
            "-U",
            USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
        ],
        capture_output=True,
        timeout=120,
    )
    port = ports.free_port()
    options = " ".join("-c %s" % s for s in SETTINGS + ("port=%d" % port,))
    options += " -c unix_socket_directories=%s" % top
    _as_postgres(
        [
            os.path.join(bin_dir, "pg_ctl"),
            "-D",
            data,
            "-l",
            os.path.join(top, "server.log"),
            "-o",
            options,
            "-w",
            "start",
        ],
        capture_output=True,
        timeout=120,
    )
    return top, "postgresql+psycopg://%s@127.0.0.1:%d" % (USER, port)


def stop(top):
    data = os.path.join(top, "data")
    if BIN and os.path.isdir(data):
        try:
            _as_postgres(
                [os.path.join(BIN[-1], "pg_ctl"), "-D", data, "-m", "fast", "stop"],
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            pass  # not running (any more)
    shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(server_cli.main("A private PostgreSQL server.", start, stop))
