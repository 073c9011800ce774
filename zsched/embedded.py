"""How ``Client()`` with no address gets its cluster.

The client imports no cluster module. The ``zsched`` package, which knows both,
registers the factory when it is imported (``register``); ``Client()`` calls it.
"""
_factory = None


def register(factory):
    """Have ``Client()`` start its cluster with ``factory(n_executors)``.

    The factory returns a cluster whose driver runs in this process: it has ``channel``
    (a ``zsched.channel.Channel``), ``close()``, and ``keep(client)``, which has it close
    ``client`` before its driver."""
    global _factory
    _factory = factory


def start_cluster(n_executors):
    """A new embedded cluster of ``n_executors`` executors, from the registered factory."""
    if _factory is None:
        raise RuntimeError("no embedded cluster is registered: import zsched first")
    return _factory(n_executors)
