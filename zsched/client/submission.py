"""Submitting: the futures of tasks, the rows queued for the driver, and their functions.

Calling threads pickle tasks and queue them as rows in ``_outbox``; the thread that talks
to the driver (the I/O thread, or the thread of a driver in this process) takes what has
queued as SubmitTasks messages, with the pickle of each function the driver does not hold
yet (``HeldFunctions``).
"""
import concurrent.futures
import itertools
import pickle
import types
from operator import itemgetter

import cloudpickle

from .. import protocol as p
from ..errors import MessageTooLarge, TaskFailed
from .future import TaskFuture
from ..protocol import MsgType
from ..runtime import gc_untrack

_FUNCTION_CACHE_SIZE = 1024
_FRAME_TASKS = 8192  # tasks per SubmitTasks frame at most: the driver starts on a flood early
_dumps = pickle.dumps
_first = itemgetter(0)
_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


class Submission:
    """The part of ``Client`` that registers futures and queues their tasks, and turns the
    queue into messages for the driver."""

    def _function_digest(self, fn):
        """(digest, size) of ``fn``'s pickle; plain functions are pickled once per client."""
        if fn is self._last_function[0]:
            return self._last_function[1:]
        cacheable = isinstance(fn, (types.FunctionType, types.BuiltinFunctionType))
        if cacheable:
            entry = self._function_cache.get(fn)
            if entry is not None:
                self._last_function = (fn, *entry)
                return entry
        blob = cloudpickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        digest = p.function_digest(blob)
        self._function_blobs.setdefault(digest, blob)
        entry = (digest, len(blob))
        if cacheable:
            if len(self._function_cache) >= _FUNCTION_CACHE_SIZE:
                del self._function_cache[next(iter(self._function_cache))]
            self._function_cache[fn] = entry
            self._last_function = (fn, *entry)
        return entry

    def _check_open(self):
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if self._lost is not None:
            raise self._lost

    def _new_future(self, digest, fn_size, args, kwargs, retries):
        """A future for one task and its outbox row (None when the task cannot be sent).
        Called under ``_submit_lock``; ``_submit`` has a copy of this, inlined."""
        task_id = next(self._task_ids)
        future = TaskFuture(self, task_id, self._condition)
        try:
            payload = pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            payload = cloudpickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) + fn_size > self._max_message_size:
            return self._too_large(future, len(payload) + fn_size), None
        self._futures[task_id] = future
        # a list: the row of SubmitTasks as the driver decodes it (in this process, the
        # driver takes it as it is); ints and bytes, in no cycle: out of the GC
        row = [task_id, digest, payload, retries]
        gc_untrack(row)
        return future, row

    def _too_large(self, future, size):
        future.set_exception(MessageTooLarge(f"task {future._task_id}", size, self._max_message_size))
        return future

    def _submit(self, retries, fn, args, kwargs):
        # a flood's hot path, without a lock: shutdown and a lost driver are checked again
        # once the future is registered, so one racing with them never stays pending
        if self._shutdown or self._lost is not None:
            self._check_open()
        last = self._last_function  # one tuple: read at once, whatever other threads do
        lock = None
        if fn is last[0]:
            digest, fn_size = last[1], last[2]
        else:
            # held until the row is queued: the function (pickled now, or held by the
            # driver) is not released meanwhile (``_pinned_functions``)
            lock = self._submit_lock
            lock.acquire()
        try:
            if lock is not None:
                digest, fn_size = self._function_digest(fn)
            task_id = next(self._task_ids)
            future = TaskFuture(self, task_id, self._condition)
            try:
                payload = _dumps((args, kwargs), _PICKLE_PROTOCOL)
            except Exception:
                payload = cloudpickle.dumps((args, kwargs), protocol=_PICKLE_PROTOCOL)
            if len(payload) + fn_size > self._max_message_size:
                return self._too_large(future, len(payload) + fn_size)
            self._futures[task_id] = future
            row = [task_id, digest, payload, retries]
            gc_untrack(row)  # ints and bytes: in no cycle
            self._outbox.append(row)
        finally:
            if lock is not None:
                lock.release()
        if not self._wakeup.pending:  # else the I/O thread is awake and takes this row too
            self._wakeup.wake()
        if self._shutdown or self._lost is not None:
            self._submitted_while_closing(future)
        return future

    def _submitted_while_closing(self, future):
        """``future`` was registered while the client shut down or lost its driver: the
        shutdown or the failing sweep may have missed it. After a lost driver it fails
        like the others; after a shutdown the submission is withdrawn (cancelled, and
        ``RuntimeError`` as for any submit after shutdown) unless it already completed."""
        if self._lost is not None:
            if self._futures.pop(future._task_id, None) is not None:
                try:
                    future.set_exception(self._lost)
                except concurrent.futures.InvalidStateError:
                    pass  # the sweep came first
            return
        if future.cancel():
            raise RuntimeError("cannot schedule new futures after shutdown")

    def _submit_groups(self, digest, fn_size, groups, retries):
        """``[(future, calls), ...]`` for tasks of these ``(args, calls)`` groups, queued."""
        submitted = []
        rows = []
        no_kwargs = {}
        with self._submit_lock:
            self._check_open()
            for args, calls in groups:
                future, row = self._new_future(digest, fn_size, args, no_kwargs, retries)
                submitted.append((future, calls))
                if row is not None:
                    rows.append(row)
            if rows:
                self._outbox.extend(rows)
                self._wakeup.wake()
        return submitted

    def _cancel_task(self, task_id):
        if self._futures.pop(task_id, None) is not None and not self._io_stopped:
            self._cancels.append(task_id)
            self._wakeup.wake()

    def _queue_control(self, message):
        """Queue a control message after every task submitted so far."""
        self._outbox.append(message)
        self._wakeup.wake()

    def _send_outbox(self, send):
        """Send what the calling threads queued since the last turn, each frame with
        ``send`` (the socket's or the link's); True once a ClientGoodbye has gone."""
        goodbye = False
        for msg in self._messages_for_driver():
            send(p.encode(msg))
            goodbye = msg.TYPE == MsgType.CLIENT_GOODBYE
        return goodbye

    def _messages_for_driver(self):
        """The messages for the driver out of what the calling threads queued since the
        last turn, in their order, then a ForgetFunctions when this client holds too many
        functions at the driver; nothing after a ClientGoodbye. Called by the thread that
        talks to the driver: the I/O thread, or the thread of a driver in this process."""
        messages = self._queued_messages()
        held = self._held_functions
        if held.over_limit() and self._lost is None and not (
                messages and messages[-1].TYPE == MsgType.CLIENT_GOODBYE):
            with self._submit_lock:
                released = held.release(self._pinned_functions())
            if released:
                messages = [*messages, p.ForgetFunctions(released)]
        return messages

    def _queued_messages(self):
        """The messages for the driver out of what the calling threads queued since the
        last turn (see ``_messages_for_driver``)."""
        outbox = self._outbox
        if not self._cancels and len(outbox) <= 1:
            if not outbox:
                return ()
            if type(outbox[0][0]) is int:
                # a lone task (a caller that waits for each result): no pass over the
                # queue. Only this thread pops, so the row seen is the row taken.
                return self._lone_task_messages(outbox.popleft())
        # cancels first: a task cancelled before this turn's items were taken is among
        # them (sent now: withdrawn) or left in an earlier turn (its CancelTasks may go first)
        cancels = self._cancels
        cancels = list(itertools.islice(iter(cancels.popleft, None), len(cancels)))
        items = list(itertools.islice(iter(outbox.popleft, None), len(outbox)))
        if not (items or cancels):
            return ()
        messages = []
        has_control = set(map(type, map(_first, items))) - {int}
        if cancels:
            cancelled = set(cancels)
            unsent = cancelled.intersection(map(_first, items))
            if unsent:  # cancelled before they left: they never will
                items = [item for item in items if item[0] not in unsent]
            cancelled -= unsent
            if cancelled and self._lost is None:  # these left in earlier turns
                messages.append(p.CancelTasks(sorted(cancelled)))
        if not has_control:
            self._submit_messages(items, messages)
            return messages
        start = 0
        for index, item in enumerate(items):
            if type(item[0]) is int:  # a task
                continue
            self._submit_messages(items[start:index], messages)  # control messages keep their place
            start = index + 1
            if item[0] == "admin":
                messages.append(item[1])
            elif item[0] == "hello":
                messages.append(p.ClientHello(item[1]))
            elif item[0] == "goodbye":
                messages.append(p.ClientGoodbye())
                if self._channel is not None:  # no thread of ours ends: say so here
                    self._io_stopped = True
                    self._io_done.set()
                return messages
        self._submit_messages(items[start:], messages)
        return messages

    def _lone_task_messages(self, row):
        """``_submit_messages`` for one task row: it fits in a frame with its function
        (``submit`` checked that)."""
        if self._lost is not None:
            return ()
        digest = row[1]
        blob = self._function_to_send(digest)
        if blob is False:
            self._fail_unsendable([row])
            return ()
        if blob is None:
            return [p.SubmitTasks({}, [row])]
        self._held_functions.add(digest, len(self._function_blobs.pop(digest)))
        return [p.SubmitTasks({digest: blob}, [row])]

    def _function_to_send(self, digest):
        """For tasks of ``digest`` leaving now: None when the driver holds the function,
        else its pickle to send with them, or False when this client can no longer send it
        (``_fail_unsendable``)."""
        held = self._held_functions
        if digest in held:
            held.used(digest)
            self._function_blobs.pop(digest, None)  # pickled again by a submit: not needed
            return None
        return self._function_blobs.get(digest, False)

    def _submit_messages(self, tasks, messages):
        """Append to ``messages`` the SubmitTasks for these task rows, with the functions
        the driver does not hold; no frame larger than the limit."""
        if not tasks or self._lost is not None:
            return
        limit = self._max_message_size
        blobs, held = self._function_blobs, self._held_functions
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
                messages.append(p.SubmitTasks(functions, batch))
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
            future = self._futures.pop(row[0], None)
            if future is not None:
                future.set_exception(TaskFailed(
                    f"task {row[0]}: its function was released while it was submitted; submit it again"))
        return kept

    def _pinned_functions(self):
        """Digests not to release now: those a submit or a map may use without pickling
        the function again, and those of tasks queued for the next turn (whose submitter
        may have found the function's pickle gone, taken by an earlier task of it). Called
        under ``_submit_lock``, which a submit that pickles its function holds until its
        task is queued."""
        pinned = {entry[0] for entry in list(self._function_cache.values())}
        pinned.add(self._last_function[1])
        pinned.update(list(self._mapping))
        pinned.update(item[1] for item in list(self._outbox) if type(item[0]) is int)
        return pinned
