"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
Selenium) loads the page against a running LocalCluster, waits for live updates, and checks what a user looks at:
the device list, a client's batch appearing in the task stream, and a session's view not showing another session's
work. With ``TENSORWIRE_DASHBOARD_SCREENSHOT=PATH`` it saves the admin's page there (docs/dashboard.png)."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from tests._ci import skip_unless_ci_installed

from .conftest import TOKEN, run_batches

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1250", "--hide-scrollbars")
WAIT_S = 30.0



@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None or DRIVER is None:
        skip_unless_ci_installed("chromium", "needs Chromium and its driver: apt-get install chromium chromium-driver")
    try:
        from selenium import webdriver
    except ImportError:
        skip_unless_ci_installed("chromium", "needs Selenium: pip install selenium")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    driver.set_page_load_timeout(WAIT_S)
    yield driver
    driver.quit()


def _updates(driver) -> int:
    return int(driver.execute_script("return document.getElementById('live').dataset.updates") or 0)


def _attrs(driver, selector: str, attr: str) -> list[str]:
    """``attr`` of every element ``selector`` matches, read in one script (the page redraws every second: element
    handles held across a redraw go stale)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.getAttribute(arguments[1]))",
        selector, attr)


def _task_sessions(driver) -> set[str]:
    return set(_attrs(driver, "#task-chart rect.task", "data-session"))


def _wait(driver, predicate, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(lambda d: predicate(d), message=what)


def test_the_page_updates_live_and_shows_the_devices_and_a_clients_batches(dash_cluster, two_sessions, browser):
    from selenium.webdriver.common.by import By

    a, b = two_sessions
    browser.get(dash_cluster.dashboard_url)
    _wait(browser, lambda d: _updates(d) >= 1, "no live update reached the page")
    first, t0 = _updates(browser), time.monotonic()
    _wait(browser, lambda d: _updates(d) >= first + 3, "the page stopped updating")
    assert time.monotonic() - t0 < 3 * 1.6 + 1  # about one update a second
    assert _attrs(browser, "#device-table tbody tr", "data-device") == ["cpu:0", "cpu:1"]
    assert "admin" in browser.find_element(By.ID, "viewer").text
    run_batches(a, ["cpu:0", "cpu:1"], n=3)
    _wait(browser, lambda d: a.session_id in _task_sessions(d), "session A's batch never appeared in the task stream")
    run_batches(b, ["cpu:0"], n=3)
    _wait(browser, lambda d: {a.session_id, b.session_id} <= _task_sessions(d), "session B's batch never appeared")
    lanes = set(_attrs(browser, f"#task-chart rect.task[data-session='{a.session_id}']", "data-device"))
    assert lanes == {"cpu:0", "cpu:1"}
    _wait(browser, lambda d: {a.session_id, b.session_id} <= set(_attrs(d, "#session-table tbody tr", "data-session")),
          "the sessions table never listed both sessions")
    shot = os.environ.get("TENSORWIRE_DASHBOARD_SCREENSHOT")
    if shot:  # a few seconds of both sessions' work, for a fuller picture
        t_end = time.monotonic() + 6
        while time.monotonic() < t_end:
            run_batches(a, ["cpu:0", "cpu:1"], n=2)
            run_batches(b, ["cpu:1"], n=3)
        n = _updates(browser)
        _wait(browser, lambda d: _updates(d) >= n + 2, "the page stopped updating")
        browser.save_screenshot(shot)


def test_a_sessions_view_shows_its_own_work_only(dash_cluster, two_sessions, browser):
    from selenium.webdriver.common.by import By

    from tensorwire.dashboard import session_link

    a, b = two_sessions
    run_batches(a, ["cpu:0"])
    run_batches(b, ["cpu:0"])
    browser.delete_all_cookies()
    browser.get(session_link(dash_cluster.dashboard_url, b.session_id, TOKEN))
    _wait(browser, lambda d: b.session_id in _task_sessions(d), "session B's view never showed its batch")
    n = _updates(browser)
    run_batches(a, ["cpu:0"], n=2)  # A's work meanwhile: still not in B's view after further updates
    _wait(browser, lambda d: _updates(d) >= n + 2, "the page stopped updating")
    assert _task_sessions(browser) == {b.session_id}
    assert _attrs(browser, "#session-table tbody tr", "data-session") == [b.session_id]
    assert b.session_id in browser.find_element(By.ID, "viewer").text
    assert a.session_id not in browser.page_source
