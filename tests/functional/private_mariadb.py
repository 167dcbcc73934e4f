"""A MariaDB server of a test's own (private datadir under a temporary
directory, its own port and socket) that the test may stop and start: the
shared server the rest of the suite uses is never touched."""

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

import pymysql
import pytest

from tests import ports

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


class PrivateMariaDB:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="placement-mariadb-")
        self.datadir = os.path.join(self.dir, "data")
        self.port = ports.free_port()
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

    def start(self, timeout=30):
        self.proc = subprocess.Popen(
            [
                SERVER,
                "--no-defaults",
                *self.user,
                "--datadir=" + self.datadir,
                "--port=%d" % self.port,
                "--bind-address=127.0.0.1",
                "--socket=" + os.path.join(self.dir, "mysqld.sock"),
                "--pid-file=" + os.path.join(self.dir, "mysqld.pid"),
                "--innodb-buffer-pool-size=16M",
                "--skip-log-bin",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.dir, "server.log"), "ab"),
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
