"""Authentication and encryption of the bus with ZeroMQ CURVE, from one shared secret.

Everyone who holds the secret file derives the same two CURVE key pairs from it: the
driver's (server) pair and the pair every executor and client uses. The driver's ZAP
handler admits only connections that present the derived client key, so a peer without
the secret can neither register nor submit, and the traffic is encrypted.
"""
import hashlib
import logging
import os
import secrets
import stat
from dataclasses import dataclass

import zmq
import zmq.utils.z85

from .errors import ConfigError
from .socket_events import parse_event

log = logging.getLogger(__name__)

SECRET_ENV = "ZSCHED_SECRET"
SECRET_FILE_ENV = "ZSCHED_SECRET_FILE"
ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"zsched"


def default_secret_path():
    return os.path.join(os.path.expanduser("~"), ".zsched", "secret")


def create_secret_file(path):
    """Write a fresh random secret to ``path`` (mode 0600) unless the file exists."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return True


def read_secret(path):
    """The secret in ``path``; an error names the file when it is missing or empty."""
    try:
        with open(path, "rb") as f:
            secret = f.read().strip()
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(f"cannot read secret file {path}: {exc.strerror}") from None
    if not secret:
        raise ConfigError(f"secret file {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("secret file %s is readable by others (mode %o); use chmod 600", path, mode & 0o777)
    return secret


MIN_SECRET_BYTES = 32  # a secret file zsched writes has 64 (hex of 32 random bytes)


def stretch(secret):
    """32 bytes derived from a short ``secret`` with scrypt (16 MiB, about 0.1 s)."""
    return hashlib.scrypt(secret, salt=b"zsched cluster secret", n=1 << 14, r=8, p=1,
                          maxmem=64 << 20, dklen=32)


@dataclass(frozen=True)
class CurveKeys:
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def from_secret(cls, secret):
        """The keys of a cluster secret. One shorter than ``MIN_SECRET_BYTES`` is stretched
        with scrypt first, so that guessing it costs each guess that much work."""
        if len(secret) < MIN_SECRET_BYTES:
            secret = stretch(secret)
        server_secret = zmq.utils.z85.encode(hashlib.sha256(b"zsched server key\0" + secret).digest())
        client_secret = zmq.utils.z85.encode(hashlib.sha256(b"zsched client key\0" + secret).digest())
        return cls(
            server_public=zmq.curve_public(server_secret),
            server_secret=server_secret,
            client_public=zmq.curve_public(client_secret),
            client_secret=client_secret,
        )


def load_keys(secret_file=None, *, use_environment=True):
    """CURVE keys from ``secret_file``, else from the environment; None means no security."""
    if secret_file is None and use_environment:
        if os.environ.get(SECRET_ENV):
            return CurveKeys.from_secret(os.environ[SECRET_ENV].strip().encode())
        secret_file = os.environ.get(SECRET_FILE_ENV) or None
    if secret_file is None:
        return None
    return CurveKeys.from_secret(read_secret(secret_file))


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
    """Answers ZAP requests for the driver's context: only the derived client key passes.

    Its socket is owned by the driver's loop thread, which calls ``handle`` when readable.
    """

    def __init__(self, context, keys):
        self._allowed = keys.client_public
        self.socket = context.socket(zmq.REP)
        self.socket.linger = 0
        self.socket.bind(ZAP_ENDPOINT)
        self._refused_addresses = set()

    def handle(self):
        while True:
            try:
                request = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            version, request_id, _domain, address, _identity, mechanism = request[:6]
            credentials = request[6:]
            ok = (mechanism == b"CURVE" and len(credentials) == 1
                  and zmq.utils.z85.encode(credentials[0]) == self._allowed)
            if not ok and address not in self._refused_addresses:
                if len(self._refused_addresses) >= REFUSED_ADDRESSES_LIMIT:
                    self._refused_addresses.clear()  # bounded: each is warned about again
                self._refused_addresses.add(address)
                log.warning("refused a connection from %s: it does not hold the cluster secret",
                            address.decode(errors="replace"))
            status, text = (b"200", b"OK") if ok else (b"400", b"not a member of this cluster")
            self.socket.send_multipart([version, request_id, status, text, b"", b""])

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
