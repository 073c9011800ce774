"""A real single-node Slurm for the Slurm cluster tests: munged, slurmctld and slurmd,
started by the test run itself, without systemd, cgroups or an accounting database.

Layout of ``SlurmCluster(cpus)`` (the directory name carries the run's pid: the next run
stops and removes what a dead run left)::

    /tmp/zsched-slurm-{pid}-XXXX/   0755 (munged, slurmd and jobs must traverse it)
        slurm.conf                  ClusterName=zsched, two loopback ports free at start
        munge/  munge.key (0400), munge.socket.2, munged.pid, munged.seed
        state/  slurmctld's StateSaveLocation (0700)      spool/  slurmd's spool dir
        log/    munged.log, slurmctld.log, slurmd.log, *.out (the daemons' own output),
                jobcomp.log (a line per finished job)
        jobs/   1777, a place for job output files

    node        {short hostname}, NodeAddr 127.0.0.1, CPUs=cpus whatever this machine has
                (SlurmdParameters=config_overrides), one core per CPU (CR_Core)
    partitions  debug  Default, the node
                tiny   the node, MaxCPUsPerNode=1

A job asking more CPUs per node than its partition gives (``-p tiny -c 2``, or ``-c 3`` in
debug) is accepted by sbatch and stays PENDING forever with Reason=PartitionConfig:
EnforcePartLimits=NO (also Slurm's default) queues it instead of refusing it; with ALL,
sbatch fails with "More processors requested than permitted".

The daemons run in the foreground (``munged -F``, ``slurmctld -D``, ``slurmd -D``) as
children of the test process, marked with ZSCHED_SLURM_DIR=<the directory> in their
environment (slurmctld's slurmscriptd inherits it). slurmd starts each slurmstepd with an
empty environment, through an intermediate process, so it is a child of init: it is known
by its socket in spool/. A job's processes are known by SLURM_JOB_ID and our SLURM_CONF in
their environment, also those that left their slurmstepd's tree (which scancel misses).
``close()`` cancels every job, then stops all of these: SIGTERM, SIGKILL after 10 s.

tests/conftest.py fails a test that leaves a new child of the test process alive; the
daemons are not new to any test: pytest sets a session fixture up before the function
fixtures of the test that first asks for it, so they exist before that test's snapshot.

Learned on Debian 12 (slurm-wlm 22.05, munge 0.5.15):

- munged refuses a socket directory not executable by all, and a key readable by others.
- slurmctld runs only where SlurmctldHost is this host's short name (or localhost); the
  address in parentheses spares name resolution.
- The client commands need only SLURM_CONF: they find munged's socket in its AuthInfo.
- No sacct without slurmdbd: a finished job's state stays in ``scontrol show job`` for
  MinJobAge seconds (300 here).
- slurmctld looks at new batch jobs once a second, after batch_sched_delay (3 s by
  default; 0 here): sbatch to RUNNING takes 0 to 1 s. Until then a pending job's Reason is
  None (or Priority behind another pending one), then Resources when the node is full.
- KillWait=5 (default 30): scancel ends a job that ignores SIGTERM within about 5 s.
- The whole cluster is up (node idle) 0.2 to 1.2 s after the start.
"""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

import psutil

MARK = "ZSCHED_SLURM_DIR"
PREFIX = "zsched-slurm-"
BACKFILL_INTERVAL = 1  # seconds between the backfill scheduler's passes (bf_interval)
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")


class SlurmUnavailable(RuntimeError):
    """This machine cannot run the cluster: not root, or the packages are missing."""


def unavailable():
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "slurmd must run as root"
    missing = [b for b in BINARIES if not shutil.which(b)]
    if missing:
        return f"needs slurmctld, slurmd, slurm-client and munge (missing: {', '.join(missing)})"
    return None


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _alive(proc):
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ours(proc, base):
    """Whether ``proc`` belongs to the cluster in ``base``: a daemon (or slurmscriptd),
    marked; a slurmstepd (started by slurmd with an empty environment), by its socket in
    the spool dir or its open log; a job's process, by the job's environment."""
    env = proc.environ()
    if env.get(MARK) == base:
        return True
    if env.get("SLURM_CONF") == os.path.join(base, "slurm.conf") and "SLURM_JOB_ID" in env:
        return True  # also one that left its slurmstepd's tree
    if proc.name() == "slurmstepd":
        paths = [f.path for f in proc.open_files()]
        paths += [c.laddr for c in proc.net_connections("unix")]
        return any(str(path).startswith(base + os.sep) for path in paths)
    return False


def cluster_processes(base):
    """The processes of the cluster in ``base`` (see ``_ours``) and all their descendants."""
    found = {}
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and _ours(proc, base):
                found[proc.pid] = proc
                found.update((c.pid, c) for c in proc.children(recursive=True))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return list(found.values())


def process_names(procs):
    """The names of those of ``procs`` still alive: a process found a moment ago may be gone."""
    names = set()
    for proc in procs:
        try:
            names.add(proc.name())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return names


def stop_processes(procs, timeout=10):
    """SIGTERM, then SIGKILL to what is alive after ``timeout`` s."""
    procs = [p for p in procs if _alive(p)]
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, 5)


def remove_stale():
    """Stop the daemons and jobs of earlier runs whose process is gone; remove their dirs."""
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
        if m and not psutil.pid_exists(int(m.group(1))):
            base = os.path.join(tmp, name)
            # again while any is left: a slurmstepd may start its job's script meanwhile
            for _ in range(5):
                procs = cluster_processes(base)
                if not procs:
                    break
                stop_processes(procs, timeout=0.5)
            shutil.rmtree(base, ignore_errors=True)


class SlurmCluster:
    """A single-node Slurm of ``cpus`` CPUs; ``close()`` (or ``with``) stops all of it."""

    partitions = ("debug", "tiny")

    def __init__(self, cpus=2, timeout=60):
        reason = unavailable()
        if reason:
            raise SlurmUnavailable(reason)
        self.cpus = cpus
        self.node = socket.gethostname().split(".")[0]
        self._procs, self._closed = {}, False
        remove_stale()
        self.base = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
        os.chmod(self.base, 0o755)
        try:
            self._layout()
            self._start(timeout)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ making

    def _layout(self):
        b = self.base
        self.conf_path = os.path.join(b, "slurm.conf")
        self.log_dir = os.path.join(b, "log")
        self.jobs_dir = os.path.join(b, "jobs")
        self.munge_socket = os.path.join(b, "munge", "munge.socket.2")
        for name, mode in (("munge", 0o755), ("state", 0o700), ("spool", 0o755),
                           ("log", 0o755), ("jobs", 0o1777)):
            os.mkdir(os.path.join(b, name))
            os.chmod(os.path.join(b, name), mode)
        self.munge_key = os.path.join(b, "munge", "munge.key")
        with open(os.open(self.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400), "wb") as f:
            f.write(os.urandom(1024))
        self.ctld_port, self.slurmd_port = _free_ports(2)
        with open("/proc/meminfo") as f:
            mem_mb = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1)) * 9 // 10 // 1024
        conf = f"""\
ClusterName=zsched
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool
SlurmctldPidFile={b}/state/slurmctld.pid
SlurmdPidFile={b}/spool/slurmd.pid
SlurmctldLogFile={self.log_dir}/slurmctld.log
SlurmdLogFile={self.log_dir}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.log_dir}/jobcomp.log
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
MinJobAge=300
KillWait=5
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval={BACKFILL_INTERVAL}
EnforcePartLimits=NO
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
NodeName={self.node} NodeAddr=127.0.0.1 NodeHostname={self.node} CPUs={self.cpus} \
Boards=1 SocketsPerBoard=1 CoresPerSocket={self.cpus} ThreadsPerCore=1 RealMemory={mem_mb} \
State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
PartitionName=tiny Nodes={self.node} MaxNodes=1 MaxCPUsPerNode=1 MaxTime=INFINITE State=UP
"""
        with open(self.conf_path, "w") as f:
            f.write(conf)
        self.env = {"SLURM_CONF": self.conf_path}

    def _spawn(self, name, *args):
        log = open(os.path.join(self.log_dir, f"{name}.out"), "ab")
        with log:
            self._procs[name] = subprocess.Popen(
                [name, *args], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env={**os.environ, **self.env, MARK: self.base})

    def _wait(self, what, predicate, timeout, daemon):
        deadline = time.monotonic() + timeout
        while not predicate():
            if self._procs[daemon].poll() is not None or time.monotonic() > deadline:
                logs = "".join(self._tail(n) for n in (daemon + ".out", daemon + ".log"))
                status = self._procs[daemon].poll()
                raise RuntimeError(f"{what}: {daemon} exit status {status}\n{logs}")
            time.sleep(0.05)

    def _tail(self, name, lines=20):
        try:
            with open(os.path.join(self.log_dir, name), errors="replace") as f:
                return f"--- {name}\n" + "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def _start(self, timeout):
        b = self.base
        self._spawn("munged", "-F", f"--key-file={self.munge_key}", f"--socket={self.munge_socket}",
                    f"--pid-file={b}/munge/munged.pid", f"--seed-file={b}/munge/munged.seed",
                    f"--log-file={self.log_dir}/munged.log")
        self._wait("munged did not make its socket", lambda: os.path.exists(self.munge_socket),
                   timeout, "munged")
        self._spawn("slurmctld", "-D", "-f", self.conf_path)
        self._spawn("slurmd", "-D", "-f", self.conf_path, "-N", self.node)
        self._wait("slurmctld did not answer",
                   lambda: " is UP" in self.run("scontrol", "ping").stdout, timeout, "slurmctld")
        self._wait(f"node {self.node} not idle", lambda: self.run(
            "sinfo", "-h", "-n", self.node, "-o", "%T").stdout.strip() == "idle", timeout, "slurmd")

    # ------------------------------------------------------------ using

    def run(self, *args, env=None, timeout=60):
        """Run a Slurm command (``sbatch``, ``squeue``...) against this cluster, with this
        process's environment, ``self.env`` and ``env``: the CompletedProcess (text; not
        checked)."""
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL,
                              env={**os.environ, **self.env, **(env or {})})

    def submit(self, *args, env=None):
        """``sbatch --parsable *args``: the job id (a str); raises if sbatch refuses."""
        result = self.run("sbatch", "--parsable", *args, env=env)
        if result.returncode:
            raise RuntimeError(f"sbatch {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout.strip().split(";")[0]

    def jobs(self, all_states=False):
        """[{id, name, state, reason, node}] of the jobs in squeue (queued, running and
        completing ones; with ``all_states`` also those finished within MinJobAge)."""
        result = self.run("squeue", "-h", *(["-t", "all"] if all_states else []),
                          "-o", "%i\t%T\t%r\t%N\t%j")
        if result.returncode:
            raise RuntimeError(f"squeue: {result.stderr.strip()}")
        return [dict(zip(("id", "state", "reason", "node", "name"), line.split("\t", 4)))
                for line in result.stdout.splitlines()]

    def job_state(self, job_id):
        """(state, reason, exit code) of a job from ``scontrol show job``, e.g. ("FAILED",
        "NonZeroExitCode", "3:0"); also for finished jobs, within MinJobAge. None for a
        job Slurm does not know (any more)."""
        result = self.run("scontrol", "-o", "show", "job", str(job_id))
        if result.returncode:
            return None
        fields = dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", result.stdout))
        return fields["JobState"], fields["Reason"], fields["ExitCode"]

    def cancel_all(self, timeout=30):
        """Cancel every job and wait until none is left in squeue."""
        ids = [job["id"] for job in self.jobs()]
        if ids:
            self.run("scancel", *ids)
        deadline = time.monotonic() + timeout
        while self.jobs():
            if time.monotonic() > deadline:
                raise RuntimeError(f"jobs still in squeue {timeout} s after scancel: {self.jobs()}")
            time.sleep(0.1)

    def close(self):
        """Cancel every job, stop the daemons and what they started, remove the directory.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._procs.get("slurmctld") and self._procs["slurmctld"].poll() is None:
                self.cancel_all()
        finally:
            # the daemons, slurmscriptd, and any slurmstepd or job process still there
            stop_processes(cluster_processes(self.base))
            for proc in self._procs.values():
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            stop_processes(cluster_processes(self.base), timeout=5)  # none, unless one slipped in
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
