"""Debian's Chromium driven by Selenium through Debian's chromedriver, as
the console's browser tests and tools/bench/console_load.py use it: headless,
a fresh profile, and none of Chromium's own network traffic (this machine
reaches no outside host)."""

import os

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)


def installed():
    return os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)


def chromium(profile_dir, **capabilities):
    """A Selenium webdriver for headless Chromium with its profile in
    ``profile_dir``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument("--user-data-dir=%s" % profile_dir)
    for name, value in capabilities.items():
        options.set_capability(name, value)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
