"""The operator console at /ui/ in a real browser: Debian's Chromium,
driven by Selenium through Debian's chromedriver, against a live
placement-api on SQLite and MySQL. Signs in, reads the roots and their
usage as the API reports them, opens a tree with its consumers, runs a
query that fits and one that does not (the explain funnel names the
blocking filter), and shows a hostile provider name as text that runs
nothing. A screenshot of each view is saved under the test's output
directory (printed)."""

import os
import shutil
import urllib.parse
import uuid

import pytest
import requests

from tests import browser as browser_tool
from tests import fixtures
from tests import wsgi_client
from tests.functional import console_cloud
from tests.functional.console_cloud import ADMIN

pytestmark = pytest.mark.slow

HOSTILE = "<img src=x onerror=alert(1)>"
AGG2 = "7e5a0000-0000-4000-8000-0000000000a2"  # cn2's: no VGPU under it
WAIT = 30  # seconds: a hang guard, not a measure


def _browser(tmp_path):
    if not browser_tool.installed():
        if os.environ.get("CI"):
            pytest.fail(
                "chromium and chromium-driver are missing (tools/ensure-test-packages)"
            )
        pytest.skip("chromium and chromium-driver are not installed")
    return browser_tool.chromium(
        tmp_path / "chromium-profile", **{"goog:loggingPrefs": {"browser": "ALL"}}
    )


@pytest.fixture(scope="module", params=["sqlite", "mysql"])
def cloud(request, tmp_path_factory):
    """(base URL, {name: uuid}, consumer uuid) of a live server holding two
    hosts (one with a NUMA child), a hostile name and an allocation."""
    fixtures.require_backend(request.param)
    tmp = tmp_path_factory.mktemp("console-" + request.param)
    with console_cloud.live_api(tmp, request.param) as (base, url, client):
        agg = str(uuid.uuid4())
        names = {}
        names["cn1"] = console_cloud.create(
            client,
            "cn1",
            inventories={
                "VCPU": {"total": 8},
                "MEMORY_MB": {"total": 4096, "reserved": 512},
            },
            traits=["HW_CPU_X86_AVX2"],
            aggregates=[agg],
        )
        names["cn1-numa0"] = console_cloud.create(
            client, "cn1-numa0", parent=names["cn1"], inventories={"VGPU": {"total": 2}}
        )
        names["cn2"] = console_cloud.create(
            client,
            "cn2",
            inventories={"VCPU": {"total": 4, "allocation_ratio": 2.0}},
            aggregates=[AGG2],
        )
        names[HOSTILE] = console_cloud.create(
            client, HOSTILE, inventories={"DISK_GB": {"total": 100}}
        )
        consumer = console_cloud.claim(
            client,
            {
                names["cn1"]: {"VCPU": 7, "MEMORY_MB": 1024},
                names["cn1-numa0"]: {"VGPU": 1},
            },
        )
        yield base, names, consumer, agg


@pytest.fixture(scope="module")
def browser(cloud, tmp_path_factory):
    shots = tmp_path_factory.mktemp("console-screenshots")
    print("console screenshots: %s" % shots)
    driver = _browser(tmp_path_factory.mktemp("chromium"))
    driver.implicitly_wait(0)
    driver.shots = shots
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, css):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def _shot(driver, cloud, name):
    path = driver.shots / ("%s-%s.png" % (name, cloud[0].rsplit(":", 1)[1]))
    driver.save_screenshot(str(path))
    if os.environ.get("PLACEMENT_CONSOLE_SCREENSHOTS"):
        shutil.copy(path, os.environ["PLACEMENT_CONSOLE_SCREENSHOTS"])


def _sign_in(driver, base, token="admin", wait="#view[data-ready='1'] #roots"):
    from selenium.webdriver.common.by import By

    _signed_out(driver, base)
    driver.get(base + "/ui/#/sign-in")
    driver.refresh()
    field = _wait(driver, "#sign-in:not([hidden]) input[name=token]")
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
    _wait(driver, wait)


def _signed_out(driver, base):
    """Start over in a new tab, whose sessionStorage holds no token. (Cleared
    under a signed-in view, the view's requests still in flight went out
    without a token and logged 401s.)"""
    driver.get("about:blank")
    old = driver.current_window_handle
    driver.switch_to.new_window("tab")
    new = driver.current_window_handle
    driver.switch_to.window(old)
    driver.close()
    driver.switch_to.window(new)
    driver.get(base + "/ui/")


def _errors(driver):
    """The browser's error entries (console and network) since the last
    call."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_static_files_carry_a_strict_policy(cloud):
    base = cloud[0]
    resp = requests.get(base + "/ui/", timeout=10)
    assert resp.status_code == 200
    policy = resp.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert '<input name="token"' in resp.text
    assert "<script src=" in resp.text and "<script>" not in resp.text
    assert requests.get(base + "/ui/..%2F..%2Fsetup.py", timeout=10).status_code == 404
    assert requests.get(base + "/ui/sub/index.html", timeout=10).status_code == 404
    assert requests.get(base + "/ui/nothing.js", timeout=10).status_code == 404
    moved = requests.get(base + "/ui", timeout=10, allow_redirects=False)
    assert moved.status_code == 301 and moved.headers["location"] == "/ui/"


def test_cloud_view_shows_the_roots_as_the_api_reports_them(cloud, browser):
    from selenium.webdriver.common.by import By

    base, names, _consumer, _agg = cloud
    _sign_in(browser, base)
    assert (
        browser.execute_script("return sessionStorage.getItem('placement-token')")
        == "admin"
    )
    assert "admin" not in browser.current_url
    assert browser.get_cookies() == []
    rows = {
        row.get_attribute("data-uuid"): row
        for row in browser.find_elements(By.CSS_SELECTOR, "tr.root")
    }
    assert set(rows) == {names["cn1"], names["cn2"], names[HOSTILE]}
    bars = {
        bar.get_attribute("data-class"): bar.find_element(
            By.CSS_SELECTOR, ".numbers"
        ).text
        for bar in rows[names["cn1"]].find_elements(By.CSS_SELECTOR, ".bar")
    }
    # (total - reserved) * allocation_ratio, as the API's usages report.
    assert set(bars) == {"VCPU", "MEMORY_MB", "VGPU"}  # the tree's classes
    usages = requests.get(
        base + "/resource_providers/%s/usages" % names["cn1"], headers=ADMIN, timeout=10
    ).json()["usages"]
    inventories = requests.get(
        base + "/resource_providers/%s/inventories" % names["cn1"],
        headers=ADMIN,
        timeout=10,
    ).json()["inventories"]
    for rc in ("VCPU", "MEMORY_MB"):
        inv = inventories[rc]
        capacity = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
        assert bars[rc] == "%d / %d" % (usages[rc], capacity)
    assert "HW_CPU_X86_AVX2" in rows[names["cn1"]].text
    _shot(browser, cloud, "cloud")


def test_hostile_name_is_text_and_runs_nothing(cloud, browser):
    from selenium.webdriver.common.by import By

    base, names, _consumer, _agg = cloud
    _sign_in(browser, base)
    link = browser.find_element(
        By.CSS_SELECTOR, "tr.root[data-uuid='%s'] .root-link" % names[HOSTILE]
    )
    assert link.text == HOSTILE
    assert browser.find_elements(By.CSS_SELECTOR, "#view img") == []
    errors = [e for e in browser.get_log("browser") if "alert" in e.get("message", "")]
    assert errors == []
    # An alert would have left an open dialog that blocks the page.
    assert browser.execute_script("return document.title") == "Placement console"


def _roots_shown(driver, base, filters):
    """The uuids of the roots the cloud view lists with ``filters``."""
    from selenium.webdriver.common.by import By

    driver.get(base + "/ui/#/cloud?" + filters)
    _wait(driver, "#view[data-ready='1'] #roots")
    return [
        r.get_attribute("data-uuid")
        for r in driver.find_elements(By.CSS_SELECTOR, "tr.root")
    ]


def test_filters_use_the_api(cloud, browser):
    base, names, _consumer, agg = cloud
    _sign_in(browser, base)
    assert _roots_shown(browser, base, "aggregate=" + agg) == [names["cn1"]]
    # Nothing is over 90% used (cn1's VCPU: 7 of 128).
    assert _roots_shown(browser, base, "full=1") == []


def test_provider_view_shows_the_tree_and_its_consumers(cloud, browser):
    from selenium.webdriver.common.by import By

    base, names, consumer, _agg = cloud
    _sign_in(browser, base)
    browser.get(base + "/ui/#/provider/" + names["cn1"])
    _wait(browser, "#view[data-ready='1'] #consumers")
    shown = [
        p.get_attribute("data-uuid")
        for p in browser.find_elements(By.CSS_SELECTOR, ".provider")
    ]
    assert shown == [names["cn1"], names["cn1-numa0"]]
    (row,) = browser.find_elements(By.CSS_SELECTOR, "tr.consumer")
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == [consumer, "p-console", "u-console", "INSTANCE"]
    assert "cn1 VCPU:7" in cells[4] and "cn1-numa0 VGPU:1" in cells[4]
    _shot(browser, cloud, "provider")


def test_a_query_that_fits_lists_candidates(cloud, browser):
    from selenium.webdriver.common.by import By

    base, names, _consumer, _agg = cloud
    _sign_in(browser, base)
    browser.get(base + "/ui/#/query?q=resources%3DVCPU%3A2")
    _wait(browser, "#view[data-ready='1'] #candidates")
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.candidate")
    real = requests.get(
        base + "/allocation_candidates?resources=VCPU:2&limit=20",
        headers=ADMIN,
        timeout=10,
    ).json()
    assert len(rows) == len(real["allocation_requests"]) == 1  # cn2: cn1 has 1 free
    _shot(browser, cloud, "query-fits")


def test_a_query_that_does_not_fit_draws_the_funnel(cloud, browser):
    from selenium.webdriver.common.by import By

    base, _names, _consumer, _agg = cloud
    _sign_in(browser, base)
    browser.get(
        base
        + "/ui/#/query?q="
        + "resources%3DVCPU%3A1%26required%3DCOMPUTE_STATUS_DISABLED"
    )
    _wait(browser, "#view[data-ready='1'] #funnel")
    reason = browser.find_element(By.ID, "reason").text
    explained = requests.get(
        base + "/allocation_candidates/explain",
        params={"resources": "VCPU:1", "required": "COMPUTE_STATUS_DISABLED"},
        headers=ADMIN,
        timeout=10,
    ).json()
    assert reason == explained["reason"]
    assert "required" in reason
    zero = browser.find_elements(By.CSS_SELECTOR, "#funnel rect.zero")
    assert zero, "the blocking filter is drawn"
    labels = [
        t.text for t in browser.find_elements(By.CSS_SELECTOR, "#funnel .funnel-label")
    ]
    assert any(label.endswith("required") for label in labels)
    _shot(browser, cloud, "query-funnel")


def test_capacity_per_shape_chart(cloud, browser):
    from selenium.webdriver.common.by import By

    base, _names, _consumer, _agg = cloud
    _sign_in(browser, base)
    shapes = "small: resources=VCPU:1\nbig: resources=VCPU:100"
    browser.get(base + "/ui/#/query?" + urllib.parse.urlencode({"shapes": shapes}))
    _wait(browser, "#view[data-ready='1'] #shape-chart")
    texts = [
        t.text
        for t in browser.find_elements(
            By.CSS_SELECTOR, "#shape-chart .chart-label, #shape-chart .chart-value"
        )
    ]
    small = requests.get(
        base + "/allocation_candidates/capacity",
        params={"resources": "VCPU:1"},
        headers=ADMIN,
        timeout=10,
    ).json()
    assert texts[0] == "small" and texts[1].startswith(str(small["capacity"]))
    assert texts[2] == "big" and texts[3].startswith("0")
    _shot(browser, cloud, "shapes")


@pytest.mark.parametrize("enabled,status", [(True, 200), (False, 404)])
def test_ui_enabled_switches_the_console(enabled, status):
    """[ui] enabled = False: /ui/ is the API's own JSON 404."""
    with (
        fixtures.overrides(**{"ui.enabled": enabled}),
        fixtures.app("sqlite") as (
            app,
            _db,
        ),
    ):
        resp = wsgi_client.call(app, "/ui/", headers={"x-auth-token": "admin"})
        assert resp.status == status
        if not enabled:
            assert resp.json()["errors"][0]["status"] == 404


def test_no_errors_in_the_browser_on_load(cloud, browser):
    """Every view loads without an error in the browser's log (a 401 for
    /favicon.ico was one on every page)."""
    base, names, _consumer, _agg = cloud
    _signed_out(browser, base)
    _errors(browser)
    browser.get(base + "/ui/#/sign-in")
    browser.refresh()
    _wait(browser, "#sign-in:not([hidden]) input[name=token]")
    assert _errors(browser) == []
    _sign_in(browser, base)
    for view, ready in [
        ("#/cloud", "#roots"),
        ("#/provider/" + names["cn1"], "#consumers"),
        ("#/query?q=resources%3DVCPU%3A100", "#funnel"),
    ]:
        browser.get(base + "/ui/" + view)
        browser.refresh()
        _wait(browser, "#view[data-ready='1'] " + ready)
        assert _errors(browser) == [], view
    icon = requests.get(base + "/favicon.ico", timeout=10)
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO file


def test_sign_in_with_a_token_that_may_not_read_is_refused(cloud, browser):
    """noauth2's token ``someone`` has no role: the provider list answers
    403, so the console keeps no token and says which role it needs."""
    from selenium.webdriver.common.by import By

    base = cloud[0]
    _sign_in(browser, base, "someone", "#sign-in-error:not(:empty)")
    message = browser.find_element(By.ID, "sign-in-error").text
    assert "403" in message and "admin role" in message
    assert (
        browser.execute_script("return sessionStorage.getItem('placement-token')")
        is None
    )
    assert browser.find_element(By.ID, "sign-in").is_displayed()
    assert not browser.find_element(By.ID, "nav").is_displayed()
    assert browser.find_elements(By.CSS_SELECTOR, "#view *") == []


def _input_shot(driver, field, text, attribute):
    """A screenshot (PNG bytes) of ``field`` showing ``text`` as its value
    or placeholder, unfocused."""
    driver.execute_script(
        "arguments[0].value = '';"
        "arguments[0].setAttribute('placeholder', '');"
        "if (arguments[1] === 'value') arguments[0].value = arguments[2];"
        "else arguments[0].setAttribute('placeholder', arguments[2]);"
        "arguments[0].blur();",
        field,
        attribute,
        text,
    )
    return field.screenshot_as_png


def test_text_inputs_show_underscores(cloud, browser):
    """The visible text of each text input is its value or placeholder:
    MEMORY_MB drawn with its underscore differs from MEMORY MB (a line box
    that cut the underscore off made them look the same)."""
    from selenium.webdriver.common.by import By

    base = cloud[0]
    _sign_in(browser, base)
    checked = 0
    for view, fields in [
        ("#/cloud", "#filters input[type=text]"),
        ("#/query", "#query-form input[type=text]"),
    ]:
        browser.get(base + "/ui/" + view)
        _wait(browser, "#view[data-ready='1'] " + fields)
        for field in browser.find_elements(By.CSS_SELECTOR, fields):
            for attribute in ("value", "placeholder"):
                for text in ("MEMORY_MB:4096", "HW_CPU_X86_AVX2"):
                    shown = _input_shot(browser, field, text, attribute)
                    spaced = _input_shot(
                        browser, field, text.replace("_", " "), attribute
                    )
                    assert shown != spaced, (view, field.get_attribute("name"), text)
            checked += 1
    assert checked == 4 + 3
    _shot(browser, cloud, "inputs")


# Every piece of text inside a chart, with its box and the chart's, and
# whether it overflows its own box.
_TEXT_BOXES = """
const chart = document.getElementById(arguments[0]);
const outer = chart.getBoundingClientRect();
const leaves = [...chart.querySelectorAll("*")].filter(
  (e) => e.children.length === 0 && e.textContent.trim());
return leaves.map((e) => {
  const r = e.getBoundingClientRect();
  return {text: e.textContent, left: r.left, right: r.right,
          inside: r.left >= outer.left - 0.5 && r.right <= outer.right + 0.5
                  && r.right <= document.documentElement.clientWidth,
          overflows: e instanceof HTMLElement && e.scrollWidth > e.clientWidth};
});
"""


def test_no_chart_label_overflows_its_box(cloud, browser):
    """The capacity chart's and the funnel's labels fit in their boxes: a
    root's limiting classes ("7 (MEMORY_MB, VCPU)") and a long name."""
    base, names, _consumer, _agg = cloud
    _sign_in(browser, base)
    browser.get(base + "/ui/#/query?q=resources%3DMEMORY_MB%3A2560%2CVCPU%3A1")
    _wait(browser, "#view[data-ready='1'] #capacity-chart")
    boxes = browser.execute_script(_TEXT_BOXES, "capacity-chart")
    assert any("MEMORY_MB, VCPU" in b["text"] for b in boxes), boxes
    bad = [b for b in boxes if not b["inside"] or b["overflows"]]
    assert bad == []
    _shot(browser, cloud, "capacity-chart")
    browser.get(base + "/ui/#/query?q=resources%3DVCPU%3A1%2CDISK_GB%3A1000")
    _wait(browser, "#view[data-ready='1'] #funnel")
    boxes = browser.execute_script(_TEXT_BOXES, "funnel")
    assert boxes
    assert [b for b in boxes if not b["inside"] or b["overflows"]] == []


@pytest.mark.parametrize(
    "typed,shown",
    [
        ("cn", ["cn1", "cn2"]),  # a prefix
        ("N1", ["cn1"]),  # a substring, any case
        ("numa", ["cn1"]),  # a child's name shows its root
        ("cn2", ["cn2"]),
    ],
)
def test_name_filter_matches_part_of_a_name(cloud, browser, typed, shown):
    base, names, _consumer, _agg = cloud
    _sign_in(browser, base)
    found = _roots_shown(browser, base, "name=" + typed)
    assert found == [names[n] for n in shown]


def test_name_filter_matches_a_whole_uuid_only(cloud, browser):
    base, names, _consumer, _agg = cloud
    _sign_in(browser, base)
    for typed, shown in [
        (names["cn2"], [names["cn2"]]),
        (names["cn1-numa0"].upper(), [names["cn1"]]),
        (names["cn2"][:8], []),  # part of a uuid is not a name
    ]:
        assert _roots_shown(browser, base, "name=" + typed) == shown, typed


def test_explain_names_the_group_filter_and_lists_the_closest(cloud, browser):
    """Group 1 needs VGPU (under cn1 only); the unsuffixed group's
    member_of keeps cn2 alone. The console shows the reason naming
    member_of and group '1', outlines that step of the funnel and lists
    the closest misses, as the API gives them."""
    from selenium.webdriver.common.by import By

    base, names, _consumer, _agg = cloud
    query = "resources=VCPU:1&resources1=VGPU:1&member_of=" + AGG2
    explained = requests.get(
        base + "/allocation_candidates/explain?" + query, headers=ADMIN, timeout=10
    ).json()
    assert explained["reason"].startswith(
        "groups: none of 2 trees has providers for every group: member_of "
        "leaves group '' (VCPU) 1 trees, where group '1' (VGPU) has no provider "
        "(closest: cn1, missing aggregates %s)" % AGG2
    )
    _sign_in(browser, base)
    browser.get(base + "/ui/#/query?" + urllib.parse.urlencode({"q": query}))
    _wait(browser, "#view[data-ready='1'] #closest")
    assert browser.find_element(By.ID, "reason").text == explained["reason"]
    (emptied,) = browser.find_elements(By.CSS_SELECTOR, "#funnel .funnel-label.emptied")
    assert emptied.text == "group '' · member_of"
    assert browser.find_elements(By.CSS_SELECTOR, "#funnel rect.emptied")
    rows = browser.find_elements(By.CSS_SELECTOR, "#closest tr.closest")
    assert [r.get_attribute("data-uuid") for r in rows] == [
        e.get("provider", e.get("tree")) for e in explained["closest"]
    ]
    first = rows[0].find_elements(By.TAG_NAME, "td")
    assert first[0].text.startswith("cn1")
    assert first[2].text == "member_of (as VCPU provider)"
    assert first[3].text == "missing aggregates: " + AGG2
    _shot(browser, cloud, "explain-closest")
