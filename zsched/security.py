"""Authentication and encryption of the bus with ZeroMQ CURVE.

The cluster secret is the administrator's. Whoever holds it derives the driver's (server)
key pair, the administrator's key pair and the client credential's (``credentials.py``).
The driver's ZAP handler admits the administrator's key, the client credential's and the
executor keys it issued, and tells the driver which one a connection presented (its
ZeroMQ User-Id): that fixes the connection's role. Everything on the bus is encrypted.
"""
import hashlib
import logging
import os
import secrets
from dataclasses import dataclass

import zmq
import zmq.utils.z85

from .credentials import CLIENT, Credential, is_credential, parse_credential
from .secret_file import SECRET_ENV, SECRET_FILE_ENV, read_secret
from .socket_events import parse_event

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"zsched"


MIN_SECRET_BYTES = 32  # a secret file zsched writes has 64 (hex of 32 random bytes)


def stretch(secret):
    """32 bytes derived from a short ``secret`` with scrypt (16 MiB, about 0.1 s)."""
    return hashlib.scrypt(secret, salt=b"zsched cluster secret", n=1 << 14, r=8, p=1,
                          maxmem=64 << 20, dklen=32)


ADMINISTRATOR_USER = b"administrator"   # the User-Id of a connection holding the cluster secret
CLIENT_USER = b"client"                 # ... the client credential
EXECUTOR_USER = b"executor:"            # ... an executor key, followed by its executor id


def _derived_key(label, secret):
    return zmq.utils.z85.encode(hashlib.sha256(label + b"\0" + secret).digest())


@dataclass(frozen=True)
class CurveKeys:
    """The keys a process connects (and the driver serves) with. ``client_public`` and
    ``client_secret`` are the pair this process presents; ``role`` says whose it is
    ("administrator" for the cluster secret, "client", "executor"). Only the cluster
    secret gives ``server_secret`` and ``client_credential``."""
    server_public: bytes
    server_secret: bytes | None
    client_public: bytes
    client_secret: bytes
    role: str = "administrator"
    executor_id: str | None = None
    client_credential: Credential | None = None

    @classmethod
    def from_secret(cls, secret):
        """The keys of a cluster secret. One shorter than ``MIN_SECRET_BYTES`` is stretched
        with scrypt first, so that guessing it costs each guess that much work."""
        if len(secret) < MIN_SECRET_BYTES:
            secret = stretch(secret)
        server_secret = _derived_key(b"zsched server key", secret)
        client_secret = _derived_key(b"zsched client key", secret)
        server_public = zmq.curve_public(server_secret)
        return cls(
            server_public=server_public,
            server_secret=server_secret,
            client_public=zmq.curve_public(client_secret),
            client_secret=client_secret,
            client_credential=Credential(
                CLIENT, server_public, _derived_key(b"zsched client credential", secret)),
        )

    @classmethod
    def from_credential(cls, credential):
        """The keys a client or executor credential connects with."""
        return cls(server_public=credential.server_public, server_secret=None,
                   client_public=credential.public_key, client_secret=credential.secret_key,
                   role=credential.role, executor_id=credential.executor_id)


def load_keys(secret_file=None, *, use_environment=True):
    """CURVE keys from ``secret_file``, else from the environment; None means no security."""
    if secret_file is None and use_environment:
        if os.environ.get(SECRET_ENV):
            return CurveKeys.from_secret(os.environ[SECRET_ENV].strip().encode())
        secret_file = os.environ.get(SECRET_FILE_ENV) or None
    if secret_file is None:
        return None
    return keys_of(read_secret(secret_file), secret_file)


def keys_of(text, where):
    """The keys of a cluster secret or of a credential (``text``, read from ``where``)."""
    if is_credential(text):
        return CurveKeys.from_credential(parse_credential(text, where))
    return CurveKeys.from_secret(text)


def make_server(sock, keys):
    sock.curve_server = True
    sock.curve_secretkey = keys.server_secret
    sock.curve_publickey = keys.server_public
    sock.zap_domain = ZAP_DOMAIN


def make_client(sock, keys):
    sock.curve_serverkey = keys.server_public
    sock.curve_publickey = keys.client_public
    sock.curve_secretkey = keys.client_secret


REFUSED_ADDRESSES_LIMIT = 10000  # addresses a ZapHandler remembers having warned about


class ZapHandler:
    """Answers ZAP requests for the driver's context. It admits the administrator's key,
    the client credential's and the keys in ``executor_keys`` (an ``ExecutorKeys``), and
    answers with the User-Id that names the connection's role.

    Its socket is owned by the driver's loop thread, which calls ``handle`` when readable.
    """

    def __init__(self, context, keys, executor_keys):
        self._users = {keys.client_public: ADMINISTRATOR_USER,
                       keys.client_credential.public_key: CLIENT_USER}
        self._executor_keys = executor_keys
        self.socket = context.socket(zmq.REP)
        self.socket.linger = 0
        self.socket.bind(ZAP_ENDPOINT)
        self._refused_addresses = set()

    def user_id(self, mechanism, credentials):
        """The User-Id of a connection presenting ``credentials``, or None: refused."""
        if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
            return None
        public = zmq.utils.z85.encode(credentials[0])
        return self._users.get(public) or self._executor_keys.user_id(public)

    def _why_refused(self, credentials):
        if (len(credentials) == 1 and len(credentials[0]) == 32
                and self._executor_keys.was_revoked(zmq.utils.z85.encode(credentials[0]))):
            return "its executor key was revoked (that executor was removed)"
        return "it does not hold a credential of this cluster"

    def handle(self):
        while True:
            try:
                request = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            version, request_id, _domain, address, _identity, mechanism = request[:6]
            credentials = request[6:]
            user_id = self.user_id(mechanism, credentials)
            if user_id is None and address not in self._refused_addresses:
                if len(self._refused_addresses) >= REFUSED_ADDRESSES_LIMIT:
                    self._refused_addresses.clear()  # bounded: each is warned about again
                self._refused_addresses.add(address)
                log.warning("refused a connection from %s: %s", address.decode(errors="replace"),
                            self._why_refused(credentials))
            status, text = (b"200", b"OK") if user_id else (b"400", b"not a member of this cluster")
            self.socket.send_multipart([version, request_id, status, text, user_id or b"", b""])

    def close(self):
        self.socket.close(linger=0)


_HANDSHAKE_FAILURES = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the driver does not hold the same secret",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "security mismatch (one side has a secret, the other not)",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the driver refused our credentials (wrong secret)",
}


class HandshakeWatch:
    """Watches a connecting socket and tells whether its security handshake failed."""

    def __init__(self, sock, has_secret):
        self._sock = sock
        self._has_secret = has_secret
        self._monitor = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_AUTH,
            addr=f"inproc://zsched-monitor-{id(sock):x}-{secrets.token_hex(4)}",
        )
        self.failure = None

    @property
    def socket(self):
        return self._monitor

    def check(self):
        """Read pending events; the failure text, or None."""
        while self._monitor.poll(0):
            event, _, _ = parse_event(self._monitor.recv_multipart())
            if event in _HANDSHAKE_FAILURES and self.failure is None:
                self.failure = (_HANDSHAKE_FAILURES[event] if self._has_secret else
                                "the driver requires the cluster secret and none was given "
                                "(--secret-file, ZSCHED_SECRET_FILE or ZSCHED_SECRET)")
        return self.failure

    def close(self):
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._monitor.close(linger=0)
