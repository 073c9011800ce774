"""The dashboard page in real headless Chromium (Debian's, driven by Python Playwright),
against a DashboardServer fed by a fake cluster whose figures advance every 0.2 s: the page
loads cleanly from its own origin only, shows the executors, its charts move, a new loss
appears, and without the token the page is refused.

Skipped when playwright or /usr/bin/chromium is missing, except under CI (CI set): then
those tests fail."""
import copy
import importlib.util
import math
import os
import re
import threading
import time

import pytest

from zsched.dashboard import DashboardServer, dashboard_token

pytestmark = pytest.mark.timeout(120)

CHROMIUM = "/usr/bin/chromium"
# without the background-networking flags Chromium dials out at start, which a closed
# network refuses (and reports)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = dashboard_token(b"browser test secret")
WAIT_MS = 30_000  # generous: the machine is small and noisy


def browser_missing():
    """Why the browser tests cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "Python playwright is not installed (pip install playwright)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    return None


class AdvancingCluster:
    """A fake driver's snapshot source: every 0.2 s it publishes a new snapshot (never
    changing a published one) with more tasks finished, a different queue and one more
    history point, dated 0.5 s after the previous one as the driver's are."""

    EXECUTORS = [  # deliberately not in numeric order
        {"id": "10", "host": "10.0.0.7", "cores": 1, "free_slots": 1, "running": 0, "tasks_done": 0,
         "tasks_failed": 0, "last_heartbeat_age": 0.2, "state": "active", "pid": 4330},
        {"id": "2", "host": "10.0.0.6", "cores": 4, "free_slots": 0, "running": 4, "tasks_done": 12500,
         "tasks_failed": 2, "rss": 73400320, "cpu": 101.0, "busy_threads": 4, "last_heartbeat_age": 6.5,
         "state": "late", "pid": 4322},
        {"id": "1", "host": "10.0.0.5", "cores": 2, "free_slots": 1, "running": 1, "tasks_done": 1234,
         "tasks_failed": 0, "rss": 52428800, "cpu": 12.5, "busy_threads": 1, "last_heartbeat_age": 0.8,
         "state": "active", "pid": 4321},
    ]

    def __init__(self):
        self.step = 0
        self.start_time = time.time() - 10
        self.finished = 12000
        self.history = []
        self.losses = [{"id": "3", "host": "10.0.0.6", "reason": "killed by signal SIGKILL",
                        "time": self.start_time}]
        self.published_finished = set()
        self.current = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        for _ in range(20):
            self._advance()
        self._thread = threading.Thread(target=self._run, name="fake-cluster", daemon=True)

    def __call__(self):
        return self.current

    def _advance(self):
        with self._lock:
            self.step += 1
            self.finished += round(40 + 25 * math.sin(self.step / 3))  # an uneven rate: the rate chart moves
            queued = round(500 + 300 * math.sin(self.step / 4))
            t = self.start_time + 0.5 * self.step
            self.history = (self.history + [[t, self.finished, 3, queued, 7, 3]])[-1200:]
            self.published_finished.add(self.finished)
            self.current = {
                "time": t, "app_id": "app-browser-test", "url": "tcp://127.0.0.1:7077",
                "fast_path": "compiled (Cython)", "executors": copy.deepcopy(self.EXECUTORS),
                "tasks": {"submitted": self.finished + queued + 7, "finished": self.finished, "failed": 3,
                          "cancelled": 0, "retried": 5, "queued": queued, "running": 7},
                "allocation": {"target": 3, "starting": 0, "capacity": None, "backoff": {}, "dynamic": False},
                "losses": list(self.losses), "history": list(self.history),
                "counters": {"bytes_in": 1, "bytes_out": 2, "messages_in": 3, "messages_out": 4,
                             "executors_lost": len(self.losses)},
                "scheduling_latency": {"buckets": [[0.001, 1], ["+Inf", 1]], "sum": 0.0005, "count": 1},
            }

    def _run(self):
        while not self._stop.wait(0.2):
            self._advance()

    def add_loss(self, loss):
        with self._lock:
            self.losses = self.losses + [loss]
        self._advance()

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def cluster():
    fake = AdvancingCluster()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def dashboard(cluster):
    server = DashboardServer("127.0.0.1", 0, cluster, token=TOKEN)
    server.start()
    yield server
    server.close()


@pytest.fixture
def browser():
    missing = browser_missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests must run under CI: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


class PageRecord:
    """Everything a page did that a clean dashboard must not: failed requests, error
    responses, console errors, page errors; and every URL it requested."""

    def __init__(self, page):
        self.urls, self.failed, self.bad_responses, self.console_errors, self.page_errors = [], [], [], [], []
        page.on("request", lambda request: self.urls.append(request.url))
        page.on("requestfailed", lambda request: self.failed.append((request.url, request.failure)))
        page.on("response", lambda response: response.status >= 400 and self.bad_responses.append(
            (response.url, response.status)))
        page.on("console", lambda message: message.type == "error" and self.console_errors.append(message.text))
        page.on("pageerror", lambda error: self.page_errors.append(str(error)))

    def assert_clean(self, origin):
        assert not self.failed, self.failed
        assert not self.bad_responses, self.bad_responses
        assert not self.console_errors, self.console_errors
        assert not self.page_errors, self.page_errors
        elsewhere = [url for url in self.urls if not url.startswith(origin + "/")]
        assert not elsewhere, f"requests not to the dashboard's origin {origin}: {elsewhere}"


@pytest.fixture
def page(browser):
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.record = PageRecord(page)
    yield page
    context.close()


def origin_of(server):
    return f"http://127.0.0.1:{server.port}"


def chart_state(page, chart_id):
    return page.eval_on_selector(chart_id, "c => [c.dataset.points, c.dataset.last]")


def test_the_page_shows_the_cluster(page, dashboard, cluster):
    page.goto(dashboard.url)
    page.wait_for_function("() => document.querySelectorAll('#executors tbody tr').length === 3", timeout=WAIT_MS)
    rows = page.locator("#executors tbody tr")
    assert [rows.nth(i).get_attribute("data-executor-id") for i in range(3)] == ["1", "2", "10"]
    assert rows.nth(0).locator("td").all_inner_texts() == [
        "1", "10.0.0.5", "active", "2", "1", "1", "1,234", "0", "50", "12.5", "0.8"]
    assert rows.nth(1).locator("td").all_inner_texts()[2] == "late"
    assert rows.nth(2).locator("td").all_inner_texts()[8:10] == ["–", "–"]  # no heartbeat yet

    assert page.inner_text("#status") == "live"
    assert page.inner_text("#meta-app-id") == "app-browser-test"
    assert page.inner_text("#meta-url") == "tcp://127.0.0.1:7077"
    assert page.inner_text("#meta-fast-path") == "compiled (Cython)"
    assert page.inner_text("#summary-executors") == "3"
    assert page.inner_text("#summary-cores") == "7"
    finished = page.inner_text("#summary-finished")
    assert re.fullmatch(r"\d{1,3}(,\d{3})+", finished), finished
    assert int(finished.replace(",", "")) in cluster.published_finished
    page.wait_for_function("() => document.querySelector('#summary-rate').textContent !== '–'", timeout=WAIT_MS)
    page.record.assert_clean(origin_of(dashboard))


def test_the_charts_move(page, dashboard):
    page.goto(dashboard.url)
    page.wait_for_function("() => document.querySelector('#chart-queue').dataset.points > 1", timeout=WAIT_MS)
    charts = page.locator("#charts")
    before = {chart: chart_state(page, chart) for chart in ("#chart-throughput", "#chart-queue")}
    picture_before = charts.screenshot()
    for chart, (points, last) in before.items():
        assert int(points) > 1 and last != "", chart
        page.wait_for_function(
            "([chart, points, last]) => { const c = document.querySelector(chart);"
            " return c.dataset.points !== points && c.dataset.last !== last; }",
            arg=[chart, points, last], timeout=WAIT_MS)
    assert charts.screenshot() != picture_before
    page.record.assert_clean(origin_of(dashboard))


def test_a_new_loss_shows_first(page, dashboard, cluster):
    page.goto(dashboard.url)
    page.wait_for_function("() => document.querySelectorAll('#losses li').length === 1", timeout=WAIT_MS)
    assert "killed by signal SIGKILL" in page.inner_text("#losses li")
    cluster.add_loss({"id": "11", "host": "10.0.0.9", "reason": "exited with code 3", "time": time.time()})
    page.wait_for_function("() => document.querySelectorAll('#losses li').length === 2", timeout=WAIT_MS)
    newest, oldest = page.locator("#losses li").all_inner_texts()
    assert "executor 11 on 10.0.0.9" in newest and "exited with code 3" in newest
    assert "executor 3 on 10.0.0.6" in oldest
    page.record.assert_clean(origin_of(dashboard))


def test_without_the_token_the_page_is_refused(page, dashboard):
    response = page.goto(f"{origin_of(dashboard)}/")
    assert response.status == 401
    assert "token is needed" in page.inner_text("body")
    response = page.goto(f"{origin_of(dashboard)}/?token=0123")
    assert response.status == 401


def test_the_page_says_when_the_driver_is_unreachable(page, dashboard):
    page.goto(dashboard.url)
    page.wait_for_function("() => document.querySelector('#status').textContent === 'live'", timeout=WAIT_MS)
    dashboard.close()
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.startsWith('driver unreachable')", timeout=WAIT_MS)
    assert page.eval_on_selector("#status", "s => s.className") == "status unreachable"


def test_a_live_cluster_on_the_page(page, tmp_path):
    """A real LocalCluster with its dashboard, under a workload: the page shows its
    executors and its charts move. ZSCHED_DASHBOARD_SCREENSHOT=PATH saves a picture."""
    import zsched
    with zsched.LocalCluster(2, dashboard=True) as cluster:
        origin = re.match(r"(http://[^/]+)/", cluster.dashboard_url).group(1)
        client = cluster.client()
        stop = threading.Event()

        def workload():  # rounds of uneven size: the rate moves, the queue fills and drains
            size = 200
            while not stop.is_set():
                futures = [client.submit(time.sleep, 0.002) for _ in range(size)]
                for future in futures:
                    future.result(60)
                size = 2200 - size

        worker = threading.Thread(target=workload, daemon=True)
        worker.start()
        try:
            page.goto(cluster.dashboard_url)
            page.wait_for_function("() => document.querySelectorAll('#executors tbody tr').length === 2",
                                   timeout=WAIT_MS)
            rows = page.locator("#executors tbody tr")
            assert [rows.nth(i).get_attribute("data-executor-id") for i in range(2)] == ["1", "2"]
            assert rows.nth(0).locator("td").all_inner_texts()[1:3] == ["127.0.0.1", "active"]
            page.wait_for_function("() => document.querySelector('#chart-throughput').dataset.points > 2",
                                   timeout=WAIT_MS)
            points, last = chart_state(page, "#chart-throughput")
            page.wait_for_function(
                "([points, last]) => { const c = document.querySelector('#chart-throughput');"
                " return c.dataset.points !== points && c.dataset.last !== last; }",
                arg=[points, last], timeout=WAIT_MS)
            def finished():
                return int(page.inner_text("#summary-finished").replace(",", "") or 0)

            first = finished()
            page.wait_for_function(
                "(first) => Number(document.querySelector('#summary-finished').textContent"
                ".replace(/,/g, '')) > first", arg=first, timeout=WAIT_MS)
            if os.environ.get("ZSCHED_DASHBOARD_SCREENSHOT"):
                time.sleep(8)  # some history on the charts
                page.screenshot(path=os.environ["ZSCHED_DASHBOARD_SCREENSHOT"], full_page=True)
            page.record.assert_clean(origin)
        finally:
            stop.set()
            worker.join(60)


def test_a_clusters_notebook_view_renders(page):
    """What a notebook shows for a LocalCluster and its client (``_repr_html_``), rendered:
    the figures read as text, and the dashboard's link opens the dashboard."""
    import zsched
    with zsched.LocalCluster(2, dashboard=True) as cluster, cluster.client() as client:
        page.set_content(f"<html><body>{cluster._repr_html_()}{client._repr_html_()}</body></html>")
        tables = page.locator("div.zsched table")
        assert tables.count() == 2
        text = tables.nth(1).inner_text()
        assert "Executors\t2" in text and "Cores\t2" in text
        link = tables.nth(1).locator("a")
        assert link.get_attribute("href") == cluster.dashboard_url
        page.goto(link.get_attribute("href"))
        page.wait_for_function("() => document.querySelectorAll('#executors tbody tr').length === 2",
                               timeout=WAIT_MS)
