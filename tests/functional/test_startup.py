"""Start-up as an operator meets it: problems only they can fix end the
command at once with one line naming the problem and the fix; a database
that is not up yet is waited for; the logs have one format; instances on
one host do not disturb each other; --help shows the defaults."""

import contextlib
import os
import re
import socket
import struct
import sys
import threading
import time

import pytest
import requests
import sqlalchemy as sa

from placement.db import schema
from tests import fixtures
from tests import helpers
from tests import ports
from tests.functional import live_server

pytestmark = pytest.mark.slow

# Long enough that a retried error could not end the command in time.
NO_RETRY = {
    "OS_PLACEMENT_DATABASE__RETRY_INTERVAL": "60",
    "OS_API__AUTH_STRATEGY": "noauth2",
}
SYNC_HINT = "run `placement-manage db sync` or start with `--db-sync`"
# oslo.log's line: date time.ms pid LEVEL logger [context] message
LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \d+ "
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<logger>\S+) "
    r"\[(?P<context>[^\]]*)\] (?P<message>.*)$"
)


def run(command, *args, timeout=60, **env):
    """Run a console script; (CompletedProcess, seconds it took)."""
    started = time.monotonic()
    result = helpers.run(
        [helpers.script(command), *args], dict(NO_RETRY, **env), timeout=timeout
    )
    return result, time.monotonic() - started


def assert_fails_with(result, elapsed, command, message, status=1):
    """One error line naming ``message``, no traceback, no retry."""
    output = result.stdout + result.stderr
    assert result.returncode == status, output
    assert "Traceback" not in output
    errors = [
        line for line in result.stderr.splitlines() if line.startswith(command + ":")
    ]
    assert len(errors) == 1 and message in errors[0], output
    assert "not reachable" not in output
    # A hang guard, not a speed test: the command ran to its end well
    # within run()'s subprocess timeout.
    assert elapsed < 60


@pytest.fixture
def mysql_url():
    fixtures.require_backend("mysql")
    with fixtures.database_url("mysql") as url:
        yield url


@pytest.mark.parametrize("command", ["placement-api", "placement-manage"])
def test_unknown_database(command, mysql_url):
    url = sa.engine.make_url(mysql_url).set(database="placement_no_such_db")
    args = ["db", "version"] if command == "placement-manage" else []
    result, elapsed = run(
        command,
        *args,
        OS_PLACEMENT_DATABASE__CONNECTION=url.render_as_string(hide_password=False),
    )
    assert_fails_with(
        result,
        elapsed,
        command,
        "database 'placement_no_such_db' does not exist on 127.0.0.1: create it",
    )


def test_access_denied(mysql_url):
    url = sa.engine.make_url(mysql_url).set(username="nobody", password="secret")
    result, elapsed = run(
        "placement-api",
        OS_PLACEMENT_DATABASE__CONNECTION=url.render_as_string(hide_password=False),
    )
    assert_fails_with(result, elapsed, "placement-api", "access denied to ")
    assert "check the user and password" in result.stderr
    assert "secret" not in result.stdout + result.stderr


def test_uninstalled_mysql_driver_gets_a_driver_hint(mysql_url):
    url = sa.engine.make_url(mysql_url).set(drivername="mysql+mariadbconnector")
    result, elapsed = run(
        "placement-api",
        OS_PLACEMENT_DATABASE__CONNECTION=url.render_as_string(hide_password=False),
    )
    assert_fails_with(
        result,
        elapsed,
        "placement-api",
        "needs the Python module mariadb, which is not installed; use mysql+pymysql://",
    )


def test_unwritable_sqlite_path():
    # /proc refuses new files even to root.
    result, elapsed = run(
        "placement-api",
        OS_PLACEMENT_DATABASE__CONNECTION="sqlite:////proc/placement.sqlite",
    )
    assert_fails_with(
        result,
        elapsed,
        "placement-api",
        "cannot open the SQLite database /proc/placement.sqlite",
    )


def test_empty_mysql_database_without_db_sync(mysql_url):
    result, elapsed = run("placement-api", OS_PLACEMENT_DATABASE__CONNECTION=mysql_url)
    assert_fails_with(
        result,
        elapsed,
        "placement-api",
        "the database has no placement schema: " + SYNC_HINT,
    )
    assert "Listening" not in result.stdout + result.stderr


def test_schema_older_than_the_code(mysql_url):
    engine = sa.create_engine(mysql_url)
    schema.upgrade(engine, "b4ed3a175331")
    engine.dispose()
    result, elapsed = run("placement-api", OS_PLACEMENT_DATABASE__CONNECTION=mysql_url)
    assert_fails_with(
        result,
        elapsed,
        "placement-api",
        "the database schema is at revision b4ed3a175331, older than this "
        "placement's %s: %s" % (schema.HEAD, SYNC_HINT),
    )


def test_debug_shows_the_traceback():
    result, _ = run(
        "placement-api",
        "--debug",
        OS_PLACEMENT_DATABASE__CONNECTION="sqlite:////proc/placement.sqlite",
    )
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert "placement-api: error: cannot open the SQLite database" in result.stderr


@pytest.mark.parametrize(
    "driver, said",
    [("pymysql", "Connection refused"), ("mysqldb", "Can't connect to server")],
)
def test_refused_connection_is_retried_with_a_countdown(driver, said):
    url = "mysql+%s://root@127.0.0.1:%d/placement" % (driver, ports.free_port())
    result, _ = run(
        "placement-manage",
        "db",
        "sync",
        OS_PLACEMENT_DATABASE__CONNECTION=url,
        OS_PLACEMENT_DATABASE__MAX_RETRIES="2",
        OS_PLACEMENT_DATABASE__RETRY_INTERVAL="1",
    )
    assert result.returncode == 1
    retries = [line for line in result.stderr.splitlines() if "not reachable" in line]
    assert said in retries[0]
    assert [line.split(";")[-1] for line in retries[:2]] == [
        " attempt 2 of 3 in 1s",
        " attempt 3 of 3 in 1s",
    ]
    assert retries[2].startswith(
        "placement-manage: error: database %s still not reachable after "
        "3 attempts" % url
    )
    assert retries[2].endswith(
        "the host did not answer; start the database server or check the network to it"
    )
    assert "Traceback" not in result.stderr


@contextlib.contextmanager
def resetting_host():
    """The port of a TCP server that accepts each connection and resets it
    at once (a host whose database is down behind a proxy, or restarting)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            # Linger 0: close() sends RST instead of FIN.
            conn.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.mark.parametrize(
    "scheme", ["mysql+pymysql://root", "postgresql+psycopg://placement"]
)
def test_reset_connection_is_retried_like_a_refusal(scheme):
    with resetting_host() as port:
        url = "%s@127.0.0.1:%d/placement" % (scheme, port)
        result, _ = run(
            "placement-manage",
            "db",
            "sync",
            OS_PLACEMENT_DATABASE__CONNECTION=url,
            OS_PLACEMENT_DATABASE__MAX_RETRIES="1",
            OS_PLACEMENT_DATABASE__RETRY_INTERVAL="1",
        )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    retries = [line for line in lines if "not reachable (" in line]
    assert len(retries) == 1 and retries[0].endswith("attempt 2 of 2 in 1s")
    (error,) = [line for line in lines if line.startswith("placement-manage:")]
    assert error.startswith(
        "placement-manage: error: database %s still not reachable after "
        "2 attempts" % url
    )
    assert "the host did not answer" in error
    assert "correct [placement_database] connection" not in error
    assert "Traceback" not in result.stderr


BAD_VALUE = "invalid value for [placement] max_allocation_candidates"
COMMANDS = {
    "placement-api": ([], 1),
    "placement-manage": (["db", "sync"], 1),
    "placement-status": (["upgrade", "check"], 255),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_bad_option_value(command, tmp_path):
    args, status = COMMANDS[command]
    conf = tmp_path / "placement.conf"
    conf.write_text("[placement]\nmax_allocation_candidates = many\n")
    result, elapsed = run(
        command,
        "--config-file",
        str(conf),
        *args,
        OS_PLACEMENT_DATABASE__CONNECTION="sqlite:///%s/p.sqlite" % tmp_path,
    )
    assert_fails_with(
        result,
        elapsed,
        command,
        "%s (set in %s): invalid literal for int() with base 10: 'many'"
        % (BAD_VALUE, conf),
        status,
    )


def test_randomize_with_an_order_is_refused(tmp_path):
    conf = tmp_path / "placement.conf"
    conf.write_text(
        "[placement]\nrandomize_allocation_candidates = True\n"
        "allocation_candidates_order = spread\n"
    )
    result, elapsed = run(
        "placement-api",
        "--config-file",
        str(conf),
        OS_PLACEMENT_DATABASE__CONNECTION="sqlite:///%s/p.sqlite" % tmp_path,
    )
    assert_fails_with(
        result,
        elapsed,
        "placement-api",
        "[placement] randomize_allocation_candidates = True and "
        "allocation_candidates_order = spread cannot go together",
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_missing_config_file(command, tmp_path):
    args, status = COMMANDS[command]
    result, elapsed = run(command, "--config-file", str(tmp_path / "nope.conf"), *args)
    assert_fails_with(
        result,
        elapsed,
        command,
        "configuration file not found: %s" % (tmp_path / "nope.conf"),
        status,
    )


def test_status_without_connection():
    result, elapsed = run("placement-status", "upgrade", "check")
    assert_fails_with(
        result,
        elapsed,
        "placement-status",
        "[placement_database] connection is not set",
        255,
    )


def test_api_without_connection_says_so_in_its_first_line():
    result, elapsed = run("placement-api", "--port", "0")
    assert_fails_with(
        result,
        elapsed,
        "placement-api",
        "[placement_database] connection is not set",
    )
    first = (result.stdout + result.stderr).splitlines()[0]
    assert LOG_LINE.match(first)["level"] == "INFO"
    assert ": no [placement_database] connection set, auth_strategy " in first
    assert "not a URL" not in result.stdout + result.stderr


# -- serving -------------------------------------------------------------------


def _logged_lines(path):
    return path.read_text().splitlines()


# The logger of each HTTP server's own messages.
SERVER_LOGGER = {"gunicorn": "gunicorn", "granian": "_granian"}


def test_one_log_format_and_request_ids(tmp_path, api_server):
    """Every line (the HTTP server's included) has oslo.log's format; the
    start-up line and the noauth2 warning are there; each request-log line
    carries its own request id, also for 401, /healthcheck and /metrics."""
    with live_server.placement_api(
        tmp_path, "--workers", "1", server=api_server
    ) as base:
        ids = []
        for path, headers in [
            ("/resource_providers", {"x-auth-token": "admin"}),
            ("/resource_providers", {}),
            ("/healthcheck", {}),
            ("/metrics", {}),
        ]:
            response = requests.get(base + path, headers=headers, timeout=10)
            ids.append(response.headers["x-openstack-request-id"])
        assert response.status_code == 200
    (log,) = tmp_path.glob("server-*.log")
    lines = _logged_lines(log)
    parsed = [LOG_LINE.match(line) for line in lines]
    assert all(parsed), [line for line, m in zip(lines, parsed) if not m]
    summary = [m for m in parsed if m["message"].startswith("placement ")][0]
    assert summary["level"] == "INFO"
    assert re.search(
        r"database sqlite:///\S+, auth_strategy noauth2, 1 workers x 4 threads "
        r"\(2 active per worker\), listening on 127.0.0.1:\d+ with %s$" % api_server,
        summary["message"],
    )
    (warning,) = [m for m in parsed if "noauth2: requests are NOT" in m["message"]]
    assert warning["level"] == "WARNING"
    # It says plainly which headers are trusted.
    for header in ("X-Auth-Token", "X-Roles", "X-User-Id", "X-Project-Id"):
        assert header in warning["message"], warning
    assert [m for m in parsed if m["logger"].startswith(SERVER_LOGGER[api_server])]
    requests_logged = [m for m in parsed if m["logger"] == "placement.requestlog"]
    for m in requests_logged:
        logged_id = m["message"].rsplit("request_id: ", 1)[1]
        assert logged_id in m["context"].split()
    assert [
        m["message"].rsplit("request_id: ", 1)[1]
        for m in requests_logged
        if '"GET /' in m["message"] and '"GET /"' not in m["message"]
    ] == ids


def test_two_instances_side_by_side(tmp_path, api_server):
    """Two placement-api on one host (same user, same HOME) serve
    independently; stopping one leaves the other serving."""
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path)}
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    env["server"] = api_server
    with live_server.placement_api(second_dir, "--workers", "1", **env) as second:
        with live_server.placement_api(first_dir, "--workers", "1", **env) as first:
            for base in (first, second):
                assert requests.get(base + "/", timeout=10).status_code == 200
        assert requests.get(second + "/", timeout=10).status_code == 200
    assert not list(tmp_path.rglob("*.ctl")) + list(tmp_path.rglob("*.sock"))


def test_default_workers_follow_the_cpus(tmp_path, api_server):
    with live_server.placement_api(tmp_path, server=api_server):
        pass
    (log,) = tmp_path.glob("server-*.log")
    assert " %d workers x 4 threads " % len(os.sched_getaffinity(0)) in log.read_text()


STARTUP = """
import sys
from placement.cmd import api
from placement import conf, deploy, startup
c = conf.command_conf()
c.register_cli_opts(api.serve_opts)
conf.parse_args(c, [])
db = startup.make_database(c)
startup.prepare_schema(db, sync=True)
deploy.build_app(c, db=db)
print(sorted({"alembic", "keystonemiddleware"} & set(sys.modules)))
"""


def test_start_up_at_head_skips_alembic_and_keystone(tmp_path):
    """The slow imports the quick start avoids: alembic when the schema is
    already at head, keystonemiddleware under noauth2."""
    url = "sqlite:///%s/p.sqlite" % tmp_path
    engine = sa.create_engine(url)
    schema.upgrade(engine)
    engine.dispose()
    env = {"OS_PLACEMENT_DATABASE__CONNECTION": url}
    result = helpers.run([sys.executable, "-c", STARTUP], dict(NO_RETRY, **env))
    assert result.stdout.splitlines()[-1] == "[]", result.stderr
    env["OS_API__AUTH_STRATEGY"] = "keystone"
    result = helpers.run([sys.executable, "-c", STARTUP], env)
    assert result.stdout.splitlines()[-1] == "['keystonemiddleware']", result.stderr


# -- help ----------------------------------------------------------------------


def test_api_help_shows_defaults():
    result, _ = run("placement-api", "--help")
    text = " ".join(result.stdout.split())
    for default in (
        "(default: 127.0.0.1)",
        "(default: 8778)",
        "(default: the CPUs this process may use, %d here)"
        % len(os.sched_getaffinity(0)),
        "(default: 4)",
        "(default: 2)",
        "(default: off; always on for SQLite)",
    ):
        assert default in text
    assert "placement.api" not in text
    assert "--log-dir" not in text


def test_manage_help_puts_the_commands_first():
    result, _ = run("placement-manage", "--help")
    lines = result.stdout.splitlines()
    assert "Commands: db sync" in "\n".join(lines[:6])
    assert len(lines) < 40
