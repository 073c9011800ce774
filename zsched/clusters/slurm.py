"""``zsched.SlurmCluster``: a driver process on this machine and executors as Slurm jobs,
as ``bin/driver --slurm``."""
from .base import Cluster


class SlurmCluster(Cluster):
    """``n_executors`` executors as Slurm jobs (``executors_per_job`` to a job) in
    ``partition``, with ``slurm_options`` added to ``sbatch`` (``["--time=60"]``); a context
    manager, like ``LocalCluster``. Executors run ``python`` (default: this interpreter:
    Slurm nodes usually share the file system). The driver listens on ``host`` (default
    every address). It waits for ``wait_for_executors`` executors to register (default 0:
    jobs may wait in Slurm's queue; ``client().executor_ids()`` shows who came). The other
    arguments are those of ``LocalCluster``, dynamic allocation included, but
    ``in_process``: the driver runs in a process of its own.
    """

    def __init__(self, n_executors=1, cores_per_executor=1, *, partition=None, slurm_options=(),
                 executors_per_job=1, python=None, host="0.0.0.0", wait_for_executors=0, **kwargs):
        self._slurm_arguments = ["--slurm", "--executors-per-job", str(executors_per_job)]
        if partition:
            self._slurm_arguments += ["--partition", partition]
        for option in slurm_options:
            self._slurm_arguments.append(f"--slurm-option={option}")
        if python:
            self._slurm_arguments += ["--remote-python", python]
        super().__init__(n_executors, cores_per_executor, host=host, wait=wait_for_executors, **kwargs)

    def _manager_arguments(self, n_executors):
        return [*self._slurm_arguments, "--initial-executors", str(n_executors)]
