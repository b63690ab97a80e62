"""A real browser for the UI tests: Debian's Chromium, headless, driven by Selenium, and
the two things every UI test does with it (wait for something on the page; log in to
Airflow)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import localservices

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1500,1100")


@contextmanager
def open_browser(profile: Path):
    """Headless Chromium (Debian's, through chromedriver) with a profile folder of its own."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), \
        "Debian's chromium and chromium-driver are missing: run scripts/install"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver, condition, what: str, timeout_s: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(condition)
    except Exception:
        pytest.fail(f"{what} not seen in {timeout_s}s at {driver.current_url}:\n"
                    f"{driver.page_source[-2000:]}")


def log_in(browser, url: str) -> None:
    """Open url through Airflow's login form, which sends the browser back to it."""
    from selenium.webdriver.common.by import By

    browser.get(url)
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "input[type=password]"),
             "the login form")
    browser.find_element(By.CSS_SELECTOR, "input[name=username]").send_keys(
        localservices.AIRFLOW_USER)
    browser.find_element(By.CSS_SELECTOR, "input[type=password]").send_keys(
        localservices.airflow_password(localservices.local_env()))
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
