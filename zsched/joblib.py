"""joblib's ``Parallel`` on a zsched cluster: importing this module registers the
backend ``zsched``.

    import joblib
    import zsched.joblib

    with joblib.parallel_config(backend="zsched"):
        results = joblib.Parallel(n_jobs=-1)(joblib.delayed(f)(x) for x in data)

scikit-learn's ``n_jobs`` runs on it too. The backend takes the client given as
``client=``. Else it connects to ``address`` (with ``secret_file`` or ``insecure``, as
``zsched.Client`` takes them). Else it uses the client this process connected last
(``zsched.Client.current()``). Else it starts an embedded cluster (``zsched.Client()``)
once, for the process.

``n_jobs=-1`` (the default) is the cluster's cores. joblib sizes its batches of calls
from their durations, as with its own processes. An exception in a call raises in the
caller with its type and the task's traceback, and the calls not yet done are
cancelled. A ``Parallel`` inside a task runs in threads of its executor.
"""
import atexit
import pickle
import threading

import cloudpickle
from joblib import register_parallel_backend
from joblib._parallel_backends import AutoBatchingMixin, ParallelBackendBase

from .client import Client
from .payload import DATA_PART_MIN, large_buffers_apart

__all__ = ["ZschedBackend"]

_clients = {}  # the clients this module made: (address, secret_file, insecure) -> Client
_clients_lock = threading.Lock()


def _run_batch(pickled, buffers):
    """In the executor: run a batch of joblib's calls, pickled by ``_pickled``."""
    return pickle.loads(pickled, buffers=buffers)()


def _pickled(batch):
    """``(pickle, buffers)`` of ``batch`` for an executor, through cloudpickle (a call
    defined in a script, ``__main__``, travels by value), as joblib's own processes get it.
    Its large buffers (arrays) stay apart, and so does the pickle when it is large: they
    travel as frames of their own, never copied."""
    buffers = []
    data = cloudpickle.dumps(batch, 5, buffer_callback=large_buffers_apart(buffers))
    if len(data) >= DATA_PART_MIN:
        data = pickle.PickleBuffer(data)
    return data, buffers


class ZschedBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's backend ``zsched``: each batch of calls is a task of a zsched client."""

    default_n_jobs = -1
    supports_retrieve_callback = True
    supports_sharedmem = False
    uses_threads = False

    def __init__(self, nesting_level=None, inner_max_num_threads=None, *, client=None,
                 address=None, secret_file=None, insecure=False, **backend_kwargs):
        super().__init__(nesting_level=nesting_level,
                         inner_max_num_threads=inner_max_num_threads, **backend_kwargs)
        if client is not None and address is not None:
            raise ValueError("give the zsched backend a client or an address, not both")
        self._client = client
        self._address = (address, secret_file, insecure)
        self._pending = set()  # this Parallel call's futures not done yet
        self._pending_lock = threading.Lock()

    @property
    def client(self):
        """The client this backend runs on (see the module's docstring)."""
        if self._client is None:
            self._client = _client_for(*self._address)
        return self._client

    def effective_n_jobs(self, n_jobs):
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            n_jobs = self.default_n_jobs
        if n_jobs < 0:
            return max(self.client.total_cores() + 1 + n_jobs, 1)
        return n_jobs

    def configure(self, n_jobs=1, parallel=None, prefer=None, require=None, **backend_kwargs):
        self.parallel = parallel
        return self.effective_n_jobs(n_jobs)

    def submit(self, func, callback=None):
        future = self.client.submit(_run_batch, *_pickled(func))
        with self._pending_lock:
            self._pending.add(future)
        future.add_done_callback(self._done)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def _done(self, future):
        with self._pending_lock:
            self._pending.discard(future)

    def retrieve_result_callback(self, future):
        return future.result()

    def abort_everything(self, ensure_ready=True):
        """Cancel the calls not done: queued ones never start, running ones are killed."""
        with self._pending_lock:
            pending = list(self._pending)
            self._pending.clear()
        for future in pending:
            future.cancel()

    def terminate(self):
        self.abort_everything()
        self.reset_batch_stats()


def _client_for(address, secret_file, insecure):
    """The client at ``address``, the current client, or the embedded cluster's; one per
    address for the process, made on first use."""
    if address is None:
        try:
            return Client.current()
        except ValueError:
            pass
    key = (address, secret_file, insecure)
    with _clients_lock:
        client = _clients.get(key)
        if client is None or client.closed:
            if address is None:
                client = Client()
            else:
                client = Client(address, secret_file=secret_file, insecure=insecure)
            _clients[key] = client
        return client


@atexit.register
def _close_clients():
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


register_parallel_backend("zsched", ZschedBackend)
