"""The sample files under etc/placement are what the generators produce
from the code today (regenerate with ``tox -e genconfig`` / ``genpolicy``)."""

import os
import subprocess
import sys

import pytest
import yaml

from placement import policies

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ETC = os.path.join(ROOT, "etc", "placement")
BIN = os.path.dirname(sys.executable)


def _generate(tool, generator_conf, tmp_path):
    out = tmp_path / "sample"
    subprocess.run(
        [
            os.path.join(BIN, tool),
            "--config-file",
            os.path.join(ETC, generator_conf),
            "--output-file",
            str(out),
        ],
        check=True,
        cwd=ROOT,
    )
    return out.read_text()


@pytest.mark.parametrize(
    "tool,generator_conf,sample",
    [
        ("oslo-config-generator", "config-generator.conf", "placement.conf.sample"),
        ("oslopolicy-sample-generator", "policy-generator.conf", "policy.yaml.sample"),
    ],
)
def test_sample_is_current(tool, generator_conf, sample, tmp_path):
    with open(os.path.join(ETC, sample)) as f:
        assert _generate(tool, generator_conf, tmp_path) == f.read(), (
            "%s is stale: run tox -e genconfig/genpolicy" % sample
        )


def test_config_sample_has_every_group():
    with open(os.path.join(ETC, "placement.conf.sample")) as f:
        text = f.read()
    for group in (
        "DEFAULT",
        "api",
        "placement",
        "workarounds",
        "placement_database",
        "keystone_authtoken",
        "cors",
        "oslo_middleware",
        "oslo_policy",
        "profiler",
        "profiler_otlp",
    ):
        assert "[%s]\n" % group in text.splitlines(keepends=True)
    # Placement's CORS defaults, not the library's.
    assert "#allow_headers = X-Auth-Token,X-Openstack-Request-Id," in text
    assert "#allow_methods = GET,PUT,POST,DELETE,PATCH" in text


def test_policy_sample_lists_every_rule():
    with open(os.path.join(ETC, "policy.yaml.sample")) as f:
        # Every default is a commented-out YAML line: uncomment to parse.
        lines = [line[1:] for line in f if line.startswith('#"')]
    rules = yaml.safe_load("\n".join(lines))
    assert sorted(rules) == sorted(r.name for r in policies.list_rules())
    assert rules["placement:reshaper:reshape"] == "rule:service_api"
