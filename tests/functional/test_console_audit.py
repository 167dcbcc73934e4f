"""The console's cloud view flags the roots the data audit lists as over
capacity (doc/audit.md, doc/console.md), in Chromium against a live
placement-api: a host and a nested child put over capacity with SQL, as
another placement's rows can be, are flagged on their roots' rows with
what is over; a healthy host is not."""

import uuid

import httpx
import pytest
import sqlalchemy as sa

from placement.objects import audit as audit_obj
from tests import fixtures
from tests.functional import live_server
from tests.functional import test_audit
from tests.functional.test_console import ADMIN
from tests.functional.test_console import _browser
from tests.functional.test_console import _create
from tests.functional.test_console import _sign_in
from tests.functional.test_console import _wait

pytestmark = pytest.mark.slow


def _claim(client, allocations):
    resp = client.put(
        "/allocations/%s" % uuid.uuid4(),
        json={
            "allocations": {
                rp: {"resources": resources} for rp, resources in allocations.items()
            },
            "project_id": "p-console",
            "user_id": "u-console",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
        headers=ADMIN,
    )
    assert resp.status_code == 204, resp.text


def test_cloud_view_flags_roots_over_capacity(tmp_path):
    from selenium.webdriver.common.by import By

    with (
        fixtures.database_url("sqlite") as url,
        live_server.placement_api(
            str(tmp_path),
            "--workers",
            "1",
            "--db-sync",
            OS_API__AUTH_STRATEGY="noauth2",
            OS_PLACEMENT_DATABASE__CONNECTION=url,
        ) as base,
    ):
        client = httpx.Client(base_url=base, timeout=30)
        vcpu = {"VCPU": {"total": 4}}
        names = {
            name: _create(client, name, inventories=vcpu)
            for name in ("full", "fine", "parent")
        }
        names["numa"] = _create(
            client, "numa", parent=names["parent"], inventories={"VGPU": {"total": 2}}
        )
        _claim(client, {names["full"]: {"VCPU": 4}})
        _claim(client, {names["fine"]: {"VCPU": 4}})
        _claim(client, {names["parent"]: {"VCPU": 1}, names["numa"]: {"VGPU": 2}})
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            # Less room than is used: VCPU 4 of 3 on "full", VGPU 2 of 1
            # on "numa" (under "parent").
            conn.execute(
                sa.text(
                    "UPDATE inventories SET total = total - 1 WHERE"
                    " resource_provider_id IN (SELECT id FROM resource_providers"
                    " WHERE name IN ('full', 'numa'))"
                )
            )
        engine.dispose()
        driver = _browser(tmp_path / "chromium")
        try:
            _sign_in(driver, base)
            flagged = {
                row.get_attribute("data-uuid"): row.find_element(
                    By.CSS_SELECTOR, ".over-capacity-flag"
                ).text
                for row in driver.find_elements(
                    By.CSS_SELECTOR, "tr.root.over-capacity"
                )
            }
            shown = {
                row.get_attribute("data-uuid")
                for row in driver.find_elements(By.CSS_SELECTOR, "tr.root")
            }
        finally:
            driver.quit()
    assert shown == {names["full"], names["fine"], names["parent"]}
    assert flagged == {
        names["full"]: "Over capacity: VCPU 4 / 3 (see placement-manage audit)",
        names[
            "parent"
        ]: "Over capacity: VGPU 2 / 1 on numa (see placement-manage audit)",
    }


def test_roots_past_the_audits_item_cap_are_flagged(tmp_path):
    """More hosts over capacity than the audit lists items (1,000): the
    cloud view asks the audit about its page's roots only (in_tree), so
    the last page's hosts, all past the first 1,000 items, are flagged."""
    from selenium.webdriver.common.by import By

    with (
        fixtures.database_url("sqlite") as url,
        live_server.placement_api(
            str(tmp_path),
            "--workers",
            "1",
            "--db-sync",
            OS_API__AUTH_STRATEGY="noauth2",
            OS_PLACEMENT_DATABASE__CONNECTION=url,
        ) as base,
    ):
        engine = sa.create_engine(url)
        try:
            hosts = test_audit.over_capacity_hosts(engine, audit_obj.ITEMS + 50)
        finally:
            engine.dispose()
        driver = _browser(tmp_path / "chromium")
        try:
            _sign_in(driver, base)
            driver.get_log("browser")
            driver.get(base + "/ui/#/cloud?page=%d" % (len(hosts) // 50 - 1))
            _wait(driver, "#view[data-ready='1'] #roots")
            shown = [
                row.get_attribute("data-uuid")
                for row in driver.find_elements(By.CSS_SELECTOR, "tr.root")
            ]
            flags = {
                row.get_attribute("data-uuid"): row.find_element(
                    By.CSS_SELECTOR, ".over-capacity-flag"
                ).text
                for row in driver.find_elements(
                    By.CSS_SELECTOR, "tr.root.over-capacity"
                )
            }
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        finally:
            driver.quit()
    assert shown == hosts[-50:]
    assert flags == dict.fromkeys(
        shown, "Over capacity: VCPU 2 / 1 (see placement-manage audit)"
    )
    assert errors == []
