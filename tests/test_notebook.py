"""How a client and a cluster show themselves in a notebook (``_repr_html_``, parsed here;
rendered once in tests/test_dashboard_browser.py), and progress bars through tqdm.auto."""
import html.parser
import io
import os
import signal
import time

import zsched
from conftest import wait_for

WAIT = 60


class Table(html.parser.HTMLParser):
    """The title, the rows (label: text) and the links of a ``_repr_html_``."""

    def __init__(self, text):
        super().__init__()
        self.title, self.rows, self.links = "", {}, []
        self._tag, self._label, self._cell = None, None, ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self._tag = tag
        if tag == "td":
            self._cell = ""
        if tag == "a":
            self.links.append(dict(attrs)["href"])

    def handle_endtag(self, tag):
        if tag == "td":
            self.rows[self._label] = self._cell
        self._tag = None if tag in ("th", "strong") else self._tag

    def handle_data(self, data):
        if self._tag == "strong":
            self.title += data
        elif self._tag == "th":
            self._label = data
        else:
            self._cell += data


def test_a_client_shows_its_cluster_and_tasks():
    with zsched.LocalCluster(2, dashboard=True) as cluster, cluster.client() as client:
        futures = [client.submit(time.sleep, 1.0) for _ in range(2)]
        wait_for(lambda: client.status()["tasks"]["running"] == 2, timeout=WAIT,
                 message="both tasks to run")
        shown = Table(client._repr_html_())
        assert shown.title == "zsched Client"
        assert shown.rows["Executors"] == "2" and shown.rows["Cores"] == "2"
        assert shown.rows["Tasks running"] == "2" and shown.rows["Tasks queued"] == "0"
        assert shown.rows["Application"] == cluster.app_id
        assert shown.links == [cluster.dashboard_url]
        for future in futures:
            future.result(WAIT)
        assert Table(client._repr_html_()).rows["Tasks done"] == "2"
    assert Table(client._repr_html_()).title == "zsched Client (closed)"


def test_a_cluster_shows_itself_and_says_when_its_driver_is_gone():
    cluster = zsched.LocalCluster(2)
    try:
        shown = Table(cluster._repr_html_())
        assert shown.title == "zsched LocalCluster"
        assert shown.rows["Address"] == cluster.address
        assert shown.rows["Secret file"] == cluster.secret_file
        assert shown.rows["Executors"] == "2" and "Dashboard" not in shown.rows
        client = cluster.client(timeout=2)
        os.kill(cluster.driver_pid, signal.SIGKILL)
        wait_for(lambda: client.connection_error is not None, timeout=WAIT,
                 message="the client to lose its driver")
        assert "cannot ask the driver" in Table(client._repr_html_()).rows["Status"]
        assert "cannot ask the driver" in Table(cluster._repr_html_()).rows["Status"]
    finally:
        cluster.close()
    assert Table(cluster._repr_html_()).title == "zsched LocalCluster (closed)"


def test_progress_bars_come_from_tqdm_auto():
    """tqdm.auto is a widget in a notebook's kernel, and the terminal's bar elsewhere."""
    from tqdm.auto import tqdm

    from zsched.client.progress_bar import ProgressBar
    bar = ProgressBar(1, file=io.StringIO())
    try:
        assert isinstance(bar._bar, tqdm)
    finally:
        bar.close()
