"""The hosts file of an SSH cluster: one ``[user@]host[:port] [executors]`` per line.

``executors`` (default 1) is how many executors the host takes. ``#`` starts a comment;
blank lines are ignored. An IPv6 address with a port is written in brackets:
``user@[fd00::5]:2222 4``. A malformed line is an error naming the file and the line.
"""
import re
from dataclasses import dataclass

from ..errors import ConfigError

_HOST = re.compile(r"""^(?:(?P<user>[^@\s]+)@)?
                       (?:\[(?P<bracketed>[^\]\s]+)\]|(?P<plain>[^@:\s\[\]]+))
                       (?::(?P<port>\d+))?$""", re.VERBOSE)


@dataclass(frozen=True)
class Host:
    """A host to start executors on: ``name`` is the host as written (the name executors
    register with), ``executors`` how many it takes."""
    name: str
    user: str = None
    port: int = None
    executors: int = 1
    line: int = 0

    @property
    def destination(self):
        """The ssh destination: ``[user@]name``."""
        return f"{self.user}@{self.name}" if self.user else self.name


def parse_host_line(text, line=0):
    """The Host on one line, or None for a blank or comment line; ConfigError if malformed."""
    fields = text.split("#", 1)[0].split()
    if not fields:
        return None
    if len(fields) > 2:
        raise ConfigError(f"expected '[user@]host[:port] [executors]', got {len(fields)} fields")
    match = _HOST.match(fields[0])
    if not match:
        raise ConfigError(f"expected '[user@]host[:port] [executors]', got {fields[0]!r}")
    port = match.group("port")
    if port is not None and not 0 < int(port) < 65536:
        raise ConfigError(f"port {port} is out of range")
    executors = 1
    if len(fields) == 2:
        if not fields[1].isdigit() or int(fields[1]) < 1:
            raise ConfigError(f"the number of executors must be an integer >= 1, got {fields[1]!r}")
        executors = int(fields[1])
    return Host(name=match.group("bracketed") or match.group("plain"), user=match.group("user"),
                port=int(port) if port else None, executors=executors, line=line)


def parse_hosts(lines, source="hosts"):
    """The hosts listed in ``lines``; an error names ``source`` and the line."""
    hosts, seen = [], {}
    for number, text in enumerate(lines, 1):
        try:
            host = parse_host_line(text, number)
        except ConfigError as exc:
            raise ConfigError(f"{source}, line {number}: {exc}: {text.strip()!r}") from None
        if host is None:
            continue
        key = (host.destination, host.port)
        if key in seen:
            raise ConfigError(f"{source}, line {number}: {text.strip()!r} repeats line {seen[key]} "
                              f"(give the number of executors instead)")
        seen[key] = number
        hosts.append(host)
    if not hosts:
        raise ConfigError(f"{source} lists no hosts")
    return hosts


def read_hosts_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read hosts file {path}: {exc.strerror}") from None
    return parse_hosts(lines, source=f"hosts file {path}")
