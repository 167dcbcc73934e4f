"""The test servers' stop reads pid files that may be stale: the process
they name now may be another test's (pids wrap within a suite run)."""

import signal
import subprocess
import sys

import pytest

from tests import galera
from tests import private_mariadb
from tests import processes


@pytest.fixture
def bystander():
    """A running process that is no test server."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _alive(proc):
    return proc.poll() is None


def test_a_stale_galera_pid_file_signals_no_other_process(tmp_path, bystander):
    node = tmp_path / "node1"
    node.mkdir()
    (node / "server.pid").write_text(str(bystander.pid))
    galera._stop_servers(str(tmp_path))
    assert _alive(bystander)
    with pytest.raises(RuntimeError, match="not running"):
        galera.kill(str(tmp_path), 1)
    assert _alive(bystander)


def test_a_stale_private_mariadb_pid_file_signals_no_other_process(tmp_path, bystander):
    (tmp_path / "mysqld.pid").write_text(str(bystander.pid))
    private_mariadb.stop(str(tmp_path))
    assert _alive(bystander)
    assert not tmp_path.exists()


def test_a_server_naming_its_directory_is_signalled(tmp_path):
    # The child says when it runs: until its exec, /proc shows the parent's
    # command line, not the one naming the directory.
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; print('up', flush=True); time.sleep(60)",
            str(tmp_path / "my.cnf"),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout.readline() == b"up\n"
        assert processes.is_ours(server.pid, str(tmp_path))
        # A sibling directory whose name starts the same is not it.
        assert not processes.is_ours(server.pid, str(tmp_path)[:-1])
        assert processes.signal_ours(server.pid, str(tmp_path), signal.SIGTERM)
        assert server.wait(timeout=10) == -signal.SIGTERM
        assert not processes.is_ours(server.pid, str(tmp_path))
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
