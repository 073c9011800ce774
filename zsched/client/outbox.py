"""What a client has queued for its driver: task rows and control messages in order, the
cancels, and the functions they use.

Threads: calling threads append (``rows``, ``queue_control``, ``queue_cancel``) and pickle
functions under ``lock``. Only the thread that talks to the driver (the I/O thread, or the
thread of a driver in this process) takes: ``messages_for_driver`` turns what waits into
SubmitTasks frames, each with the pickles of the functions the driver does not hold yet
(``HeldFunctions``).
"""
import itertools
import pickle
import threading
import types
from collections import deque
from operator import itemgetter

import cloudpickle

from .. import protocol as p
from ..errors import TaskFailed
from ..protocol import MsgType
from .held_functions import HeldFunctions
from .task_data import TaskData

_FUNCTION_CACHE_SIZE = 1024
_FRAME_TASKS = 8192  # tasks per SubmitTasks frame at most: the driver starts on a flood early


class Outbox:
    """The rows and messages waiting to leave for the driver, and the function table.

    ``rows`` holds task rows (``[task id, digest, args, retries]``, a list each) and control
    messages (protocol messages) in the order they were queued: callers append, the sending
    thread pops them all at once, so a flood leaves in large frames. ``lock`` is held while
    submitting may be stopped (a shutdown, a lost driver) and while a function is pickled;
    it is reentrant, as done-callbacks may submit. ``last_function`` is ``(function,
    digest, size)`` of the last function pickled or found, read by ``submit`` without the
    lock. ``futures`` is the client's ``FutureTable``: tasks that cannot be sent fail there.
    ``wake()`` wakes the sending thread."""

    def __init__(self, futures, wake):
        self.rows = deque()
        self.cancels = deque()  # task ids cancelled since the sending thread's last turn
        self.lock = threading.RLock()
        self.last_function = (None, None, 0)
        self.max_message_size = None  # the driver's, once it welcomed the client
        self.stopped = False  # True once nothing leaves for the driver any more
        self.placed = False   # a row with options (a fifth item) was queued once
        self._futures = futures
        self._wake = wake
        self._blobs = {}             # digest -> cloudpickled function not yet sent
        self.held_functions = HeldFunctions()  # the functions the driver holds for this client
        self._function_cache = {}    # function -> (digest, size)
        self._mapping = {}           # digest -> maps submitting tasks of it now
        self.task_data = TaskData()  # large arguments and broadcasts: their keys and PutData

    # ------------------------------------------------------------ calling threads

    def function_digest(self, fn):
        """(digest, size) of ``fn``'s pickle; plain functions are pickled once per client.
        Called under ``lock``."""
        if fn is self.last_function[0]:
            return self.last_function[1:]
        cacheable = isinstance(fn, (types.FunctionType, types.BuiltinFunctionType))
        if cacheable:
            entry = self._function_cache.get(fn)
            if entry is not None:
                self.last_function = (fn, *entry)
                return entry
        blob = cloudpickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        digest = p.function_digest(blob)
        self._blobs.setdefault(digest, blob)
        entry = (digest, len(blob))
        if cacheable:
            if len(self._function_cache) >= _FUNCTION_CACHE_SIZE:
                del self._function_cache[next(iter(self._function_cache))]
            self._function_cache[fn] = entry
            self.last_function = (fn, *entry)
        return entry

    def start_map(self, fn):
        """(digest, size) of ``fn``, kept from release until ``end_map``: a map pickles its
        function once for all its tasks. Called under ``lock``."""
        digest, size = self.function_digest(fn)
        self._mapping[digest] = self._mapping.get(digest, 0) + 1
        return digest, size

    def end_map(self, digest):
        with self.lock:
            left = self._mapping.pop(digest) - 1
            if left:
                self._mapping[digest] = left

    def queue_rows(self, rows):
        """Queue task rows and wake the sending thread. Called under ``lock``."""
        self.rows.extend(rows)
        self._wake()

    def queue_data(self, future, put):
        """Queue ``put``, the PutData of ``future``'s task, before its row; the driver is
        told to forget it once the task ended, whatever its end. Called under ``lock``."""
        self.rows.append(put)
        key = put.key
        future.add_done_callback(lambda _: self.queue_control(p.ForgetData([key])))

    def queue_control(self, message):
        """Queue a control message after every task queued so far."""
        self.rows.append(message)
        self._wake()

    def queue_cancel(self, task_id):
        """Tell the driver that this task is cancelled, unless nothing leaves any more."""
        if not self.stopped:
            self.cancels.append(task_id)
            self._wake()

    def waiting(self):
        """Whether anything waits to leave."""
        return bool(self.rows or self.cancels)

    # ------------------------------------------------------------ the sending thread

    def messages_for_driver(self):
        """The messages for the driver out of what was queued since the last turn, in
        order, then a ForgetFunctions when this client holds too many functions at the
        driver; nothing after a ClientGoodbye."""
        messages = self._queued_messages()
        held = self.held_functions
        if held.over_limit() and self._futures.lost is None and not (
                messages and messages[-1].TYPE == MsgType.CLIENT_GOODBYE):
            with self.lock:
                released = held.release(self._pinned_functions())
            if released:
                messages = [*messages, p.ForgetFunctions(released)]
        return messages

    def _queued_messages(self):
        rows = self.rows
        if not self.cancels and len(rows) <= 1:
            if not rows:
                return ()
            if type(rows[0]) is list:
                # a lone task (a caller that waits for each result): no pass over the
                # queue. Only this thread pops, so the row seen is the row taken.
                return self._lone_task_messages(rows.popleft())
        # cancels first: a task cancelled before this turn's items were taken is among
        # them (sent now: withdrawn) or left in an earlier turn (its CancelTasks may go first)
        cancels = self.cancels
        cancels = list(itertools.islice(iter(cancels.popleft, None), len(cancels)))
        items = list(itertools.islice(iter(rows.popleft, None), len(rows)))
        if not (items or cancels):
            return ()
        messages = []
        has_control = set(map(type, items)) - {list}
        if cancels:
            cancelled = set(cancels)
            unsent = cancelled.intersection(item[0] for item in items if type(item) is list)
            if unsent:  # cancelled before they left: they never will
                items = [item for item in items if type(item) is not list or item[0] not in unsent]
            cancelled -= unsent
            if cancelled and self._futures.lost is None:  # these left in earlier turns
                messages.append(p.CancelTasks(sorted(cancelled)))
        if not has_control:
            self._submit_messages(items, messages)
            return messages
        start = 0
        for index, item in enumerate(items):
            if type(item) is list:  # a task
                continue
            self._submit_messages(items[start:index], messages)  # control messages keep their place
            start = index + 1
            messages.append(item)
            if item.TYPE == MsgType.CLIENT_GOODBYE:
                return messages
        self._submit_messages(items[start:], messages)
        return messages

    def _lone_task_messages(self, row):
        """``_submit_messages`` for one task row: it fits in a frame with its function
        (``submit`` checked that)."""
        if self._futures.lost is not None:
            return ()
        digest = row[1]
        blob = self._function_to_send(digest)
        if blob is False:
            self._fail_unsendable([row])
            return ()
        if blob is None:
            return self._with_placement({}, [row], [])
        self.held_functions.add(digest, len(self._blobs.pop(digest)))
        return self._with_placement({digest: blob}, [row], [])

    def _with_placement(self, functions, rows, messages):
        """Append to ``messages`` the SubmitTasks of ``rows``, after the TaskPlacement of
        those rows that carry options (their fifth item, taken off); ``messages``."""
        if self.placed:
            placed = [[row[0], *row[4]] for row in rows if len(row) > 4]
            if placed:
                rows = [row[:4] for row in rows]
                messages.append(p.TaskPlacement(placed))
        messages.append(p.SubmitTasks(functions, rows))
        return messages

    def _function_to_send(self, digest):
        """For tasks of ``digest`` leaving now: None when the driver holds the function,
        else its pickle to send with them, or False when this client can no longer send it
        (``_fail_unsendable``)."""
        held = self.held_functions
        if digest in held:
            held.used(digest)
            self._blobs.pop(digest, None)  # pickled again by a submit: not needed
            return None
        return self._blobs.get(digest, False)

    def _submit_messages(self, tasks, messages):
        """Append to ``messages`` the SubmitTasks for these task rows, with the functions
        the driver does not hold; no frame larger than the limit."""
        if not tasks or self._futures.lost is not None:
            return
        limit = self.max_message_size
        blobs, held = self._blobs, self.held_functions
        for start in range(0, len(tasks), _FRAME_TASKS):
            frame_tasks = tasks[start:start + _FRAME_TASKS]
            used = set(map(itemgetter(1), frame_tasks))
            new = set()
            for digest in used:
                blob = self._function_to_send(digest)
                if blob is False:
                    frame_tasks = self._fail_unsendable(frame_tasks, digest)
                elif blob is not None:
                    new.add(digest)
            size = sum(map(len, map(itemgetter(2), frame_tasks))) + sum(len(blobs[d]) for d in new)
            if size <= limit:  # the usual case: one frame, sized in C
                batches = [({digest: blobs[digest] for digest in new}, frame_tasks)]
            else:
                batches = p.batch_tasks(frame_tasks, 1, 2, blobs, used - new, limit)
            for functions, batch in batches:
                self._with_placement(functions, batch, messages)
                for digest, blob in functions.items():  # the driver holds it now
                    held.add(digest, len(blob))
                    blobs.pop(digest, None)

    def _fail_unsendable(self, rows, digest=None):
        """Fail the tasks among ``rows`` (those of ``digest``, or all) whose function this
        client can no longer send, and return the others. It happens only to a task whose
        submitter took its function's digest from the cache just before a thousand other
        functions pushed it out and it was released (``HeldFunctions``)."""
        kept = []
        for row in rows:
            if digest is not None and row[1] != digest:
                kept.append(row)
                continue
            self._futures.fail(row[0], TaskFailed(
                f"task {row[0]}: its function was released while it was submitted; submit it again"))
        return kept

    def _pinned_functions(self):
        """Digests not to release now: those a submit or a map may use without pickling
        the function again, and those of tasks queued for the next turn (whose submitter
        may have found the function's pickle gone, taken by an earlier task of it). Called
        under ``lock``, which a submit that pickles its function holds until its task is
        queued."""
        pinned = {entry[0] for entry in list(self._function_cache.values())}
        pinned.add(self.last_function[1])
        pinned.update(list(self._mapping))
        pinned.update(item[1] for item in list(self.rows) if type(item) is list)
        return pinned
