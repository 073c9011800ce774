"""The dashboard's token: derived from the cluster's secret, presented by a request in its
query (``?token=``), in a cookie the server sets, or as ``Authorization: Bearer``."""
import hashlib
import hmac
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

TOKEN_COOKIE = "zsched_dashboard_token"
TOKEN_LABEL = b"zsched dashboard"


def dashboard_token(secret: bytes) -> str:
    """The dashboard token for a cluster secret: 32 hex characters of
    HMAC-SHA256(secret, b"zsched dashboard")."""
    return hmac.new(secret, TOKEN_LABEL, hashlib.sha256).hexdigest()[:32]


def token_cookie_header(token: str) -> str:
    """The Set-Cookie value that lets a browser's later requests carry the token."""
    return f"{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"


def _same(expected: str, presented: str | None) -> bool:
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode("utf-8", "replace"))


def check_token(expected: str, query: str, headers) -> tuple[bool, bool]:
    """(authenticated, by the query): whether any token the request presents is
    ``expected``, and whether its query's was (then the server sets the cookie)."""
    by_query = _same(expected, parse_qs(query).get("token", [None])[-1])
    by_cookie = False
    cookie_header = headers.get("Cookie")
    if cookie_header:
        try:
            morsel = SimpleCookie(cookie_header).get(TOKEN_COOKIE)
        except CookieError:
            morsel = None
        by_cookie = _same(expected, morsel.value if morsel else None)
    scheme, _, credentials = (headers.get("Authorization") or "").partition(" ")
    by_bearer = scheme.lower() == "bearer" and _same(expected, credentials.strip())
    return by_query or by_cookie or by_bearer, by_query
