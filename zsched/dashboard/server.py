"""``DashboardServer``: the dashboard's HTTP server, on the standard library.

Routes (GET and HEAD; any other method gets 405, an unknown path 404):

- ``/``: the page (``static/index.html``); ``/static/NAME``: the page's other files;
- ``/api/status``: the latest snapshot as JSON;
- ``/metrics``: the snapshot in Prometheus's text exposition format.

With a token every route requires it (see ``auth.py``); without one the server is open.
``snapshot()`` is called from the request threads; when it raises or returns None (no
snapshot published yet) ``/api/status`` and ``/metrics`` answer 503.
"""
import importlib.resources
import io
import json
import logging
import re
import socket
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Callable
from urllib.parse import unquote

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .auth import check_token, token_cookie_header
from .gate import RequestGate
from .metrics import render_metrics

log = logging.getLogger("zsched.dashboard")

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                               "script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

TOKEN_NEEDED = (b"zsched dashboard: a token is needed.\n"
                b"The driver prints the dashboard URL with its token at start: open that URL "
                b"(it ends in ?token=...), or send the token as 'Authorization: Bearer TOKEN'.\n")


def load_static_files() -> dict[str, tuple[bytes, str]]:
    """name -> (content, content type) of every servable file in ``static/``."""
    files = {}
    for entry in importlib.resources.files(__package__).joinpath("static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in CONTENT_TYPES:
            files[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return files


def encode_status(snapshot: dict) -> bytes:
    """The snapshot as JSON that a browser parses (no NaN or Infinity)."""
    return json.dumps(snapshot, allow_nan=False, default=str).encode()


class DashboardServer:
    """Serves the dashboard on ``host``:``port`` (0: a free port) from a daemon thread."""

    def __init__(self, host: str, port: int, snapshot: Callable[[], dict], token: str | None = None):
        self.host = host
        self._requested_port = port
        self.snapshot = snapshot
        self.token = token
        self._httpd = None
        self._thread = None
        self._closed = False
        self._lock = threading.Lock()

    def start(self):
        """Bind and serve; returns once the socket listens."""
        with self._lock:
            if self._httpd is not None or self._closed:
                raise RuntimeError("a DashboardServer starts once")
            self._httpd = _DashboardHTTPServer((self.host, self._requested_port), self)
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                            name="zsched-dashboard", daemon=True)
            self._thread.start()
        log.debug("dashboard listening on %s", redacted(self.url))

    @property
    def port(self) -> int:
        return self._httpd.server_address[1] if self._httpd else self._requested_port

    @property
    def url(self) -> str:
        return self._url_at(self.host)

    @property
    def public_url(self) -> str:
        """``url`` as another host reaches it: a wildcard address becomes this host's name."""
        wildcard = self.host in ("0.0.0.0", "::", "*", "")
        return self._url_at(socket.gethostname() if wildcard else self.host)

    def _url_at(self, host):
        host = f"[{host}]" if ":" in host else host
        url = f"http://{host}:{self.port}/"
        return url + f"?token={self.token}" if self.token else url

    def close(self):
        """Stop serving, free the port and join the serving thread; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        thread.join()


class _DashboardHTTPServer(HTTPServer):
    """The dashboard's HTTP server: requests pass the gate, then a worker answers."""

    request_queue_size = 1024  # the listen backlog: a burst of connections is not refused

    def __init__(self, address, dashboard: DashboardServer):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.dashboard = dashboard
        self.static_files = load_static_files()
        self.snapshot_failed_before = False
        self.gate = RequestGate(self._serve)  # before binding: a failed bind closes it
        super().__init__(address, _DashboardRequestHandler)

    def process_request(self, request, client_address):
        """No thread yet: the gate reads the request first (see ``gate.py``)."""
        self.gate.admit(request, client_address)

    def _serve(self, sock, head, client_address):
        """Answer the request whose request line and headers are ``head``, in a worker."""
        try:
            self.RequestHandlerClass((sock, head), client_address, self)
        except Exception:
            self.handle_error(sock, client_address)
        finally:
            self.shutdown_request(sock)

    def server_close(self):
        super().server_close()
        self.gate.close()

    def server_bind(self):
        # not HTTPServer.server_bind, which looks up the host's fully qualified name
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        # a viewer that went away is routine; anything else is worth a warning (not a
        # traceback on stderr, as socketserver would print)
        routine = isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError))
        log.log(logging.DEBUG if routine else logging.WARNING, "dashboard: error while serving %s",
                client_address, exc_info=True)


class _DashboardRequestHandler(BaseHTTPRequestHandler):
    server_version = "zsched-dashboard"
    timeout = 5  # a viewer that takes no part of the answer for this long is dropped

    def setup(self):
        # the request line and headers were read by the gate; a GET or HEAD has no body
        self.connection, head = self.request
        self.connection.settimeout(self.timeout)
        self.rfile = io.BytesIO(head)
        self.wfile = self.connection.makefile("wb")

    def do_GET(self):
        self._answer()

    def do_HEAD(self):
        self._answer()  # as GET, without the body

    def __getattr__(self, name):
        # every other method (POST, PUT, DELETE, OPTIONS, ...): 405
        if name.startswith("do_"):
            return self._method_not_allowed
        raise AttributeError(name)

    def _method_not_allowed(self):
        self.close_connection = True
        self._send(405, b"method not allowed: the dashboard is read-only\n", "text/plain; charset=utf-8",
                   {"Allow": "GET, HEAD"})

    def _answer(self):
        path, _, query = self.path.partition("?")
        query = query.partition("#")[0]
        dashboard = self.server.dashboard
        extra_headers = {}
        if dashboard.token:
            authenticated, by_query = check_token(dashboard.token, query, self.headers)
            if not authenticated:
                self._send(401, TOKEN_NEEDED, "text/plain; charset=utf-8",
                           {"WWW-Authenticate": 'Bearer realm="zsched dashboard"'})
                return
            if by_query:
                extra_headers["Set-Cookie"] = token_cookie_header(dashboard.token)
        path = unquote(path)
        if path == "/":
            self._send_static("index.html", extra_headers)
        elif path.startswith("/static/"):
            self._send_static(path[len("/static/"):], extra_headers)
        elif path == "/api/status":
            self._send_figures(encode_status, "application/json", extra_headers)
        elif path == "/metrics":
            self._send_figures(render_metrics, CONTENT_TYPE_LATEST, extra_headers)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _send_static(self, name, extra_headers):
        found = self.server.static_files.get(name)  # only these names: no way out of static/
        if found is None:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
        else:
            self._send(200, found[0], found[1], {**extra_headers, "Cache-Control": "no-cache"})

    def _send_figures(self, encode, content_type, extra_headers):
        """The latest snapshot, encoded; 503 when there is none or it cannot be read."""
        try:
            snapshot = self.server.dashboard.snapshot()
            body = None if snapshot is None else encode(snapshot)
        except Exception as exc:
            # the first failure is worth a warning; a failing snapshot fails every second
            level = logging.DEBUG if self.server.snapshot_failed_before else logging.WARNING
            self.server.snapshot_failed_before = True
            log.log(level, "dashboard: the driver's figures could not be read", exc_info=True)
            body, reason = None, f"the driver's figures could not be read ({type(exc).__name__})\n"
        else:
            reason = "the driver has published no figures yet\n"
        if body is None:
            self._send(503, reason.encode(), "text/plain; charset=utf-8",
                       {"Cache-Control": "no-store", "Retry-After": "1"})
        else:
            self._send(200, body, content_type, {**extra_headers, "Cache-Control": "no-store"})

    def _send(self, status, body, content_type, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def end_headers(self):
        for name, value in SECURITY_HEADERS.items():  # on every response, errors included
            self.send_header(name, value)
        super().end_headers()

    def version_string(self):
        return self.server_version

    def log_message(self, format, *args):
        log.debug("dashboard %s: %s", self.address_string(), redacted(format % args))


_TOKEN = re.compile(r"(token=)[^&#\s\"]*")


def redacted(text):
    """``text`` with the value of any ``token=`` in it hidden: no log holds the token."""
    return _TOKEN.sub(r"\1...", text)
