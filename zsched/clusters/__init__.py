"""The clusters users start: ``LocalCluster`` (``local.py``), ``SSHCluster`` (``ssh.py``)
and ``SlurmCluster`` (``slurm.py``), exported as ``zsched.LocalCluster`` and so on.

Each is a ``Cluster`` (``base.py``): a driver process on this host, which starts the
executors through one of the driver's cluster managers (``zsched.cluster_managers``).
"""
