"""Executors as Slurm jobs, submitted with ``sbatch`` and watched with ``squeue``.

Each job runs one or more executors (``executors_per_job``) with the executor command line,
and asks Slurm for their cores. A job waiting in Slurm's queue holds pending executors:
they count toward the target and are never timed out while they wait for room. A job that
ends (it failed, was cancelled, preempted, or reached its time limit) is an executor loss
with Slurm's state and reason, as ``scontrol show job`` gives them.

Each executor's own credential (a key pair the driver made for it alone) travels in
``sbatch``'s environment (``ZSCHED_CREDENTIAL_1``, ``_2``, ... in the job's order), which
Slurm hands to the job. The batch script takes each from its environment at once and
hands it to its executor on a pipe: it is on no command line and in no executor's
environment; Slurm keeps the job's environment where only Slurm's own user reads it.

Slurm commands take tens of milliseconds and more on a busy controller, so they run in
a thread of this manager; the driver's calls only change its bookkeeping. A job cancelled
(``scancel``: SIGTERM to its processes) that Slurm still lists after ``KILL_GRACE`` gets
SIGKILL (``scancel --signal=KILL``), without waiting for Slurm's own KillWait; the batch script
ignores SIGTERM itself, so that its executors stay among the job's processes until then. The
executors share the driver's fate on their own (they leave a driver that is gone or
silent), so the jobs of a killed driver end too; a clean stop also cancels them.

A job asks for the node its waiting tasks want, and not for the nodes excluded for
failures (see ``slurm_placement``).
"""
import itertools
import logging
import shlex
import subprocess
import sys
import threading
import time

from .base import KILL_GRACE, ClusterManager
from .local import environment_without_secrets, module_command
from .slurm_placement import (NODELIST, PREFER, PREFER_REFUSED, node_option, placement_arguments,
                              placement_words, wanted_node)

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.5     # seconds between looks at Slurm's queue
COMMAND_TIMEOUT = 60.0  # seconds a Slurm command may take
_ALIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING",
          "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED"}


class SlurmJob:
    """One job: the executors it runs and what Slurm says of it."""

    def __init__(self, executor_ids):
        self.executor_ids = executor_ids
        self.job_id = None          # Slurm's, once sbatch answered
        self.state = "SUBMITTING"   # then Slurm's state
        self.node = None
        self.ended_as = None        # why it ended, once it has
        self.cancel = False         # to be cancelled (its executors are killed)
        self.kill_at = None         # once cancelled: when it gets SIGKILL if Slurm still lists it
        self.credentials = []       # its executors' credentials, in order (none: insecure)
        self.wanted_node = None     # the node its waiting tasks want (None: any)
        self.exclude = ()           # the nodes excluded for failures when it was asked for

    @property
    def waiting(self):
        return self.ended_as is None and self.state in ("SUBMITTING", "PENDING", "CONFIGURING")


def run_command(arguments, stdin=None, env=None):
    """Run a Slurm command: (exit status, stdout, stderr); a missing command or a timeout is
    status 127 or 124 with the reason in stderr."""
    try:
        done = subprocess.run(arguments, input=stdin, capture_output=True, text=True, env=env,
                              timeout=COMMAND_TIMEOUT)
    except FileNotFoundError:
        return 127, "", f"{arguments[0]}: command not found (is Slurm's client installed?)"
    except subprocess.TimeoutExpired:
        return 124, "", f"{arguments[0]} did not answer within {COMMAND_TIMEOUT:g} s"
    return done.returncode, done.stdout, done.stderr


CREDENTIAL_ENV = "ZSCHED_CREDENTIAL"


def job_credentials(job):
    """The environment variables that carry ``job``'s credentials to it."""
    return {f"{CREDENTIAL_ENV}_{i}": credential.decode().strip()
            for i, credential in enumerate(job.credentials, 1)}


def describe_ended_job(job_id, fields):
    """Slurm's words for how a job ended, from ``scontrol show job`` fields."""
    state = fields.get("JobState", "ENDED")
    words = f"Slurm job {job_id} {state}"
    reason = fields.get("Reason", "None")
    if reason not in ("None", ""):
        words += f" ({reason})"
    if state != "COMPLETED" and fields.get("ExitCode", "0:0") != "0:0":
        words += f", exit code {fields['ExitCode']}"
    return words


def parse_scontrol(text):
    """``Key=Value`` fields of ``scontrol show job -o``."""
    fields = {}
    for item in text.split():
        key, _, value = item.partition("=")
        fields.setdefault(key, value)
    return fields


class SlurmClusterManager(ClusterManager):
    """Executors of ``cores_per_executor`` cores, ``executors_per_job`` to a Slurm job in
    ``partition`` (Slurm's default if None), with ``slurm_options`` added to ``sbatch``."""

    explains_losses_later = True

    def __init__(self, cores_per_executor=1, partition=None, slurm_options=(), executors_per_job=1,
                 python=sys.executable, log_level=None):
        if cores_per_executor < 1:
            raise ValueError(f"cores_per_executor must be >= 1, got {cores_per_executor}")
        if executors_per_job < 1:
            raise ValueError(f"executors_per_job must be >= 1, got {executors_per_job}")
        self.cores_per_executor = cores_per_executor
        self.partition = partition
        self.slurm_options = list(slurm_options)
        self.executors_per_job = executors_per_job
        self.python = python
        self.log_level = log_level
        self._ids = itertools.count(1)
        self._jobs = []              # SlurmJobs not yet reaped
        self._job_of = {}            # executor id -> its SlurmJob
        self._killed = set()         # executor ids killed, not yet reaped
        self._exits = []             # (executor id, how it ended), found by the watcher
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread = None
        self._environment = None
        self.node_option = None      # PREFER or NODELIST, decided at the first job that wants a node

    def attach(self, driver_url, app_id, credential_for):
        super().attach(driver_url, app_id, credential_for)
        self.job_name = f"zsched-{app_id}"
        self._environment = environment_without_secrets()
        self._thread = threading.Thread(target=self._watch, name="zsched-slurm", daemon=True)
        self._thread.start()

    # -- what the driver asks (bookkeeping only; Slurm is called from the watcher thread)

    def request_total(self, n, avoid_hosts=(), local_tasks=None, excluded_hosts=()):
        """Have ``n`` executors: new jobs for the missing ones. Each job asks for the node
        with the most waiting tasks that prefer it (``local_tasks``), which it lowers by the
        tasks it can take, and not for ``excluded_hosts``."""
        if None in avoid_hosts:
            return
        wanted = dict(local_tasks or {})
        with self._lock:
            missing = n - self._count_launched()
            while missing > 0:
                size = min(missing, self.executors_per_job)
                job = SlurmJob([str(next(self._ids)) for _ in range(size)])
                job.exclude = tuple(sorted(excluded_hosts))
                job.wanted_node = wanted_node(wanted, excluded_hosts)
                if job.wanted_node is not None:
                    wanted[job.wanted_node] -= self.cores_per_executor * size
                job.credentials = [self.credential(executor_id) for executor_id in job.executor_ids]
                if not all(job.credentials):
                    job.credentials = []
                self._jobs.append(job)
                for executor_id in job.executor_ids:
                    self._job_of[executor_id] = job
                missing -= size
        self._wake.set()

    def _count_launched(self):
        return sum(1 for i, job in self._job_of.items() if job.ended_as is None and i not in self._killed)

    def launched_ids(self):
        with self._lock:
            return [i for i, job in self._job_of.items() if job.ended_as is None and i not in self._killed]

    def queued_ids(self):
        """Executors whose job waits in Slurm's queue (never timed out for not registering)."""
        with self._lock:
            return [i for i, job in self._job_of.items() if job.waiting and i not in self._killed]

    def host_of(self, executor_id):
        return None  # a failed job is no host's fault here: Slurm places jobs

    def registered(self, executor_id):
        with self._lock:  # its job runs, whatever squeue said last
            job = self._job_of.get(executor_id)
            if job is not None and job.waiting:
                job.state = "RUNNING"

    def kill(self, executor_ids):
        """Cancel the jobs of these executors once all of a job's executors are killed, or at
        once while it still waits (its other executors are then replaced by a new job).
        Executors stopped inside a running shared job were told to stop by the driver."""
        with self._lock:
            for executor_id in executor_ids:
                job = self._job_of.get(executor_id)
                if job is None or job.ended_as is not None:
                    continue
                self._killed.add(executor_id)
                if job.waiting or all(i in self._killed for i in job.executor_ids):
                    job.cancel = True
                    self._killed.update(job.executor_ids)
        self._wake.set()

    def exit_reason(self, executor_id):
        with self._lock:
            job = self._job_of.get(executor_id)
            if job is None or job.ended_as is not None:
                return None if job is None else job.ended_as
        self._wake.set()  # a look at the queue soon
        return None

    def poll_exits(self):
        with self._lock:
            exits, self._exits = self._exits, []
            for executor_id, _ in exits:
                self._job_of.pop(executor_id, None)
                self._killed.discard(executor_id)
            return exits

    def stop(self, timeout):
        """Wait up to ``timeout`` for the executors told to stop to end their jobs, then
        cancel every job left (waiting ones included) and wait for Slurm to end them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._has_running_jobs():
            self._wake.set()
            time.sleep(0.1)
        with self._lock:
            for job in self._jobs:
                job.cancel = True
        self._wake.set()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self._has_live_jobs():
            self._wake.set()
            time.sleep(0.1)
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(COMMAND_TIMEOUT)

    def _has_running_jobs(self):
        with self._lock:
            return any(job.ended_as is None and not job.waiting for job in self._jobs)

    def _has_live_jobs(self):
        with self._lock:
            return any(job.ended_as is None for job in self._jobs)

    # -- the watcher thread: all Slurm commands

    def _watch(self):
        while not self._stopping:
            self._wake.wait(POLL_INTERVAL)
            self._wake.clear()
            try:
                self._submit_new_jobs()
                self._cancel_jobs()
                self._kill_jobs_still_there()
                self._look_at_queue()
            except Exception:
                log.exception("error while talking to Slurm (retried)")

    def job_script(self, job):
        """The batch script of ``job``: its executors, started side by side and waited for;
        the job fails (with its status) if one of them does."""
        lines = ["#!/bin/sh", f"# zsched executors {', '.join(job.executor_ids)} of {self.app_id}",
                 'host="${SLURMD_NODENAME:-$(hostname)}"', 'pids=""']
        for i in range(1, len(job.credentials) + 1):  # out of the environment at once
            lines.append(f'credential_{i}="${CREDENTIAL_ENV}_{i}"; unset {CREDENTIAL_ENV}_{i}')
        for i, executor_id in enumerate(job.executor_ids, 1):
            command = module_command("zsched.executor", self.python) + [
                "--driver-url", self.driver_url, "--executor-id", executor_id,
                "--cores", str(self.cores_per_executor), "--app-id", self.app_id]
            if self.log_level:
                command += ["--log-level", self.log_level]
            if job.credentials:  # on its standard input (printf is the shell's own), read once
                lines.append(f'printf \'%s\\n\' "$credential_{i}" | {shlex.join(command)} '
                             f'--credential-fd 0 --hostname "$host" & pids="$pids $!"')
            else:
                lines.append(f'{shlex.join(command)} --insecure --hostname "$host" & pids="$pids $!"')
        # scancel's SIGTERM reaches every process of the job: this shell waits on, so that the
        # SIGKILL that follows still finds the executors among the job's processes
        lines += ["trap '' TERM", "status=0", 'for pid in $pids; do wait "$pid" || status=$?; done',
                  "exit $status"]
        return "\n".join(lines) + "\n"

    def sbatch_arguments(self, job, placed=True):
        """sbatch's command line for ``job``; with ``placed``, the node it wants and those
        it must avoid."""
        arguments = ["sbatch", "--parsable", "--job-name", self.job_name, "--ntasks", "1",
                     "--cpus-per-task", str(self.cores_per_executor * len(job.executor_ids)),
                     "--no-requeue"]
        if self.partition:
            arguments += ["--partition", self.partition]
        if placed:
            arguments += self.placement_arguments(job)
        return arguments + self.slurm_options  # the user's last: they win

    def placement_arguments(self, job):
        if job.wanted_node is not None and self.node_option is None:
            self.node_option = node_option(
                lambda arguments: run_command(["sbatch", *arguments], env=self._environment)[0])
            log.info("Slurm jobs ask for the nodes their tasks want with %s", self.node_option)
        return placement_arguments(self.node_option, job.wanted_node, job.exclude)

    def _sbatch(self, job):
        """Submit ``job``: (exit status, stdout, stderr). A job that sbatch refuses with its
        placement is submitted again without it."""
        environment = {**self._environment, **job_credentials(job)}
        script = self.job_script(job)
        status, out, err = run_command(self.sbatch_arguments(job), script, environment)
        if status != 0 and job.wanted_node is not None and self.node_option == PREFER \
                and PREFER_REFUSED in err:
            self.node_option = NODELIST
            log.info("sbatch: %s (%s names node features, and %s is none): %s from now on",
                     _last_line(err), PREFER, job.wanted_node, NODELIST)
            status, out, err = run_command(self.sbatch_arguments(job), script, environment)
        placement = self.placement_arguments(job)
        if status != 0 and placement:
            log.info("sbatch refused a job with %s (%s): submitted without", " ".join(placement),
                     _last_line(err))
            job.wanted_node, job.exclude = None, ()
            status, out, err = run_command(self.sbatch_arguments(job, placed=False), script, environment)
        return status, out, err

    def _submit_new_jobs(self):
        with self._lock:
            new = [job for job in self._jobs if job.state == "SUBMITTING" and job.job_id is None
                   and not job.cancel]
            for job in list(self._jobs):  # killed before they were submitted
                if job.state == "SUBMITTING" and job.cancel and job.ended_as is None:
                    self._end(job, "cancelled before it was submitted")
        for job in new:
            status, out, err = self._sbatch(job)
            with self._lock:
                if status != 0:
                    self._end(job, f"sbatch failed: {_last_line(err) or f'exit status {status}'}")
                    continue
                job.job_id = out.strip().split(";")[0]
                job.state = "PENDING"
            log.info("submitted Slurm job %s for executor(s) %s%s", job.job_id, ", ".join(job.executor_ids),
                     placement_words(job.wanted_node, job.exclude))

    def _cancel_jobs(self):
        with self._lock:
            doomed = [job.job_id for job in self._jobs
                      if job.cancel and job.job_id is not None and job.ended_as is None
                      and job.state != "CANCELLING"]
            for job in self._jobs:
                if job.job_id in doomed:
                    job.state = "CANCELLING"
                    job.kill_at = time.monotonic() + KILL_GRACE
        if doomed:
            status, _, err = run_command(["scancel", *doomed], env=self._environment)
            if status != 0:
                log.warning("scancel %s: %s", " ".join(doomed), _last_line(err))

    def _kill_jobs_still_there(self):
        """SIGKILL to the jobs cancelled ``KILL_GRACE`` ago that Slurm still lists (a task
        holding the GIL in C keeps an executor from ending on SIGTERM)."""
        now = time.monotonic()
        with self._lock:
            doomed = [job.job_id for job in self._jobs
                      if job.kill_at is not None and now >= job.kill_at and job.ended_as is None]
            for job in self._jobs:
                if job.job_id in doomed:
                    job.kill_at = None
        if doomed:
            log.warning("Slurm job(s) %s still there %g s after scancel: SIGKILL", " ".join(doomed),
                        KILL_GRACE)
            status, _, err = run_command(["scancel", "--signal=KILL", "--full", *doomed],
                                         env=self._environment)
            if status != 0:
                log.info("scancel --signal=KILL %s: %s", " ".join(doomed), _last_line(err))

    def _look_at_queue(self):
        with self._lock:
            known = {job.job_id: job for job in self._jobs if job.job_id is not None and job.ended_as is None}
        if not known:
            return
        status, out, err = run_command(["squeue", "-h", "--name", self.job_name, "-o", "%i|%T|%r|%N"],
                                       env=self._environment)
        if status != 0:
            log.warning("squeue: %s", _last_line(err))
            return
        listed = {}
        for line in out.splitlines():
            job_id, state, reason, node = (line.split("|") + ["", "", ""])[:4]
            listed[job_id.strip()] = (state.strip(), reason.strip(), node.strip())
        for job_id, job in known.items():
            if job_id in listed:
                state, reason, node = listed[job_id]
                with self._lock:
                    if job.state != "CANCELLING" or state not in _ALIVE:
                        job.state = state
                    job.node = node or None
                if state in _ALIVE:
                    continue
            self._ended(job)

    def _ended(self, job):
        """``job`` left Slurm's queue: record how it ended (from scontrol)."""
        status, out, _ = run_command(["scontrol", "show", "job", "-o", job.job_id], env=self._environment)
        fields = parse_scontrol(out) if status == 0 else {}
        if fields.get("JobState") in _ALIVE:
            return  # squeue missed it for a moment
        with self._lock:
            self._end(job, describe_ended_job(job.job_id, fields) if fields
                      else f"Slurm job {job.job_id} ended (Slurm no longer knows it)")

    def _end(self, job, reason):
        """Call with the lock held."""
        job.ended_as = reason
        self._jobs.remove(job)
        self._exits.extend((executor_id, reason) for executor_id in job.executor_ids)
        level = logging.INFO if job.cancel else logging.WARNING
        log.log(level, "executor(s) %s: %s", ", ".join(job.executor_ids), reason)


def _last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""
