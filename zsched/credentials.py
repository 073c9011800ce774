"""Credentials that do one job each: a client's, and one executor's.

The cluster secret is the administrator's: it may act as a client or as an executor.
From it the driver derives one client credential, which only submits tasks and calls the
client API. For each executor it starts, the driver makes a fresh key pair, which
registers that executor once and dies with it (``ExecutorKeys``).

A credential is one line of text, so that it travels on a pipe or an ssh session's
standard input as easily as in a file::

    zsched-credential client SERVER-KEY SECRET-KEY
    zsched-credential executor EXECUTOR-ID SERVER-KEY SECRET-KEY

The keys are CURVE keys in Z85 (40 characters, no spaces): the driver's public key and
the holder's secret key.
"""
import os
from dataclasses import dataclass

import zmq

from .errors import ConfigError

TAG = b"zsched-credential"
CLIENT = "client"
EXECUTOR = "executor"
REVOKED_LIMIT = 10000  # revoked executor keys remembered, to say why one is refused


@dataclass(frozen=True)
class Credential:
    """A client's (``executor_id`` None) or an executor's credential."""
    role: str
    server_public: bytes
    secret_key: bytes
    executor_id: str | None = None

    @property
    def public_key(self):
        return zmq.curve_public(self.secret_key)

    def line(self):
        """The credential as one line of text (bytes, with its newline)."""
        words = [TAG, self.role.encode()]
        if self.executor_id is not None:
            words.append(self.executor_id.encode())
        return b" ".join([*words, self.server_public, self.secret_key]) + b"\n"


def _credential_line(text):
    """The line of ``text`` (bytes) that holds a credential, or None (lines starting with
    ``#`` are comments)."""
    for line in text.splitlines():
        if line.startswith(TAG):
            return line
    return None


def is_credential(text):
    return _credential_line(text) is not None


def parse_credential(text, where="credential"):
    """The Credential in ``text`` (bytes); ConfigError naming ``where`` if malformed."""
    words = (_credential_line(text) or b"").split()
    try:
        if words[0] != TAG:
            raise ValueError
        role = words[1].decode("ascii")
        if role == CLIENT and len(words) == 4:
            credential = Credential(CLIENT, words[2], words[3])
        elif role == EXECUTOR and len(words) == 5:
            credential = Credential(EXECUTOR, words[3], words[4], words[2].decode("ascii"))
        else:
            raise ValueError
        if len(credential.server_public) != 40:
            raise ValueError
        credential.public_key  # noqa: B018 (raises on a malformed secret key)
    except (IndexError, ValueError, zmq.ZMQError):
        raise ConfigError(f"{where} is not a zsched credential") from None
    return credential


def write_credential_file(path, credential):
    """Write ``credential`` to ``path`` (mode 0600, replacing what was there)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    try:
        os.unlink(path)  # a new file: one someone else made or opened is not written into
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(b"# a zsched client credential: it submits tasks, nothing more\n"
                if credential.role == CLIENT else b"")
        f.write(credential.line())


def read_credential_fd(fd):
    """The Credential written to file descriptor ``fd``, which is then closed (standard
    input becomes /dev/null)."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    except OSError as exc:
        raise ConfigError(f"cannot read a credential from file descriptor {fd}: {exc.strerror}") from None
    finally:
        _close(fd)
    return parse_credential(b"".join(chunks), f"what file descriptor {fd} held")


def _close(fd):
    try:
        if fd > 2:
            os.close(fd)
            return
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass  # not open: reading it said so


class ExecutorKeys:
    """The driver's book of executor keys: one per executor it starts, admitted for that
    executor's connections until it is removed, and registering it once.

    ``user_id(public_key)`` is what the ZAP handler asks: ``b"executor:ID"`` for a key
    issued and not revoked, else None. Only the driver's loop thread uses it."""

    def __init__(self, server_public):
        self._server_public = server_public
        self._by_public = {}      # public key (Z85) -> executor id
        self._public_of = {}      # executor id -> public key
        self._registered = set()  # executor ids whose key has registered
        self._revoked = set()     # public keys revoked (bounded)

    def issue(self, executor_id):
        """A fresh credential for executor ``executor_id`` (one issued before is revoked)."""
        self.revoke(executor_id)
        public, secret = zmq.curve_keypair()
        self._by_public[public] = executor_id
        self._public_of[executor_id] = public
        return Credential(EXECUTOR, self._server_public, secret, executor_id)

    def user_id(self, public_key):
        executor_id = self._by_public.get(public_key)
        return None if executor_id is None else b"executor:" + executor_id.encode()

    def was_revoked(self, public_key):
        return public_key in self._revoked

    def first_registration(self, executor_id):
        """True the first time executor ``executor_id`` registers with its key."""
        if executor_id in self._registered:
            return False
        self._registered.add(executor_id)
        return True

    def revoke(self, executor_id):
        """The executor is gone: its key is refused from now on."""
        public = self._public_of.pop(executor_id, None)
        self._registered.discard(executor_id)
        if public is None:
            return
        del self._by_public[public]
        if len(self._revoked) >= REVOKED_LIMIT:
            self._revoked.clear()
        self._revoked.add(public)
