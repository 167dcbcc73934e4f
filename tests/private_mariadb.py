"""A MariaDB server of its own (private datadir under a temporary
directory, its own port and socket): for a test that stops and starts it,
and for the whole suite's MySQL tests, so that the machine's server is
never touched.

    python -m tests.private_mariadb start DIR   # prints its URL, detaches
    python -m tests.private_mariadb stop DIR

tools/run-tests starts the suite's under /dev/shm: its datadir in memory,
its DDL (each test's fresh database: tables and triggers) costs no disk
syncs, which made a database 2 s instead of 0.3 s to create on this
machine's own server. It is the same MariaDB, configured as Debian's.
"""

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pymysql
import pytest

from tests import ports
from tests import processes
from tests import server_cli

INSTALL_DB = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
SERVER = next(
    (p for p in ("/usr/sbin/mariadbd", "/usr/sbin/mysqld") if os.access(p, os.X_OK)),
    None,
)


def require():
    """Skip (or fail under PLACEMENT_REQUIRE_MYSQL=1) without MariaDB."""
    if INSTALL_DB and SERVER:
        return
    if os.environ.get("PLACEMENT_REQUIRE_MYSQL") == "1":
        pytest.fail("MariaDB server binaries required but not installed")
    pytest.skip("MariaDB server binaries not installed")


# As Debian's my.cnf, so tests meet the server they would meet there.
DEBIAN = (
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
    "--skip-name-resolve",
)
SMALL = ("--innodb-buffer-pool-size=16M",)


class PrivateMariaDB:
    def __init__(self, base=None, options=SMALL):
        self.dir = tempfile.mkdtemp(prefix="placement-mariadb-", dir=base)
        self.datadir = os.path.join(self.dir, "data")
        self.port = ports.free_port()
        self.options = options
        self.proc = None
        # mariadbd refuses to run as root: hand it the directory.
        self.user = []
        if os.geteuid() == 0:
            self.user = ["--user=mysql"]
            entry = pwd.getpwnam("mysql")
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            [
                INSTALL_DB,
                "--no-defaults",
                *self.user,
                "--datadir=" + self.datadir,
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def url(self, database="", query="charset=utf8mb4"):
        return "mysql+pymysql://root@127.0.0.1:%d/%s?%s" % (self.port, database, query)

    def start(self, timeout=30, detached=False):
        self.proc = subprocess.Popen(
            [
                SERVER,
                "--no-defaults",
                *self.user,
                "--datadir=" + self.datadir,
                "--port=%d" % self.port,
                "--bind-address=127.0.0.1",
                "--socket=" + os.path.join(self.dir, "mysqld.sock"),
                # Its temporary tables beside its data, not in a /tmp
                # shared with every other process of the machine.
                "--tmpdir=" + self.dir,
                "--pid-file=" + os.path.join(self.dir, "mysqld.pid"),
                "--skip-log-bin",
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.dir, "server.log"), "ab"),
            start_new_session=detached,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("mariadbd exited with %s" % self.proc.returncode)
            try:
                pymysql.connect(
                    host="127.0.0.1", port=self.port, user="root", connect_timeout=1
                ).close()
                return
            except pymysql.MySQLError:
                time.sleep(0.2)
        raise RuntimeError("mariadbd did not answer within %ss" % timeout)

    def stop(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def execute(self, sql):
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root")
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def start(base):
    """(its directory, its URL) of a new server under ``base``, detached."""
    server = PrivateMariaDB(base=base, options=DEBIAN)
    server.start(detached=True)
    return server.dir, server.url().split("/?")[0]


def stop(top):
    """Stop the server of directory ``top`` (not a child of this process)
    and remove the directory."""
    try:
        with open(os.path.join(top, "mysqld.pid")) as f:
            pid = int(f.read())
        # A stale file may name another process now: signal only ours.
        if processes.signal_ours(pid, top, signal.SIGTERM):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and processes.is_ours(pid, top):
                time.sleep(0.1)
            processes.signal_ours(pid, top, signal.SIGKILL)
    except (OSError, ValueError):
        pass  # not running (any more)
    shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(server_cli.main("A private MariaDB server.", start, stop))
