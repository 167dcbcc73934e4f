"""The package as an operator installs it: the wheel built from this tree,
installed into a fresh virtualenv (no checkout on its path), creates its
schema and serves. The dependency wheels come from .venv/wheelhouse, which
tools/ensure-venv fills, so no network is needed here."""

import ast
import importlib.metadata
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import requests

from tests import fixtures
from tests import helpers
from tests import ports
from tests.functional import live_server

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / ".venv" / "wheelhouse"
# What setuptools needs to build the wheel, copied away from the checkout so
# the build leaves nothing (build/, *.egg-info) in it.
SOURCES = ("setup.py", "setup.cfg", "pyproject.toml", "README.rst")
SOURCE_DIRS = ("placement", "migrations", "etc")
HEAD = "e5b2c9d7f1a6"


def _pip(*args, python=None):
    cmd = [sys.executable, "-m", "pip"]
    if python:
        cmd += ["--python", python]
    cmd += [*args, "--no-index", "--find-links", str(WHEELHOUSE), "-q"]
    result = helpers.run(cmd, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel path, bin directory of a fresh venv holding only the wheel
    and its declared dependencies)."""
    if not WHEELHOUSE.is_dir():
        pytest.fail("no %s: run tools/ensure-venv" % WHEELHOUSE)
    tmp = tmp_path_factory.mktemp("package")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        shutil.copy(ROOT / name, src / name)
    for name in SOURCE_DIRS:
        shutil.copytree(
            ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    _pip("wheel", "--no-deps", "-w", str(tmp / "dist"), str(src))
    (wheel,) = (tmp / "dist").glob("placement_py-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    _pip("install", "--no-compile", str(wheel), python=str(venv / "bin" / "python"))
    return wheel, venv / "bin"


def test_wheel_holds_the_migrations_and_no_tests(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "placement/migrations/env.py" in names
    assert "placement/migrations/script.py.mako" in names
    # The samples operators start from, as doc/operations.md says.
    assert "placement/etc/placement.conf.sample" in names
    assert "placement/etc/policy.yaml.sample" in names
    # The console's pages (doc/console.md).
    for name in ("index.html", "console.js", "console.css", "favicon.ico"):
        assert "placement/ui/" + name in names
    assert "placement/migrations/versions/%s_add_catalog_currency.py" % HEAD in names
    assert not [n for n in names if n.startswith(("migrations/", "tests/"))]
    # Of tests, only what other projects import to run placement in theirs.
    assert sorted(n for n in names if n.startswith("placement/tests/")) == [
        "placement/tests/__init__.py",
        "placement/tests/fixtures.py",
        "placement/tests/functional/__init__.py",
        "placement/tests/functional/fixtures/__init__.py",
        "placement/tests/functional/fixtures/placement.py",
    ]


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_installed_wheel_syncs_and_serves(installed, backend, tmp_path):
    fixtures.require_backend(backend)
    _, bindir = installed
    with fixtures.database_url(backend) as url:
        env = helpers.clean_env(OS_PLACEMENT_DATABASE__CONNECTION=url)
        # Run from elsewhere: nothing of the checkout may be importable.
        result = subprocess.run(
            [bindir / "placement-manage", "db", "sync"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        port = ports.free_port()
        base = "http://127.0.0.1:%d" % port
        env["OS_API__AUTH_STRATEGY"] = "noauth2"
        with live_server.running(
            [bindir / "placement-api", "--port", str(port), "--workers", "1"],
            env,
            tmp_path / "server.log",
            base + "/",
            cwd=tmp_path,
            # Nothing is byte-compiled yet in the fresh venv.
            timeout=240,
        ):
            response = requests.get(
                base + "/resource_classes/VCPU",
                headers={
                    "x-auth-token": "admin",
                    "openstack-api-version": "placement 1.2",
                },
                timeout=10,
            )
    assert response.status_code == 200, response.text
    assert response.json()["name"] == "VCPU"


# Another project's test as nova's are written: the fixture serves placement
# at its endpoint for requests, on a fresh database, and leaves no thread.
OTHER_PROJECTS_TEST = """
import threading
import requests
from placement.tests.functional.fixtures import placement

fixture = placement.PlacementFixture()
fixture.setUp()
try:
    response = requests.post(
        fixture.endpoint + "/resource_providers",
        json={"name": "cn1"},
        headers={"x-auth-token": fixture.token,
                 "openstack-api-version": "placement 1.20"},
    )
    print(response.status_code, response.json()["name"])
    response = requests.get(fixture.endpoint + "/resource_classes/VCPU",
                            headers={"x-auth-token": fixture.token,
                                     "openstack-api-version": "placement 1.7"})
    print(response.status_code)
finally:
    fixture.cleanUp()
print(threading.active_count())
"""


def test_installed_wheel_serves_other_projects_tests(installed, tmp_path):
    _, bindir = installed
    result = subprocess.run(
        [bindir / "python", "-c", OTHER_PROJECTS_TEST],
        env=helpers.clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["200 cn1", "200", "1"]


# -- declared dependencies ---------------------------------------------------


def _imported_top_level_names():
    names = set()
    for directory in SOURCE_DIRS:
        for path in (ROOT / directory).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"placement"}


def _normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


# Extras the code imports from: only where they are asked for (osprofiler
# when [profiler] enabled; conf.profiler_groups does without it).
IMPORTED_EXTRAS = ('extra == "profiler"',)


def test_every_imported_distribution_is_declared():
    declared = {
        _normalize(re.match(r"[A-Za-z0-9._-]+", r).group())
        for r in importlib.metadata.requires("placement-py")
        if "extra ==" not in r or r.endswith(IMPORTED_EXTRAS)
    }
    providers = importlib.metadata.packages_distributions()
    missing = {
        name: providers.get(name)
        for name in _imported_top_level_names()
        if not declared & {_normalize(d) for d in providers.get(name, [name])}
    }
    assert not missing, "imported but not in install_requires: %s" % missing
