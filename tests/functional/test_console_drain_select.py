"""Draining a selection of hosts from the console's cloud view
(doc/console.md), in Chromium against a live placement-api on SQLite and
MySQL: a checkbox per root row and "Drain selected" lead to the Drain view
with those hosts, whose table lists the moves of both hosts' consumers.
The two hosts are on two pages of the view: the selection is kept across
pages, cleared by "Clear selection" and by the drain."""

import json
import urllib.parse
import uuid

import pytest
import requests

from tests import fixtures
from tests.functional import console_cloud
from tests.functional.console_cloud import ADMIN
from tests.functional.test_console import _browser
from tests.functional.test_console import _errors
from tests.functional.test_console import _sign_in
from tests.functional.test_console import _wait

pytestmark = pytest.mark.slow

HOST = {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048}}
PAGE = 50  # roots per page of the cloud view (console.js)


@pytest.mark.parametrize("backend", ["sqlite", "mysql"])
def test_drain_selected_hosts_from_the_cloud_view(backend, tmp_path):
    from selenium.webdriver.common.by import By

    fixtures.require_backend(backend)
    with console_cloud.live_api(tmp_path, backend) as (base, url, client):
        hosts = {
            name: console_cloud.create(client, name, inventories=HOST)
            for name in ("d1", "d2", "spare1", "spare2", "untouched")
        }
        consumers = {
            console_cloud.claim(
                client, {hosts["d1"]: {"VCPU": 2, "MEMORY_MB": 512}}
            ): "d1",
            console_cloud.claim(client, {hosts["d1"]: {"VCPU": 1}}): "d1",
            console_cloud.claim(
                client, {hosts["d2"]: {"VCPU": 1, "MEMORY_MB": 1024}}
            ): "d2",
        }
        console_cloud.claim(client, {hosts["untouched"]: {"VCPU": 1}})
        # Hosts without inventory (no drain target) that put d1 last on the
        # first page (by name) and d2 first on the second.
        for n in range(PAGE - 1):
            console_cloud.create(client, "c%02d" % n)
        selected = [hosts["d1"], hosts["d2"]]
        plan = requests.get(
            base + "/maintenance/drain",
            params={"providers": ",".join(selected)},
            headers=ADMIN,
            timeout=30,
        ).json()
        assert plan["totals"] == {"consumers": 3, "placed": 3, "left": 0}
        planned = {m["consumer"]: m["target"]["name"] for m in plan["moves"]}

        driver = _browser(tmp_path / "chromium")
        try:
            _sign_in(driver, base)
            _errors(driver)

            def box(name):
                return _wait(
                    driver,
                    "#view[data-ready='1'] tr.root[data-uuid='%s'] input.select-root"
                    % hosts[name],
                )

            def button(name="drain-selected"):
                return driver.find_element(By.ID, name)

            def turn(text):
                driver.find_element(By.LINK_TEXT, text).click()

            assert not button().is_enabled()
            assert not button("clear-selected").is_enabled()
            box("d1").click()
            assert button().text == "Drain selected (1)"
            turn("next ›")
            box("d2").click()
            assert button().text == "Drain selected (2)" and button().is_enabled()
            turn("‹ previous")
            kept = box("d1").is_selected()
            counted = button().text
            button("clear-selected").click()
            cleared = (button().text, button().is_enabled(), box("d1").is_selected())
            box("d1").click()
            turn("next ›")
            box("d2").click()
            assert button().text == "Drain selected (2)"
            button().click()
            _wait(driver, "#view[data-ready='1'] #drain-moves")
            fragment = urllib.parse.urlsplit(driver.current_url).fragment
            query = urllib.parse.parse_qs(fragment.split("?", 1)[1])
            field = driver.find_element(
                By.CSS_SELECTOR, "#drain-form input[name=providers]"
            ).get_attribute("value")
            moves = {
                row.get_attribute("data-consumer"): [
                    td.text for td in row.find_elements(By.TAG_NAME, "td")
                ]
                for row in driver.find_elements(By.CSS_SELECTOR, "tr.drain-move")
            }
            totals = driver.find_element(By.ID, "drain-totals").text
            unplaced = driver.find_elements(By.CSS_SELECTOR, "tr.drain-unplaced")
            driver.back()
            after_drain = (box("d2").is_selected(), button().text)
            # More hosts than one plan's URL can name: no drain.
            many = [str(uuid.uuid4()) for _ in range(101)]
            driver.execute_script(
                "sessionStorage.setItem('placement-drain-selection', arguments[0])",
                json.dumps(many),
            )
            turn("‹ previous")
            box("d1")
            too_many = (button().text, button().is_enabled())
            errors = _errors(driver)
        finally:
            driver.quit()
    assert kept and counted == "Drain selected (2)"
    assert cleared == ("Drain selected (0)", False, False)
    assert after_drain == (False, "Drain selected (0)")
    assert too_many == ("Drain selected (101)", False)
    assert set(query["providers"][0].split(",")) == set(selected)
    assert set(field.split(",")) == set(selected)
    assert set(moves) == set(consumers)
    for consumer, cells in moves.items():
        # consumer, from (its host), to (where the API's plan puts it)
        assert cells[1:4] == [consumer, consumers[consumer], planned[consumer]]
        assert cells[3] in ("spare1", "spare2", "untouched")
    assert "3 of 3 consumers placed, 0 left" in totals
    assert "d1" in totals and "d2" in totals
    assert unplaced == []
    assert errors == []
