"""``zsched status`` as text: a client's ``status()`` laid out for a person, in sections
as ``ray status`` lays out a Ray cluster's."""


def report(status):
    """The text of ``status`` (a client's ``status()``), one section after another."""
    lines = [f"zsched cluster at {status.get('url')}   application {status.get('app_id')}"]
    if status.get("dashboard_url"):
        lines.append(f"dashboard  {status['dashboard_url']}")
    lines += _executors(status.get("executors", []))
    lines += _tasks(status.get("tasks", {}))
    lines += _allocation(status.get("allocation"))
    lines += _exclusions(status.get("excluded") or {})
    return "\n".join(lines) + "\n"


def _section(title):
    return ["", f"======== {title} ========"]


def _executors(executors):
    lines = _section("Executors")
    if not executors:
        return lines + ["(none registered)"]
    by_host = {}
    for executor in executors:
        by_host.setdefault(executor.get("host"), []).append(executor)
    for host in sorted(by_host, key=str):
        group = sorted(by_host[host], key=_executor_order)
        cores = sum(e.get("cores", 0) for e in group)
        held = sum(e.get("running", 0) for e in group)
        lines.append(f"{host}: {len(group)} executor(s), {cores} core(s), {held} task(s) held")
        for e in group:
            own, running = e.get("cores", 0), e.get("running", 0)
            # the driver's own count, not the last heartbeat's: an executor runs its held
            # tasks up to its cores, the others wait there
            busy = f"{min(running, own)}/{own}"
            age = e.get("last_heartbeat_age")
            heard = "-" if age is None else f"{age:.1f} s ago"
            lines.append(f"  executor {e.get('id'):<6} {e.get('state', '?'):<15} "
                         f"cores {own:<3} held {running:<5} "
                         f"busy {busy:<6} heartbeat {heard:<12} pid {e.get('pid')}")
    return lines


def _executor_order(executor):
    executor_id = str(executor.get("id"))
    return (0, int(executor_id), "") if executor_id.isdigit() else (1, 0, executor_id)


def _tasks(tasks):
    lines = _section("Tasks")
    lines.append(f"queued {tasks.get('queued', 0)}   running {tasks.get('running', 0)}   "
                 f"done {tasks.get('finished', 0)}   failed {tasks.get('failed', 0)}")
    lines.append(f"submitted {tasks.get('submitted', 0)}   cancelled {tasks.get('cancelled', 0)}"
                 f"   retried {tasks.get('retried', 0)}   speculated {tasks.get('speculated', 0)}")
    return lines


def _allocation(allocation):
    lines = _section("Allocation")
    if allocation is None:
        return lines + ["no cluster manager: executors join by themselves"]
    kind = "dynamic" if allocation.get("dynamic") else "static"
    return lines + [f"target {allocation.get('target')} executor(s) ({kind})   starting "
                    f"{allocation.get('starting', 0)}   start failures "
                    f"{allocation.get('start_failures', 0)}"]


def _exclusions(excluded):
    lines = _section("Exclusions")
    executors, hosts = excluded.get("executors", []), excluded.get("hosts", [])
    if not executors and not hosts:
        return lines + ["none"]
    for e in executors:
        lines.append(f"executor {e['executor_id']} on {e['host']}: {e['reason']} "
                     f"({e['seconds_left']:.0f} s left)")
    for h in hosts:
        lines.append(f"host {h['host']}: {h['reason']} ({h['seconds_left']:.0f} s left)")
    if excluded.get("suspended"):
        lines.append("suspended: no exclusion applies while it would leave no executor")
    return lines
