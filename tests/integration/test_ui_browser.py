"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium): a counter changing as jobs run, a job looked up by id, a dead letter
replayed out of the list, a queue paused (its jobs wait while another queue's run) and
resumed. Every page is saved as a screenshot in the test's tmp dir."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver as Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from jsworker import App
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import need, wait_until
from .ui_support import served_in_thread
from .workers import APPS, records, start_worker, stop

sys.path.insert(0, str(APPS))
import ui_app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
WAIT = 30.0


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chrome]:
    """A headless Chromium for the module's tests (it takes a while to start), quit after them."""
    need(
        CHROMIUM is not None and DRIVER is not None,
        "the browser tests need Chromium and its driver (Debian: apt-get install chromium chromium-driver)",
    )
    assert CHROMIUM is not None and DRIVER is not None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    except WebDriverException as exc:
        need(False, f"Chromium did not start: {exc.msg}")
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium: Chrome) -> Chrome:
    """The module's Chromium as a fresh one would be: no cookies from an earlier test's dashboard
    (cookies ignore the port), the default window size, no console lines of earlier pages."""
    chromium.get("about:blank")
    chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
    chromium.set_window_size(1280, 900)
    chromium.get_log("browser")  # type: ignore[no-untyped-call]
    return chromium


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[App]:
    """``ui_app``'s app pointed at the test's server, its streams and queues made."""
    ui_app.app.configure_connection([nats_server.url])

    async def provision() -> None:
        await ui_app.app.provision()
        await ui_app.app.aclose()

    asyncio.run(provision())
    try:
        yield ui_app.app
    finally:
        ui_app.app.close()


def leave(driver: WebDriver) -> None:
    """Close the page (and its event stream) before the dashboard stops."""
    driver.get("about:blank")


def shoot(driver: Chrome, tmp_path: Path, name: str) -> None:
    """A screenshot of the page as it is, and no error in the browser's console."""
    assert driver.save_screenshot(str(tmp_path / f"{name}.png"))
    logged: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    errors = [e for e in logged if e.get("level") == "SEVERE"]
    assert errors == [], errors


def live_text(driver: WebDriver, selector: str) -> str:
    """The text of the first element ``selector`` finds ("" while there is none)."""
    try:
        found = driver.find_elements(By.CSS_SELECTOR, selector)
        return found[0].text if found else ""
    except StaleElementReferenceException:
        return ""


def until(driver: WebDriver, condition: Callable[[WebDriver], Any], message: str) -> Any:
    """Wait (up to :data:`WAIT` seconds) until ``condition`` holds in the browser."""
    return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(condition, message)


@pytest.mark.slow
def test_the_overview_counts_jobs_as_they_come_and_run(
    app: App, browser: Chrome, tmp_path: Path, nats_server: NatsServer
) -> None:
    with served_in_thread(create_app(app)) as base:
        browser.get(base + "/")
        until(browser, lambda d: live_text(d, "[data-live='totals.waiting']") == "0", "the overview")
        browser.execute_script("window.notReloaded = true;")
        ui_app.work.delay_many([(n,) for n in range(30)])
        waiting = "[data-live='totals.waiting']"
        until(browser, lambda d: live_text(d, waiting) == "30", "30 jobs waiting, pushed live")
        until(
            browser,
            lambda d: live_text(d, "tr[data-key='default'] [data-field='pending']") == "30",
            "the row",
        )
        shoot(browser, tmp_path, "overview-waiting")
        worker = start_worker(nats_server.url, tmp_path / "record", tmp_path / "worker.log", module="ui_app")
        try:
            until(browser, lambda d: live_text(d, "[data-live='totals.workers']") == "1", "the worker")
            until(browser, lambda d: live_text(d, waiting) == "0", "the jobs to run")
            assert browser.execute_script("return window.notReloaded === true;")  # live, not reloaded
            until(
                browser,
                lambda d: d.find_element(
                    By.CSS_SELECTOR, "svg[data-spark='default'][data-series='started'] polyline"
                ).get_attribute("points"),
                "the chart of jobs started",
            )
            shoot(browser, tmp_path, "overview")
            for name, path in (("jobs", "/jobs"), ("schedules", "/schedules"), ("workers", "/workers"),
                               ("dead-letters", "/dead-letters"), ("queue", "/queues/default")):  # fmt: skip
                browser.get(base + path)
                until(browser, lambda d: d.find_element(By.TAG_NAME, "h1").text, f"the {name} page")
                shoot(browser, tmp_path, name)
            browser.set_window_size(390, 844)
            browser.get(base + "/")
            until(
                browser, lambda d: live_text(d, "[data-live='totals.workers']") == "1", "the phone's overview"
            )
            shoot(browser, tmp_path, "overview-phone")
            leave(browser)
        finally:
            assert stop(worker) == 0


def test_a_job_is_looked_up_by_its_id(
    app: App, browser: Chrome, tmp_path: Path, nats_server: NatsServer
) -> None:
    worker = start_worker(nats_server.url, tmp_path / "record", tmp_path / "worker.log", module="ui_app")
    try:
        job = ui_app.later.delay()
        wait_until(lambda: job.status().state.value == "retrying", timeout=WAIT, message="the job to retry")
        with served_in_thread(create_app(app)) as base:
            browser.get(base + "/")
            search = browser.find_element(By.CSS_SELECTOR, "form.search input[name='id']")
            # "/" from anywhere on the page goes to the search box.
            browser.find_element(By.TAG_NAME, "body").send_keys("/")
            assert browser.switch_to.active_element == search
            assert search.get_attribute("value") == ""
            search.send_keys(job.id)
            search.submit()
            until(browser, lambda d: d.current_url.endswith(f"/jobs/{job.id}"), "the job's page")
            heading = browser.find_element(By.TAG_NAME, "h1").text
            assert job.id in heading and "retrying" in heading
            # Its next attempt in the viewer's zone and how soon, the UTC time as its title.
            due = browser.find_element(By.XPATH, "//dt[text()='Next attempt']/following-sibling::dd[1]/time")
            assert due.text.endswith(")") and "(in " in due.text, due.text
            assert (due.get_attribute("title") or "").endswith(" UTC")
            # The enqueue time a header holds in nanoseconds, as a time too.
            enqueued = browser.find_element(By.CSS_SELECTOR, "table.kv time[datetime]")
            assert enqueued.text.endswith((" ago)", "(just now)")), enqueued.text
            assert "the warehouse is closed" in browser.page_source
            shoot(browser, tmp_path, "job")
            browser.find_element(By.LINK_TEXT, "Show payload").click()
            until(browser, lambda d: "figcaption" in d.page_source, "the payload")
            assert '"args"' in browser.find_element(By.CSS_SELECTOR, ".payload pre").text
            shoot(browser, tmp_path, "job-payload")
            leave(browser)
    finally:
        assert stop(worker) == 0


@pytest.mark.slow
def test_a_replayed_dead_letter_leaves_the_list(
    app: App, browser: Chrome, tmp_path: Path, nats_server: NatsServer
) -> None:
    bug, record = tmp_path / "bug", tmp_path / "record"
    bug.touch()
    worker = start_worker(
        nats_server.url, record, tmp_path / "worker.log", module="ui_app", env={"JSW_TEST_BROKEN": str(bug)}
    )
    try:
        job = ui_app.charge.delay(7)
        with served_in_thread(create_app(app)) as base:
            browser.get(base + "/dead-letters")

            def listed(d: WebDriver) -> bool:
                if job.id in d.page_source:
                    return True
                d.refresh()
                return False

            until(browser, listed, "the dead letter")
            row = browser.find_element(By.CSS_SELECTOR, "tr[data-seq]")
            seq = row.get_attribute("data-seq")
            shoot(browser, tmp_path, "dead-letters")
            bug.unlink()  # the fix: its replay succeeds
            row.find_element(By.CSS_SELECTOR, "input[name='seq']").click()
            browser.find_element(By.XPATH, "//button[text()='Replay selected']").click()
            until(browser, lambda d: "Replayed 1 dead letter." in d.page_source, "the replay's message")
            assert not browser.find_elements(By.CSS_SELECTOR, f"tr[data-seq='{seq}']")
            assert "No dead letters" in browser.page_source
            shoot(browser, tmp_path, "dead-letters-replayed")
            leave(browser)
        wait_until(
            lambda: job.id in [r[0] for r in records(record)], timeout=WAIT, message="the replayed job"
        )
    finally:
        assert stop(worker) == 0


@pytest.mark.slow
def test_a_paused_queue_waits_while_the_others_run(
    app: App, browser: Chrome, tmp_path: Path, nats_server: NatsServer
) -> None:
    record = tmp_path / "record"
    worker = start_worker(nats_server.url, record, tmp_path / "worker.log", module="ui_app")
    try:
        with served_in_thread(create_app(app)) as base:
            browser.get(base + "/queues/default")
            until(
                browser, lambda d: live_text(d, "[data-live='queues.default.workers']") == "1", "the worker"
            )
            browser.find_element(By.XPATH, "//button[text()='Pause']").click()
            until(browser, lambda d: "Paused default" in d.page_source, "the pause")
            assert browser.find_element(By.CSS_SELECTOR, "h1 .badge").text == "paused"
            ui_app.work.delay_many([(n,) for n in range(10)])
            other = ui_app.elsewhere.delay(1)
            # The worker is busy on the other queue: the paused one's jobs had their chance.
            wait_until(
                lambda: other.id in [r[0] for r in records(record)], timeout=WAIT, message="other queue"
            )
            waiting = "[data-live='queues.default.pending']"
            until(browser, lambda d: live_text(d, waiting) == "10", "ten jobs waiting")
            assert not [r for r in records(record) if r[1] == "work"]
            shoot(browser, tmp_path, "queue-paused")
            browser.find_element(By.XPATH, "//button[text()='Resume']").click()
            until(browser, lambda d: "Resumed default" in d.page_source, "the resume")
            until(browser, lambda d: live_text(d, waiting) == "0", "the jobs to run")
            wait_until(lambda: len([r for r in records(record) if r[1] == "work"]) == 10, timeout=WAIT)
            shoot(browser, tmp_path, "queue-resumed")
            leave(browser)
    finally:
        assert stop(worker) == 0


@pytest.mark.slow
def test_a_job_list_follows_the_server_and_says_when_it_cannot(
    app: App, browser: Chrome, tmp_path: Path, nats_server: NatsServer
) -> None:
    """No worker runs: a job enqueued while the waiting jobs' list is open shows up in it
    without a reload; once the dashboard stops answering, the page says so."""
    with served_in_thread(create_app(app)) as base:
        browser.get(base + "/jobs?state=queued&queue=other")
        assert "No jobs" in browser.page_source or "<tbody>" in browser.page_source
        job = ui_app.elsewhere.delay(7)
        until(browser, lambda d: job.id in d.page_source, "the new job in the open list")
        assert browser.execute_script("return performance.getEntriesByType('navigation').length") == 1
        shoot(browser, tmp_path, "jobs-followed")
    # The dashboard is gone: the next read of the page fails, and the page says so.
    until(browser, lambda d: "has not answered" in d.page_source, "the page to say the server is gone")
    leave(browser)
    # The console's only complaint: the page's own reads that found nobody.
    said = browser.get_log("browser")  # type: ignore[no-untyped-call]
    assert said and all("ERR_CONNECTION_REFUSED" in line["message"] for line in said), said


def test_a_phone_keeps_the_columns_that_matter(app: App, browser: Chrome, tmp_path: Path) -> None:
    """At 390 px the overview's queues show their waiting jobs, oldest age, dead letters and
    charts without scrolling sideways (the live workers are a card above), the dead letters
    their task, time and reason, the schedules their next run and buttons; the other columns
    wait for a wider screen."""
    browser.set_window_size(390, 900)
    with served_in_thread(create_app(app)) as base:

        def columns(path: str, table: str) -> tuple[list[str], list[str]]:
            browser.get(base + path)
            heads = browser.find_elements(By.CSS_SELECTOR, f"{table} thead th")
            width = browser.execute_script("return document.documentElement.clientWidth")
            shown = [h.text for h in heads if h.is_displayed() and h.rect["x"] + h.rect["width"] <= width]
            return shown, [h.get_attribute("textContent") or "" for h in heads if not h.is_displayed()]

        shown, hidden = columns("/", "table#queues")
        for name in ("Queue", "Waiting", "Oldest", "Dead letters", "Started/s", "Failed/s"):
            assert name in shown, (name, shown)
        assert {"In flight", "Redelivered", "Delayed", "Workers", "Priority"} <= set(hidden), hidden
        shoot(browser, tmp_path, "overview-390")
        shown, hidden = columns("/dead-letters", "table.letters")
        assert {"#", "Task", "Failed", "Why"} <= set(shown), shown
        assert {"Job", "Size"} <= set(hidden), hidden
        shown, hidden = columns("/schedules", "table")
        assert {"Name", "Next run", "State", "Actions"} <= set(shown), shown
        assert {"Task", "Expression"} <= set(hidden), hidden
        shoot(browser, tmp_path, "schedules-390")
        leave(browser)


def test_a_search_finds_a_waiting_job_by_an_argument_value(app: App, browser: Chrome, tmp_path: Path) -> None:
    """Text that is no id, task or queue is looked for in the newest waiting jobs: the job
    whose argument holds it is listed, with what matched, and opens from there."""
    wanted = ui_app.charge.delay(7351937)
    ui_app.charge.delay(11)
    with served_in_thread(create_app(app)) as base:
        browser.get(base + "/")
        search = browser.find_element(By.CSS_SELECTOR, "form.search input[name='id']")
        search.send_keys("735193")
        search.submit()
        until(browser, lambda d: d.find_elements(By.ID, "search-read"), "the search's results")
        rows = browser.find_elements(By.CSS_SELECTOR, "#search-results tbody tr")
        assert [r.find_element(By.TAG_NAME, "a").text for r in rows] == [wanted.id]
        assert rows[0].find_elements(By.TAG_NAME, "td")[-1].text == "arguments"
        assert "Searched the newest 2 waiting jobs" in browser.find_element(By.ID, "search-read").text
        shoot(browser, tmp_path, "search")
        rows[0].find_element(By.LINK_TEXT, wanted.id).click()
        until(browser, lambda d: d.current_url.endswith(f"/jobs/{wanted.id}"), "the job's page")
        assert "queued" in browser.find_element(By.TAG_NAME, "h1").text
        leave(browser)
