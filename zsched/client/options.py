"""``client.options(...)``: a client's ``submit`` and ``map`` with other options, and the
checks of those options."""
from .. import protocol as p


class ClientOptions:
    """``client.options(...)``: ``submit`` and ``map`` of a client with other options.

    - ``retries``: runs after a task raises. A map's chunk of calls runs again whole;
      when its last run raises, the map raises at the chunk's first call.
    - ``hosts``: names of the hosts whose executors the tasks prefer. A task waits up to
      ``locality_wait`` for a core there, then runs anywhere.
    - ``speculative=False``: never a second attempt of these tasks, whatever the
      ``speculation`` setting (for calls with side effects)."""

    def __init__(self, client, retries, hosts=None, speculative=True):
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        if not isinstance(speculative, bool):
            raise TypeError(f"speculative must be True or False, got {speculative!r}")
        self.client = client
        self.retries = retries
        self.hosts = check_hosts(hosts)
        self.speculative = speculative
        # what each task's row carries to the driver (TaskPlacement), None for no option
        self.placement = None if not self.hosts and speculative else [self.hosts, speculative]

    def submit(self, fn, /, *args, **kwargs):
        return self.client._submit(self.retries, fn, args, kwargs, self.placement)

    def map(self, fn, *iterables, timeout=None, chunksize=None, buffersize=None, progress=False):
        return self.client._map(self.retries, fn, iterables, timeout, chunksize, buffersize,
                                progress, self.placement)


def check_hosts(hosts):
    """``hosts`` as a list of host names ([] for None); ValueError or TypeError saying what
    is wrong."""
    if hosts is None:
        return []
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__iter__"):
        raise TypeError(f"hosts must be a list of host names, got {hosts!r:.80}")
    hosts = list(dict.fromkeys(hosts))
    for host in hosts:
        if not isinstance(host, str) or not 0 < len(host) <= p.HOST_NAME_LIMIT:
            raise ValueError(f"a host name must be a str of 1 to {p.HOST_NAME_LIMIT} "
                             f"characters, got {host!r:.80}")
    if len(hosts) > p.MAX_PREFERRED_HOSTS:
        raise ValueError(f"at most {p.MAX_PREFERRED_HOSTS} preferred hosts, got {len(hosts)}")
    return hosts
