"""``zsched.Client``: a ``concurrent.futures.Executor`` that runs tasks on a zsched cluster.

The parts (see ``client.py``): ``outbox`` (what waits to leave for the driver),
``future_table`` and ``future`` (the futures and completing them), ``transport`` with
``socket_transport``, ``pipe_transport`` and ``channel_transport`` (how the client reaches
its driver), ``map_tasks`` and ``map_calls`` (``map``), ``held_functions``,
``progress_bar``, ``options`` (``client.options``).

Its names are imported on first use: an executor that runs a ``map``'s chunk of calls
(``map_calls.CallsRunner``) does not import the rest of the client.
"""
from ..entry import lazy_exports

_SOURCES = {"Client": "client", "ClientOptions": "options"}
__all__ = ["Client", "ClientOptions"]
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
