"""The console's Drain view (doc/console.md, doc/drain.md) in Chromium
against a live placement-api on SQLite and MySQL: reached from a host's
page, it shows the plan's moves as a table and the consumers that fit
nowhere with the API's reasons."""

import httpx
import pytest
import requests

from tests.functional import console_cloud
from tests.functional.console_cloud import ADMIN
from tests.functional.test_console import _shot
from tests.functional.test_console import _sign_in
from tests.functional.test_console import _wait
from tests.functional.test_console import browser  # noqa: F401  (fixture)
from tests.functional.test_console import cloud  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small(cloud):  # noqa: F811
    """A second consumer on cn1 that fits on cn2 (the first, with a VGPU
    on cn1's child, fits nowhere)."""
    base, names, _consumer, _agg = cloud
    with httpx.Client(base_url=base, timeout=10) as client:
        return console_cloud.claim(client, {names["cn1"]: {"VCPU": 1}})


def test_drain_view_from_a_host_page(cloud, browser, small):  # noqa: F811
    from selenium.webdriver.common.by import By

    base, names, consumer, _agg = cloud
    plan = requests.get(
        base + "/maintenance/drain",
        params={"providers": names["cn1"]},
        headers=ADMIN,
        timeout=10,
    ).json()
    assert plan["totals"] == {"consumers": 2, "placed": 1, "left": 1}
    _sign_in(browser, base)
    browser.get(base + "/ui/#/provider/" + names["cn1"])
    _wait(browser, "#view[data-ready='1'] #drain-link").click()
    _wait(browser, "#view[data-ready='1'] #drain-moves")
    (move,) = browser.find_elements(By.CSS_SELECTOR, "tr.drain-move")
    cells = [td.text for td in move.find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == ["1", small, "cn1", "cn2"]
    assert cells[4] == "cn2: VCPU 1"
    (left,) = browser.find_elements(By.CSS_SELECTOR, "tr.drain-unplaced")
    assert left.get_attribute("data-consumer") == consumer
    reason = left.find_element(By.CSS_SELECTOR, ".reason").text
    assert reason == plan["unplaced"][0]["reason"]
    assert "no provider has MEMORY_MB" in reason  # cn2 has none
    totals = browser.find_element(By.ID, "drain-totals").text
    assert "1 of 2 consumers placed, 1 left" in totals
    bars = browser.find_elements(By.CSS_SELECTOR, "#drain-capacity .bar")
    assert {b.get_attribute("data-class") for b in bars} == set(plan["capacity_left"])
    _shot(browser, cloud, "drain")


def test_drain_view_strategy_and_no_errors(cloud, browser, small):  # noqa: F811
    from selenium.webdriver.common.by import By

    base, names, _consumer, _agg = cloud
    _sign_in(browser, base)
    browser.get_log("browser")
    browser.get(base + "/ui/#/drain")
    field = _wait(browser, "#view[data-ready='1'] #drain-form input[name=providers]")
    field.send_keys(names["cn1"])
    browser.find_element(By.CSS_SELECTOR, "#drain-form select").send_keys("pack")
    browser.find_element(By.CSS_SELECTOR, "#drain-form button").click()
    _wait(browser, "#view[data-ready='1'] #drain-moves")
    assert "(pack)" in browser.find_element(By.ID, "drain-totals").text
    assert "strategy=pack" in browser.current_url
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
