"""Tasks held behind long ones: which executors to ask for unstarted tasks back."""


def reclaim_hoarded_tasks(scheduler, silent_for):
    """``[(executor, count)]``: executors to ask for unstarted tasks back (they come back
    RETURNED, first in the queue, not charged). Looked for only while nothing is queued
    and some core is idle; each executor is asked at most once per ``silent_for``.

    A window measured on short tasks may have taken long ones, which then wait behind
    the first of them while cores elsewhere are idle. Two cases:

    - the executor holds tasks beyond its cores and has reported nothing for
      ``silent_for``: its measured task length is stale. It gives back its tasks beyond
      its cores and forgets that length, so its window is its cores until it reports
      again, and what it gives back goes to the idle cores, not behind its task again.
      Executors that hold no task forget theirs too (measured on the same short tasks,
      they would take what comes back in batches, to hold it the same way);
    - it reports, but holds more than the window its reports have shrunk to, and the
      tasks beyond the window would take ``silent_for`` or more: it gives those back."""
    counts = scheduler.counts
    if (scheduler.n_pending or scheduler.clamped or counts["submitted"]
            <= counts["finished"] + counts["failed"] + counts["cancelled"]):
        return []  # something waits for a core, or suspects do, or no task is out
    executors = [e for e in scheduler.executors_by_slot.values() if not e.decommissioning]
    if not any(len(e.running) < e.cores for e in executors):
        return []
    now = scheduler.clock()
    requests = []
    stale = False
    for executor in executors:
        held = len(executor.running)
        if held <= executor.cores or now - executor.last_reclaim < silent_for:
            continue
        if now - executor.last_report >= silent_for:
            scheduler.forget_task_length(executor)
            count = held - executor.cores
            stale = True
        elif executor.task_seconds is None:
            continue  # it reported nothing that ran since its length was forgotten
        else:
            count = held - max(executor.slots, executor.cores)
            if count <= 0 or count * executor.task_seconds < silent_for:
                continue
        executor.last_reclaim = now
        requests.append((executor, count))
    if stale:  # the tasks out are longer than measured: idle executors' measures are as old
        for executor in executors:
            if not executor.running and executor.task_seconds is not None:
                scheduler.forget_task_length(executor)
    return requests
