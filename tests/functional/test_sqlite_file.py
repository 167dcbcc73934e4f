"""The SQLite file removed or replaced under a running placement-api: the
server notices (device and inode) and refuses every request with a JSON
503 and a failing /healthcheck, so that no write is acknowledged into a
file that no longer is the configured one."""

import os
import shutil
import uuid

import pytest
import requests

from tests.functional import live_server

pytestmark = pytest.mark.slow

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
TRIES = 6  # requests of each kind: both workers answer some


def _create(base):
    return requests.post(
        base + "/resource_providers",
        json={"name": "rp-" + uuid.uuid4().hex[:8]},
        headers=ADMIN,
        timeout=30,
    )


def _assert_refused(base):
    for _ in range(TRIES):
        health = requests.get(base + "/healthcheck", timeout=30)
        assert health.status_code == 503, health.text
        assert health.json()["reasons"] == ["database file removed"]
        for resp in (
            _create(base),
            requests.get(base + "/resource_providers", headers=ADMIN, timeout=30),
        ):
            assert resp.status_code == 503, resp.text
            assert resp.headers["content-type"].startswith("application/json")
            (error,) = resp.json()["errors"]
            assert error["status"] == 503
            assert "Database file removed or replaced" in error["detail"]


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_file_gone_from_under_the_server_refuses_every_request(tmp_path, how):
    path = tmp_path / "placement.sqlite"
    with live_server.placement_api(str(tmp_path), "--workers", "2") as base:
        for _ in range(TRIES):
            assert _create(base).status_code == 200
        assert requests.get(base + "/healthcheck", timeout=30).status_code == 200
        if how == "removed":
            os.unlink(path)
        else:  # a restore from a copy, as mv does it
            shutil.copy(path, tmp_path / "copy.sqlite")
            os.replace(tmp_path / "copy.sqlite", path)
        _assert_refused(base)
        if how == "removed":
            # Nothing opened a new, empty file at the configured path.
            assert not path.exists()
