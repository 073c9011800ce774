"""``zsched.Client``: a ``concurrent.futures.Executor`` that runs tasks on a zsched cluster.

The calling threads pickle tasks and queue them. For a driver in another process, one I/O
thread owns the DEALER socket (or the pipes of ``Client.over_pipes``), sends whatever has
queued up as one SubmitTasks message (a lone task leaves at once, a flood leaves in large
frames) and completes futures from TaskResults. For a driver in this process
(``zsched.Client()``, a ``LocalCluster`` with ``in_process=True``) there is no socket and
no I/O thread: the driver's thread takes the same messages from the queue and completes
the futures itself (``zsched.channel``).
"""
from .client import Client, ClientOptions

__all__ = ["Client", "ClientOptions"]
