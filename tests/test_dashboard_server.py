"""The dashboard's HTTP server over real HTTP on loopback: routes and content types, the
token, errors, security headers, the static files' self-containment, /metrics equal to
the snapshot, and closing."""
import copy
import hashlib
import hmac
import http.client
import http.cookiejar
import json
import logging
import math
import re
import socket
import threading
import urllib.request
from importlib.resources import files

import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from zsched.dashboard import DashboardServer, dashboard_token, gate

pytestmark = pytest.mark.timeout(120)

SNAPSHOT = {
    "time": 1790000000.0,
    "app_id": "app-test", "url": "tcp://127.0.0.1:7077", "fast_path": "compiled (Cython)",
    "executors": [
        {"id": "1", "host": "10.0.0.5", "cores": 2, "free_slots": 1, "running": 1, "tasks_done": 1234,
         "tasks_failed": 0, "rss": 52428800, "cpu": 12.5, "busy_threads": 1, "last_heartbeat_age": 0.8,
         "state": "active", "pid": 4321},
        {"id": "2", "host": "10.0.0.6", "cores": 4, "free_slots": 0, "running": 4, "tasks_done": 10,
         "tasks_failed": 2, "rss": 73400320, "cpu": 101.0, "busy_threads": 4, "last_heartbeat_age": 7.5,
         "state": "late", "pid": 4322},
        # before its first heartbeat: no rss, cpu or busy_threads
        {"id": "10", "host": "10.0.0.5", "cores": 1, "free_slots": 1, "running": 0, "tasks_done": 0,
         "tasks_failed": 0, "last_heartbeat_age": 0.1, "state": "active", "pid": 4323},
    ],
    "tasks": {"submitted": 5000, "finished": 4000, "failed": 3, "cancelled": 1, "retried": 7,
              "queued": 900, "running": 97, "speculated": 5, "speculation_won": 2},
    "allocation": {"target": 4, "starting": 1, "capacity": None, "backoff": {}, "start_failures": 2,
                   "dynamic": False},
    "losses": [{"id": "3", "host": "10.0.0.6", "reason": "killed by signal SIGKILL", "time": 1789999990.0}],
    "history": [[1789999999.0, 3900, 3, 950, 97, 3], [1789999999.5, 3950, 3, 920, 97, 3],
                [1790000000.0, 4000, 3, 900, 97, 3]],
    "counters": {"bytes_in": 123456, "bytes_out": 654321, "messages_in": 100, "messages_out": 90,
                 "executors_lost": 1},
    "loop_longest_pause": 0.012,
    "scheduling_latency": {"buckets": [[0.0001, 10], [0.0005, 40], [0.001, 90], [0.005, 99], [0.01, 100],
                                       [0.05, 100], [0.1, 100], [0.5, 100], [1.0, 100], [5.0, 100],
                                       ["+Inf", 100]],
                           "sum": 0.12, "count": 100},
}

TOKEN = dashboard_token(b"a cluster secret")
ROUTES = ["/", "/static/index.html", "/static/dashboard.js", "/static/dashboard.css", "/api/status", "/metrics"]
STATIC_DIR = files("zsched.dashboard").joinpath("static")


class FakeSnapshots:
    """A snapshot source a test changes between requests: a dict, None, or an exception to raise."""

    def __init__(self, current):
        self.current = current

    def __call__(self):
        if isinstance(self.current, Exception):
            raise self.current
        return self.current


@pytest.fixture
def source():
    return FakeSnapshots(copy.deepcopy(SNAPSHOT))


@pytest.fixture
def server(source):
    server = DashboardServer("127.0.0.1", 0, source)
    server.start()
    yield server
    server.close()


@pytest.fixture
def guarded(source):
    server = DashboardServer("127.0.0.1", 0, source, token=TOKEN)
    server.start()
    yield server
    server.close()


def fetch(server, path, method="GET", headers=None):
    """(status, headers, body) of one request, the path sent exactly as given."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def metric_samples(text):
    """{(sample name, sorted labels): value}; a histogram's le label as a float."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            if "le" in labels:
                labels["le"] = float(labels["le"])
            key = (sample.name, tuple(sorted(labels.items())))
            assert key not in found, f"sample {key} twice"
            found[key] = sample.value
    return found


def expected_samples(snapshot):
    """What /metrics must hold for a snapshot, worked out here from the snapshot alone."""
    tasks, counters, executors = snapshot["tasks"], snapshot["counters"], snapshot["executors"]
    expected = {}
    for state in ("submitted", "finished", "failed", "cancelled", "retried", "speculated",
                  "speculation_won"):
        expected[("zsched_tasks_total", (("state", state),))] = tasks[state]
    for state in ("queued", "running"):
        expected[("zsched_tasks_active", (("state", state),))] = tasks[state]
    expected[("zsched_queue_depth", ())] = tasks["queued"]
    for state in ("active", "late", "decommissioning", "excluded"):
        expected[("zsched_executors", (("state", state),))] = sum(e["state"] == state for e in executors)
    expected[("zsched_executor_cores", ())] = sum(e["cores"] for e in executors)
    expected[("zsched_executors_lost_total", ())] = counters["executors_lost"]
    for name, key in [("zsched_received_bytes_total", "bytes_in"), ("zsched_sent_bytes_total", "bytes_out"),
                      ("zsched_received_messages_total", "messages_in"),
                      ("zsched_sent_messages_total", "messages_out")]:
        expected[(name, ())] = counters[key]
    expected[("zsched_executor_start_failures_total", ())] = (snapshot.get("allocation") or {}).get(
        "start_failures", 0)
    expected[("zsched_driver_loop_longest_pause_seconds", ())] = snapshot.get("loop_longest_pause", 0.0)
    latency = snapshot["scheduling_latency"]
    for bound, count in latency["buckets"]:
        expected[("zsched_scheduling_latency_seconds_bucket", (("le", float(bound)),))] = count
    expected[("zsched_scheduling_latency_seconds_sum", ())] = latency["sum"]
    expected[("zsched_scheduling_latency_seconds_count", ())] = latency["count"]
    for e in executors:
        labels = (("executor", e["id"]), ("host", e["host"]))
        if "rss" in e:
            expected[("zsched_executor_rss_bytes", labels)] = e["rss"]
        if "cpu" in e:
            expected[("zsched_executor_cpu_percent", labels)] = e["cpu"]
    return expected


def test_token_is_the_truncated_hmac_of_the_secret():
    secret = b"a cluster secret"
    assert TOKEN == hmac.new(secret, b"zsched dashboard", hashlib.sha256).hexdigest()[:32]
    assert re.fullmatch(r"[0-9a-f]{32}", TOKEN)
    assert dashboard_token(b"another secret") != TOKEN


def test_url_and_port(server, guarded):
    assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}/"
    assert guarded.url == f"http://127.0.0.1:{guarded.port}/?token={TOKEN}"


def test_page_and_static_files_with_their_content_types(server):
    status, headers, page = fetch(server, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert page == STATIC_DIR.joinpath("index.html").read_bytes()
    referenced = re.findall(r'(?:src|href)="(static/[^"]+)"', page.decode())
    assert sorted(referenced) == ["static/dashboard.css", "static/dashboard.js"]
    for path, content_type in [("/static/dashboard.js", "text/javascript"), ("/static/dashboard.css", "text/css"),
                               ("/static/index.html", "text/html")]:
        status, headers, body = fetch(server, path)
        assert status == 200, path
        assert headers["Content-Type"].split(";")[0] == content_type
        assert body == STATIC_DIR.joinpath(path.rpartition("/")[2]).read_bytes()


def test_api_status_is_the_latest_snapshot_as_json(server, source):
    status, headers, body = fetch(server, "/api/status")
    assert status == 200
    assert headers["Content-Type"] == "application/json" and headers["Cache-Control"] == "no-store"
    assert json.loads(body) == SNAPSHOT
    source.current = {**SNAPSHOT, "tasks": {**SNAPSHOT["tasks"], "finished": 4500}}
    assert json.loads(fetch(server, "/api/status")[2])["tasks"]["finished"] == 4500


def test_metrics_hold_exactly_the_snapshots_figures(server, source):
    status, headers, body = fetch(server, "/metrics")
    assert status == 200 and headers["Content-Type"] == CONTENT_TYPE_LATEST
    text = body.decode()
    assert metric_samples(text) == expected_samples(SNAPSHOT)
    assert "# TYPE zsched_tasks_total counter" in text and "# TYPE zsched_tasks_active gauge" in text
    assert "# TYPE zsched_scheduling_latency_seconds histogram" in text
    for line in text.splitlines():
        if line.startswith("# HELP"):
            assert len(line.split(" ", 3)[3]) > 10, line

    changed = copy.deepcopy(SNAPSHOT)
    changed["tasks"]["finished"] = 4321
    changed["executors"][0]["state"] = "decommissioning"
    changed["scheduling_latency"] = {"buckets": [[0.001, 5], [0.01, 7], ["+Inf", 8]], "sum": 0.5, "count": 8}
    source.current = changed
    assert metric_samples(fetch(server, "/metrics")[2].decode()) == expected_samples(changed)


def test_metrics_with_no_executors_and_no_losses(server, source):
    source.current = {**SNAPSHOT, "executors": [], "losses": []}
    samples = metric_samples(fetch(server, "/metrics")[2].decode())
    for state in ("active", "late", "decommissioning", "excluded"):
        assert samples[("zsched_executors", (("state", state),))] == 0
    assert samples[("zsched_executor_cores", ())] == 0
    assert not any(name.startswith(("zsched_executor_rss", "zsched_executor_cpu")) for name, _ in samples)


def test_head_gives_the_headers_without_a_body(server):
    for path in ROUTES:
        get_status, get_headers, get_body = fetch(server, path)
        status, headers, body = fetch(server, path, method="HEAD")
        assert (status, body) == (200, b""), path
        assert headers["Content-Type"] == get_headers["Content-Type"]
        if path not in ("/api/status", "/metrics"):  # those two are made anew for each request
            assert int(headers["Content-Length"]) == len(get_body)


def test_unknown_paths_404_and_other_methods_405(server):
    for path in ["/nope", "/api", "/api/status/x", "/static/", "/static/nope.js", "/index.html", "/metrics/"]:
        assert fetch(server, path)[0] == 404, path
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"]:
        status, headers, _ = fetch(server, "/api/status", method=method)
        assert status == 405, method
        assert headers["Allow"] == "GET, HEAD"


def test_paths_out_of_the_static_folder_are_refused(server):
    for path in ["/static/../server.py", "/static/%2e%2e/server.py", "/static/..%2fserver.py",
                 "/static/%2e%2e%2f%2e%2e%2fpyproject.toml", "/static/../__init__.py", "/static//etc/passwd",
                 "/static/%2fetc%2fpasswd", "/static/./index.html", "/../server.py", "/static/.."]:
        status, _, body = fetch(server, path)
        assert status == 404, path
        assert b"DashboardServer" not in body and b"import" not in body


def test_security_headers_on_every_response(server, guarded):
    cases = [(server, path, "GET") for path in ROUTES + ["/nope"]]
    cases += [(server, "/", "POST"), (server, "/", "HEAD"), (guarded, "/", "GET"), (guarded, "/metrics", "GET")]
    for target, path, method in cases:
        _, headers, _ = fetch(target, path, method=method)
        assert headers["Content-Security-Policy"] == (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "connect-src 'self'; frame-ancestors 'none'"), (path, method)
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "no-referrer"


def test_every_route_needs_the_token_when_one_is_set(guarded):
    for path in ROUTES + ["/nope", "/static/../server.py"]:
        status, headers, body = fetch(guarded, path)
        assert status == 401, path
        assert headers["Content-Type"].startswith("text/plain")
        assert b"token is needed" in body and b"the driver prints the dashboard url with its token at start" in body.lower()
        assert "Set-Cookie" not in headers
    for wrong in ["?token=", "?token=" + TOKEN[:-1], "?token=" + TOKEN.upper(), "?token=" + TOKEN + "0",
                  "?tok=" + TOKEN, "?token=%C3%A9"]:
        assert fetch(guarded, "/api/status" + wrong)[0] == 401, wrong
    for headers in [{"Authorization": "Bearer nope"}, {"Authorization": TOKEN},
                    {"Cookie": "zsched_dashboard_token=nope"}, {"Cookie": "other=" + TOKEN},
                    {"Cookie": "\x00;;;==="}]:
        assert fetch(guarded, "/metrics", headers=headers)[0] == 401, headers


def test_token_by_query_sets_the_cookie(guarded):
    status, headers, _ = fetch(guarded, "/?token=" + TOKEN)
    assert status == 200
    cookie = [part.strip() for part in headers["Set-Cookie"].split(";")]
    assert cookie[0] == f"zsched_dashboard_token={TOKEN}"
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(cookie[1:])
    assert fetch(guarded, "/api/status?token=" + TOKEN)[0] == 200


def test_token_by_cookie_and_by_bearer(guarded):
    status, headers, _ = fetch(guarded, "/api/status", headers={"Cookie": f"zsched_dashboard_token={TOKEN}"})
    assert status == 200 and "Set-Cookie" not in headers
    status, _, body = fetch(guarded, "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and b"zsched_tasks_total" in body
    # as a browser does: the token URL once, then the cookie alone
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    assert opener.open(guarded.url, timeout=30).status == 200
    base = guarded.url.partition("?")[0]
    for path in ["static/dashboard.js", "api/status", "metrics"]:
        assert opener.open(base + path, timeout=30).status == 200


def test_503_while_there_is_no_snapshot_or_it_fails(server, source, caplog):
    source.current = None
    for path in ["/api/status", "/metrics"]:
        status, headers, body = fetch(server, path)
        assert status == 503 and b"no figures yet" in body, path
        assert headers["Content-Security-Policy"]
    assert fetch(server, "/")[0] == 200
    source.current = RuntimeError("snapshot broke")
    with caplog.at_level(logging.DEBUG, logger="zsched.dashboard"):
        for path in ["/api/status", "/metrics", "/api/status"]:
            status, _, body = fetch(server, path)
            assert status == 503 and b"RuntimeError" in body, path
    assert any(record.exc_info for record in caplog.records)
    source.current = {"time": 1.0, "cpu": math.nan}  # not JSON a browser could read
    assert fetch(server, "/api/status")[0] == 503
    source.current = copy.deepcopy(SNAPSHOT)
    assert fetch(server, "/api/status")[0] == 200
    assert fetch(server, "/metrics")[0] == 200


def test_static_files_are_self_contained():
    names = sorted(entry.name for entry in STATIC_DIR.iterdir() if entry.is_file())
    assert {"index.html", "dashboard.js", "dashboard.css"} <= set(names)
    for name in names:
        text = STATIC_DIR.joinpath(name).read_text()
        assert not re.search(r"https?://", text, re.IGNORECASE), name
        assert not re.search(r"""(?:src|href|url)\s*[=(]\s*["']?//""", text, re.IGNORECASE), name
    page = STATIC_DIR.joinpath("index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page), "inline script"
    assert not re.search(r"\sstyle=|<style", page), "inline style"
    assert not re.search(r"\son[a-z]+=", page), "inline event handler"


def test_requests_are_logged_at_debug_only(server, caplog, capfd):
    with caplog.at_level(logging.DEBUG, logger="zsched.dashboard"):
        fetch(server, "/")
        fetch(server, "/nope")
    assert any("GET / " in record.getMessage() for record in caplog.records)
    assert all(record.levelno == logging.DEBUG for record in caplog.records)
    assert capfd.readouterr().err == ""


def test_concurrent_requests_while_the_snapshot_changes(server, source):
    errors = []

    def client():
        try:
            for _ in range(15):
                for path in ["/api/status", "/metrics"]:
                    status, _, body = fetch(server, path)
                    assert status == 200 and body
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for finished in range(100):
        source.current = {**SNAPSHOT, "tasks": {**SNAPSHOT["tasks"], "finished": finished}}
    for thread in threads:
        thread.join(60)
    assert not errors


def test_close_is_idempotent_and_frees_the_port(source):
    server = DashboardServer("127.0.0.1", 0, source)
    server.close()  # never started: nothing to do
    server = DashboardServer("127.0.0.1", 0, source)
    server.start()
    port = server.port
    assert fetch(server, "/api/status")[0] == 200
    with pytest.raises(RuntimeError):
        server.start()
    server.close()
    server.close()
    assert not [t for t in threading.enumerate() if t.name == "zsched-dashboard"]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    again = DashboardServer("127.0.0.1", port, source)
    again.start()
    try:
        assert again.port == port and fetch(again, "/api/status")[0] == 200
    finally:
        again.close()


def test_ipv6_loopback(source):
    try:
        server = DashboardServer("::1", 0, source)
        server.start()
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    try:
        assert server.url == f"http://[::1]:{server.port}/"
        with urllib.request.urlopen(server.url + "api/status", timeout=30) as response:
            assert json.load(response)["app_id"] == "app-test"
    finally:
        server.close()


def test_the_token_appears_in_no_log(guarded, caplog):
    with caplog.at_level(logging.DEBUG, logger="zsched.dashboard"):
        status, _, _ = fetch(guarded, f"/?token={TOKEN}")
        assert status == 200
        fetch(guarded, "/?token=wrong")
    assert any("GET /?token=..." in record.getMessage() for record in caplog.records)
    assert TOKEN not in caplog.text and "wrong" not in caplog.text


def test_idle_connections_hold_no_thread_and_stop_no_answer(server):
    """500 connections that send nothing: the page and /metrics still answer, and the
    server has made no thread for them."""
    threads_before = threading.active_count()
    idle = []
    try:
        for _ in range(500):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=30))
        for path in ("/", "/metrics", "/api/status"):
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1)
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                assert response.status == 200 and response.read()
            finally:
                connection.close()
        assert threading.active_count() <= threads_before + gate.WORKERS
    finally:
        for sock in idle:
            sock.close()


def test_a_connection_that_sends_no_request_in_time_is_closed(server, monkeypatch):
    monkeypatch.setattr(gate, "HEADER_DEADLINE", 0.2)  # read as each connection arrives
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    slow.sendall(b"GET / HTTP/1.1\r\n")  # and never the end of its headers
    assert slow.recv(1) == b""  # closed by the server, not by this test's timeout
    slow.close()
    assert fetch(server, "/")[0] == 200


def test_past_the_cap_the_oldest_waiting_connection_is_closed(server, monkeypatch):
    monkeypatch.setattr(gate, "MAX_WAITING", 3)
    waiting = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(3)]
    newer = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    assert waiting[0].recv(1) == b""  # the oldest made room
    newer.sendall(b"GET /api/status HTTP/1.0\r\n\r\n")
    assert newer.makefile("rb").readline().startswith(b"HTTP/1.0 200")
    for sock in waiting + [newer]:
        sock.close()
