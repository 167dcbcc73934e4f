"""Operators' paths through the real commands: every mistake an operator
can make in the configuration or the environment ends the command with
one line naming the option, where it was set and the fix; read-only
commands create nothing; a second command never disturbs a running
server; the start says what it found."""

import json
import os
import re
import shutil
import socket
import stat
import subprocess

import pytest
import requests

from placement.db import schema
from tests import helpers
from tests.functional import live_server

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOAUTH = {"OS_API__AUTH_STRATEGY": "noauth2"}


def run(command, *args, cwd=None, **env):
    return subprocess.run(
        [helpers.script(command), *args],
        env=helpers.clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def one_error_line(result, command):
    """The command's one error line (exit 1, or placement-status' 255 for
    an error; no traceback)."""
    output = result.stdout + result.stderr
    assert result.returncode == (255 if command == "placement-status" else 1), output
    assert "Traceback" not in output, output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(command + ": error:")]
    assert len(errors) == 1, output
    return errors[0]


@pytest.fixture
def sqlite(tmp_path):
    return "sqlite:///%s/placement.sqlite" % tmp_path


@pytest.mark.parametrize("command", ["placement-manage", "placement-status"])
def test_bad_choice_from_the_environment_is_one_line(command, sqlite):
    args = ["db", "version"] if command == "placement-manage" else ["upgrade", "check"]
    result = run(
        command,
        *args,
        OS_API__AUTH_STRATEGY="foo",
        OS_PLACEMENT_DATABASE__CONNECTION=sqlite,
    )
    line = one_error_line(result, command)
    assert "[api] auth_strategy" in line
    assert "OS_API__AUTH_STRATEGY" in line
    assert "[keystone, noauth2]" in line and "'foo'" in line


def test_bad_choice_from_a_file_names_the_file(tmp_path, sqlite):
    conf = tmp_path / "placement.conf"
    conf.write_text(
        "[api]\nauth_strategy = noauth\n[placement_database]\nconnection = %s\n"
        % sqlite
    )
    result = run("placement-api", "--config-file", str(conf))
    line = one_error_line(result, "placement-api")
    assert "[api] auth_strategy" in line and str(conf) in line


def test_unwritable_log_file_is_one_line(tmp_path, sqlite):
    result = run(
        "placement-manage",
        "db",
        "version",
        OS_DEFAULT__LOG_FILE=str(tmp_path / "missing-dir" / "placement.log"),
        OS_PLACEMENT_DATABASE__CONNECTION=sqlite,
    )
    line = one_error_line(result, "placement-manage")
    assert "cannot write the log file" in line and "log_file" in line


def test_bad_metrics_directory_spares_help_and_is_one_line(tmp_path, sqlite):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    env = dict(NOAUTH, PROMETHEUS_MULTIPROC_DIR=str(not_a_dir / "metrics"))
    helped = run("placement-api", "--help", **env)
    assert helped.returncode == 0, helped.stderr
    assert "usage: placement-api" in helped.stdout
    result = run("placement-api", OS_PLACEMENT_DATABASE__CONNECTION=sqlite, **env)
    line = one_error_line(result, "placement-api")
    assert "PROMETHEUS_MULTIPROC_DIR=%s/metrics" % not_a_dir in line


def _value(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") and 'route="/resource_providers"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_second_command_keeps_a_running_servers_metrics(tmp_path):
    """placement-api --help, and a second server, run with the live
    server's PROMETHEUS_MULTIPROC_DIR, leave its counts alone; the first
    server's start log says how big its provider catalog is."""
    metrics_dir = tmp_path / "metrics"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    with live_server.placement_api(str(tmp_path), "--workers", "1", **env) as url:
        for _ in range(3):
            resp = requests.get(
                url + "/resource_providers", headers={"x-auth-token": "admin"}
            )
            assert resp.status_code == 200
        name = "placement_http_requests_total"
        before = _value(requests.get(url + "/metrics").text, name)
        assert before >= 3
        assert run("placement-api", "--help", **env).returncode == 0
        other = tmp_path / "other"
        other.mkdir()
        with live_server.placement_api(str(other), "--workers", "1", **env):
            pass
        assert _value(requests.get(url + "/metrics").text, name) >= before
    logs = "".join(p.read_text() for p in tmp_path.glob("server-*.log"))
    assert re.search(r"provider catalog: 0 providers, brought up to date in", logs)
    assert "is in use by another running placement-api" in "".join(
        p.read_text() for p in other.glob("server-*.log")
    )


def test_status_json_and_help(sqlite):
    assert (
        run(
            "placement-manage", "db", "sync", OS_PLACEMENT_DATABASE__CONNECTION=sqlite
        ).returncode
        == 0
    )
    result = run(
        "placement-status",
        "upgrade",
        "check",
        "--json",
        OS_PLACEMENT_DATABASE__CONNECTION=sqlite,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {c["check"] for c in document["checks"]} >= {"Missing Root Provider IDs"}
    assert all(c["result"] == 0 for c in document["checks"])
    helped = run("placement-status", "--help")
    assert "placement-status upgrade check [--json]" in helped.stdout


def test_port_in_use_is_one_line(sqlite):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            "placement-api",
            "--port",
            str(port),
            OS_PLACEMENT_DATABASE__CONNECTION=sqlite,
            **NOAUTH,
        )
    line = one_error_line(result, "placement-api")
    assert "port %d" % port in line and "--port" in line
    assert "ERROR" not in result.stdout + result.stderr


def test_relative_sqlite_path_is_named(tmp_path):
    result = run(
        "placement-manage",
        "db",
        "sync",
        cwd=str(tmp_path),
        OS_PLACEMENT_DATABASE__CONNECTION="sqlite:///rel.sqlite",
    )
    assert result.returncode == 0, result.stderr
    warnings = [
        line for line in result.stderr.splitlines() if "relative SQLite" in line
    ]
    assert len(warnings) == 1
    assert str(tmp_path / "rel.sqlite") in warnings[0]
    assert (tmp_path / "rel.sqlite").exists()


def test_read_only_check_creates_nothing(tmp_path):
    result = run(
        "placement-status",
        "upgrade",
        "check",
        OS_PLACEMENT_DATABASE__CONNECTION="sqlite:///%s/missing.sqlite" % tmp_path,
    )
    assert result.returncode == 255, result.stdout + result.stderr
    assert "missing.sqlite does not exist" in result.stderr
    assert os.listdir(tmp_path) == []


def test_not_a_database_says_so(tmp_path):
    path = tmp_path / "placement.sqlite"
    path.write_text("these are notes, not a database\n" * 100)
    result = run(
        "placement-manage",
        "db",
        "version",
        OS_PLACEMENT_DATABASE__CONNECTION="sqlite:///%s" % path,
    )
    line = one_error_line(result, "placement-manage")
    assert "is not a SQLite database" in line
    assert "writable" not in line


def test_version_of_an_empty_database(sqlite):
    result = run(
        "placement-manage", "db", "version", OS_PLACEMENT_DATABASE__CONNECTION=sqlite
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no schema (run placement-manage db sync)"


def test_unknown_options_are_named(tmp_path, sqlite):
    conf = tmp_path / "placement.conf"
    conf.write_text(
        "[DEFAULT]\nlogfile_typo = x\n"
        "[placement_database]\nconection = mysql://\nconnection = %s\n"
        "[api]\nauth_strategy = noauth2\n"
        "[keystone_authtoken]\nanything = 1\n" % sqlite
    )
    result = run("placement-manage", "--config-file", str(conf), "db", "version")
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "not an option" in line]
    assert len(warned) == 2, result.stderr
    assert "[placement_database] conection" in warned[0] + warned[1]
    assert "[DEFAULT] logfile_typo" in warned[0] + warned[1]


def test_first_venv_build_says_each_step(tmp_path):
    """tools/ensure-venv names each step as it goes (here with a stand-in
    Python whose venv and pip do nothing)."""
    for name in ("setup.py", "setup.cfg", "pyproject.toml"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    (tmp_path / "tools").mkdir()
    shutil.copy(os.path.join(ROOT, "tools", "ensure-venv"), tmp_path / "tools")
    stub = tmp_path / "python-stub"
    stub.write_text(
        "#!/bin/sh\n"
        "mkdir -p .venv/bin\n"
        "for tool in python pip; do printf '#!/bin/sh\\nexit 0\\n' > .venv/bin/$tool;"
        " chmod +x .venv/bin/$tool; done\n"
    )
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    result = subprocess.run(
        ["bash", str(tmp_path / "tools" / "ensure-venv")],
        env=dict(os.environ, PYTHON=str(stub)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    steps = result.stderr.splitlines()
    assert steps[0].startswith("tools/ensure-venv: creating .venv")
    assert any("installing placement" in s for s in steps)
    assert steps[-1] == "tools/ensure-venv: .venv is ready"
    again = subprocess.run(
        ["bash", str(tmp_path / "tools" / "ensure-venv")],
        env=dict(os.environ, PYTHON=str(stub)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.stderr == ""  # nothing to do, nothing said


def test_readme_names_every_manage_command():
    """The README's commands section names each category placement-manage
    offers (its --help lists them as {db,capacity})."""
    result = run("placement-manage", "--help")
    assert result.returncode == 0, result.stderr
    categories = re.findall(r"\{([a-z_,-]+)\}", result.stdout)[0]
    with open(os.path.join(ROOT, "README.rst")) as f:
        readme = f.read()
    commands = readme.split("\nCommands\n", 1)[1].split("\nRunning in production\n")[0]
    for category in categories.split(","):
        assert "``placement-manage %s " % category in commands, category


def test_downgrade_help_gives_the_floor():
    result = run("placement-manage", "db", "downgrade", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "no further down than %s" % schema.REFERENCE_HEAD in text


def test_unknown_database_type_lists_every_supported_url():
    result = run(
        "placement-manage",
        "db",
        "version",
        OS_PLACEMENT_DATABASE__CONNECTION="oracledb://u@h/placement",
    )
    line = one_error_line(result, "placement-manage")
    assert "unknown database type 'oracledb'" in line
    for scheme in ("mysql+pymysql://", "postgresql+psycopg://", "sqlite:////"):
        assert scheme in line


def test_missing_sqlite_directory_is_created_and_said(tmp_path):
    directory = tmp_path / "state" / "placement"
    url = "sqlite:///%s/placement.sqlite" % directory
    result = run(
        "placement-manage", "db", "sync", OS_PLACEMENT_DATABASE__CONNECTION=url
    )
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "created the dir" in line]
    assert len(said) == 1, result.stderr
    assert " INFO " in said[0] and "directory %s for" % directory in said[0]
    assert (directory / "placement.sqlite").exists()
    again = run(
        "placement-manage", "db", "version", OS_PLACEMENT_DATABASE__CONNECTION=url
    )
    assert again.returncode == 0, again.stderr
    assert "created the dir" not in again.stderr
