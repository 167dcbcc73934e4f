"""Time the operator console's cloud view in a real browser.

Bulk-loads a cloud shape (profile_request.py's loaders: ``cloud`` is
cloud_day.py's hosts, three providers each), serves it with the real
``placement-api``, and times in headless Chromium (Debian's, through
chromedriver and Selenium) from opening ``/ui/#/cloud`` signed in until
the first page of roots is drawn, and then the next page::

    .venv/bin/python tools/bench/console_load.py --scale 1000
    .venv/bin/python tools/bench/console_load.py --db mysql --scale 10000
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

import profile_request  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from placement import conf as placement_conf  # noqa: E402
from tests import browser  # noqa: E402


def timed(driver, url):
    """Seconds from navigation to the drawn roots table."""
    driver.get("about:blank")
    start = time.perf_counter()
    driver.get(url)
    WebDriverWait(driver, 120).until(
        expected_conditions.presence_of_element_located(
            (By.CSS_SELECTOR, "#view[data-ready='1'] #roots")
        )
    )
    return time.perf_counter() - start, len(
        driver.find_elements(By.CSS_SELECTOR, "tr.root")
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "mysql"), default="sqlite")
    parser.add_argument(
        "--shape", choices=sorted(profile_request.LOADERS), default="cloud"
    )
    parser.add_argument("--scale", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    with profile_request.fresh_database(args.db, conf) as (url, db):
        loader = profile_request.Loader(db)
        profile_request.LOADERS[args.shape](loader, args.scale)
        loader.flush()
        conf.set_override("connection", url, group="placement_database")
        with profile_request.server(url, 2, 10, 2) as (base, _pid):
            driver = browser.chromium(tempfile.mkdtemp(prefix="console-bench-"))
            try:
                driver.get(base + "/ui/")
                driver.execute_script(
                    "sessionStorage.setItem('placement-token', 'admin')"
                )
                first, second = [], []
                for _ in range(args.repeat):
                    seconds, rows = timed(driver, base + "/ui/#/cloud")
                    first.append(seconds)
                    seconds, _ = timed(driver, base + "/ui/#/cloud?page=1")
                    second.append(seconds)
            finally:
                driver.quit()
    print(
        "%s x %d (%s): first page %d roots, median %.2f s (min %.2f); "
        "next page median %.2f s"
        % (
            args.shape,
            args.scale,
            args.db,
            rows,
            statistics.median(first),
            min(first),
            statistics.median(second),
        )
    )


if __name__ == "__main__":
    main()
