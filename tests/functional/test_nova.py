"""Nova's own functional tests, unchanged, with this tree as their
placement: server moves, QoS port scheduling, reshapes, provider trees,
consumer generation conflicts and PCI devices in placement (the list:
tools/nova/tests.txt). They run
in .venv-nova (tools/ensure-nova-venv, which tools/run-tests calls) from
nova's pinned sdist, in parallel, under eventlet and failing on leaked
greenlets; each of them is one test here. Without .venv-nova they fail:
a missing nova is never a skip. doc/testing-with-placement.md."""

import json
import os
import pathlib
import subprocess

import pytest

from tests import helpers

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOVA_PYTHON = ROOT / ".venv-nova" / "bin" / "python"
RUNNER = ROOT / "tools" / "nova" / "run.py"
TESTS = (ROOT / "tools" / "nova" / "tests.txt").read_text().split()
PREFIX = "nova.tests.functional."
# stestr workers: nova's tests wait (service start and stop) more than they
# compute, so more workers than CPUs finish sooner.
CONCURRENCY = os.environ.get("PLACEMENT_NOVA_CONCURRENCY", "4")

pytestmark = pytest.mark.slow


def _nova_python():
    if not NOVA_PYTHON.exists():
        pytest.fail("no %s: run tools/ensure-nova-venv" % NOVA_PYTHON)
    return str(NOVA_PYTHON)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """{test id: {"status", "seconds", "details"}} of one run of the list."""
    out = tmp_path_factory.mktemp("nova") / "outcomes.json"
    result = subprocess.run(
        [_nova_python(), RUNNER, "--concurrency", CONCURRENCY, "--json", out],
        env=helpers.clean_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if not out.exists():
        pytest.fail("nova's tests did not run:\n%s" % result.stderr[-5000:])
    return json.loads(out.read_text())


@pytest.mark.parametrize("test_id", TESTS, ids=[t[len(PREFIX) :] for t in TESTS])
def test_nova(outcomes, test_id):
    outcome = outcomes[test_id]
    assert outcome["status"] == "success", outcome["details"]


@pytest.mark.parametrize(
    "first, second", [("nova.conf", "placement.conf"), ("placement.conf", "nova.conf")]
)
def test_nova_and_placement_configuration_in_one_process(first, second):
    """Both register their options, nova's on its global ConfigOpts and
    placement's on the one it is given, in either order."""
    probe = (
        "import importlib\n"
        "from oslo_config import cfg\n"
        "importlib.import_module(%r)\n"
        "importlib.import_module(%r)\n"
        "import nova.conf, placement.conf\n"
        "nova.conf.CONF([], default_config_files=[])\n"
        "own = cfg.ConfigOpts()\n"
        "placement.conf.register_opts(own)\n"
        "own([], default_config_files=[])\n"
        "print(nova.conf.CONF.api.max_limit, own.api.auth_strategy,\n"
        "      'placement_database' in nova.conf.CONF)\n" % (first, second)
    )
    result = subprocess.run(
        [_nova_python(), "-c", probe],
        env=helpers.clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1000", "keystone", "False"]
