"""The cluster secret's file: where it is by default, making one, reading it, and the
environment variables that may hold it instead. Nothing here needs ZeroMQ: the keys made
from the secret are ``security``'s."""
import logging
import os
import secrets
import stat

from .errors import ConfigError

log = logging.getLogger(__name__)

SECRET_ENV = "ZSCHED_SECRET"
SECRET_FILE_ENV = "ZSCHED_SECRET_FILE"
SECRET_VARIABLES = (SECRET_ENV, SECRET_FILE_ENV)  # never passed on to executors and tasks


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
