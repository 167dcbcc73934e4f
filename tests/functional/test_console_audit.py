"""The console's cloud view flags the roots the data audit lists as over
capacity (doc/audit.md, doc/console.md), in Chromium against a live
placement-api: a host and a nested child put over capacity with SQL, as
another placement's rows can be, are flagged on their roots' rows with
what is over; a healthy host is not."""

import pytest
import sqlalchemy as sa

from placement.objects import audit as audit_obj
from tests.functional import console_cloud
from tests.functional import test_audit
from tests.functional.test_console import _browser
from tests.functional.test_console import _sign_in
from tests.functional.test_console import _wait

pytestmark = pytest.mark.slow


def _flags(driver):
    """{root uuid: its flag's text} of the cloud view's rows flagged over
    capacity."""
    from selenium.webdriver.common.by import By

    return {
        row.get_attribute("data-uuid"): row.find_element(
            By.CSS_SELECTOR, ".over-capacity-flag"
        ).text
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.root.over-capacity")
    }


def test_cloud_view_flags_roots_over_capacity(tmp_path):
    from selenium.webdriver.common.by import By

    with console_cloud.live_api(tmp_path, "sqlite") as (base, url, client):
        vcpu = {"VCPU": {"total": 4}}
        names = {
            name: console_cloud.create(client, name, inventories=vcpu)
            for name in ("full", "fine", "parent")
        }
        names["numa"] = console_cloud.create(
            client, "numa", parent=names["parent"], inventories={"VGPU": {"total": 2}}
        )
        console_cloud.claim(client, {names["full"]: {"VCPU": 4}})
        console_cloud.claim(client, {names["fine"]: {"VCPU": 4}})
        console_cloud.claim(
            client, {names["parent"]: {"VCPU": 1}, names["numa"]: {"VGPU": 2}}
        )
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
            flagged = _flags(driver)
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

    with console_cloud.live_api(tmp_path, "sqlite") as (base, url, client):
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
            flags = _flags(driver)
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        finally:
            driver.quit()
    assert shown == hosts[-50:]
    assert flags == dict.fromkeys(
        shown, "Over capacity: VCPU 2 / 1 (see placement-manage audit)"
    )
    assert errors == []
