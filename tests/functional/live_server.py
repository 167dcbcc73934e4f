"""A real gunicorn serving placement on a free loopback port, for tests
that need a separate server process (real clients, several workers).

The SQLite database is created and synced here first, so workers start
without racing on schema creation.
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import requests

from tests import fixtures
from tests import helpers
from tests import ports


def _wait_up(url, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("gunicorn exited with %s" % proc.returncode)
        try:
            requests.get(url, timeout=5)
            return
        except requests.RequestException:
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not answer within %ss" % timeout)


@contextlib.contextmanager
def running(cmd, env, log_path, probe_url, cwd=None, timeout=60):
    """Run the server command ``cmd`` until the block ends, once
    ``probe_url`` answers (within ``timeout`` seconds)."""
    with open(log_path, "wb") as log:
        # In a session of its own: a worker its master leaves behind (a
        # master killed, or one that failed the test) is stopped with it.
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            _wait_up(probe_url, proc, timeout)
            yield
        finally:
            stop(proc, group=True)


def stop(proc, group=False):
    """Terminate ``proc``, and kill it if it has not ended within 20 s;
    with ``group``, then whatever is left of its process group too."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def serve(workers, env, log_path):
    """Yield the base URL of a gunicorn with ``workers`` workers running the
    placement app with the environment ``env``; stop it afterwards."""
    port = ports.free_port()
    url = "http://127.0.0.1:%d" % port
    with running(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-w",
            str(workers),
            "-b",
            "127.0.0.1:%d" % port,
            "--timeout",
            "60",
            "placement.wsgi.api:application",
        ],
        env,
        log_path,
        url + "/",
    ):
        yield url


def workers(port):
    """Pids of the placement-api worker processes serving ``port``: forks
    of the master, with its command line."""
    wanted = b"--port\0%d\0" % port
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read()
            parent = _parent(int(entry))
        except (OSError, ValueError, IndexError):
            continue
        if wanted in cmdline + b"\0":
            found[int(entry)] = parent
    return [pid for pid, parent in found.items() if parent in found]


def master(port):
    """The pid of the placement-api master serving ``port``."""
    return _parent(workers(port)[0])


def _parent(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


# What ``placement-api --server`` offers.
SERVERS = ("gunicorn", "granian")


@contextlib.contextmanager
def placement_api(workdir, *args, server=None, **env):
    """Yield the base URL of the real ``placement-api`` command run with
    ``args`` (and ``--server server`` when given) on a free port and
    configured only by ``env`` (noauth2 and a SQLite file in ``workdir``
    unless given there); stop it afterwards."""
    if server is not None:
        args = ("--server", server, *args)
    port = ports.free_port()
    env.setdefault("OS_API__AUTH_STRATEGY", "noauth2")
    env.setdefault(
        "OS_PLACEMENT_DATABASE__CONNECTION", "sqlite:///%s/placement.sqlite" % workdir
    )
    url = "http://127.0.0.1:%d" % port
    with running(
        [helpers.script("placement-api"), "--port", str(port), *args],
        helpers.clean_env(**env),
        os.path.join(workdir, "server-%d.log" % port),
        url + env.get("SCRIPT_NAME", "") + "/",
    ):
        yield url


@contextlib.contextmanager
def gunicorn(workers=1, env=None):
    """Yield the base URL of a gunicorn running the placement app (noauth2,
    fresh SQLite database); stop it afterwards."""
    with (
        fixtures.database("sqlite", migrate=True) as db,
        tempfile.TemporaryDirectory(prefix="placement-srv-") as confdir,
    ):
        with open(os.path.join(confdir, "placement.conf"), "w") as f:
            f.write(
                "[api]\nauth_strategy = noauth2\n"
                "[placement_database]\nconnection = %s\n"
                % db.engine.url.render_as_string(hide_password=False)
            )
        proc_env = dict(os.environ, OS_PLACEMENT_CONFIG_DIR=confdir, **(env or {}))
        with serve(workers, proc_env, os.path.join(confdir, "gunicorn.log")) as url:
            yield url
